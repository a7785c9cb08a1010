"""The performance model of a worker role: its pass-time model and its default KV capacity.

`build` asks this module for the two numbers the reference derives from AIConfigurator:

* `timing_model` — `fixed` / `polynomial` (the reference's), `default` (the AIConfigurator
  database, `servesim.perf.aic`; a model or GPU it cannot serve falls back to the roofline
  with a warning) and `roofline` (servesim's analytic model, `servesim.perf.roofline`);
* `num_blocks` — fixed blocks, or the default capacity (`servesim.perf.capacity`), computed
  for every role before the run whatever the timing.

Warnings go to the ``servesim`` logger (one line each; shown on stderr when logging is not
configured). The analytic models (`servesim.perf.capacity`, `hardware`, `models`, `roofline`)
are imported by the functions that use them: a run with fixed timing and fixed capacity
starts without them.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from servesim.config.schema import (
    DefaultTiming as DefaultTimingConfig,
    EngineConfig,
    FixedCapacity,
    FixedTiming as FixedTimingConfig,
    GpuSpecConfig,
    PolynomialTiming as PolynomialTimingConfig,
    RooflineTiming as RooflineTimingConfig,
    WorkerConfig,
)
from servesim.engine.pass_time import TimingModel
from servesim.perf.timing import FixedTiming, PolynomialTiming
from servesim.errors import RunError
from servesim.build.apply import calibrated_kv_blocks, timing_with_fidelity

if TYPE_CHECKING:
    from servesim.perf import aic
    from servesim.perf.capacity import Capacity, Parallel
    from servesim.perf.hardware import GpuSpec
    from servesim.perf.models import ModelSpec
    from servesim.perf.roofline import RooflineTiming


def parallel(worker: WorkerConfig) -> Parallel:
    from servesim.perf.capacity import Parallel

    par = worker.parallelism
    return Parallel(tp=par.tensor, pp=par.pipeline, attention_dp=par.attention_data,
                    moe_tp=par.moe_tensor, moe_ep=par.moe_expert)


# -- timing ---------------------------------------------------------------------------------------

def timing_model(engine: EngineConfig, worker: WorkerConfig, role: str) -> TimingModel:
    """The pass-time model of one role's workers."""
    timing = worker.timing
    if isinstance(timing, FixedTimingConfig):
        return FixedTiming(timing.prefill_ms, timing.decode_ms)
    if isinstance(timing, PolynomialTimingConfig):
        return PolynomialTiming()
    if isinstance(timing, RooflineTimingConfig):
        return timing_with_fidelity(roofline_timing(engine, worker, timing), engine, worker)
    assert isinstance(timing, DefaultTimingConfig)
    return timing_with_fidelity(default_timing(engine, worker, timing), engine, worker)


def default_timing(engine: EngineConfig, worker: WorkerConfig, timing: DefaultTimingConfig) -> TimingModel:
    """AIConfigurator timing, or the roofline (with a warning) when the database cannot serve it."""
    import logging

    from servesim.perf import aic
    from servesim.perf.hardware import aic_system, ready_systems_dir, systems_dir

    systems, how = systems_dir(engine.aic_systems_path)
    ready_systems_dir(systems, how, engine.hardware, engine.backend, engine.backend_version)
    try:
        gpu = aic_system(engine.hardware, systems)
        if gpu is None or not gpu.has_aic_data:
            raise aic.AicUnavailable(f"the database ({systems}) has no performance data for GPU "
                                     f"{engine.hardware!r}")
        version = aic.resolve_version(systems, engine.hardware, engine.backend, engine.backend_version)
        model = aic.aic_timing(aic_key(engine, worker, version, str(systems)), timing.interpolate_context)
    except aic.AicUnavailable as exc:
        logging.getLogger("servesim").warning(
            "servesim: warning: AIConfigurator cannot time %s on %s with %s (%s); "
            "falling back to the roofline model (timing.type: roofline)",
            engine.model, engine.hardware, engine.backend, exc)
        return roofline_timing(engine, worker, RooflineTimingConfig())
    return model


def aic_key(engine: EngineConfig, worker: WorkerConfig, version: str, systems: str) -> aic.AicKey:
    """The AIConfigurator engine key of a role at a backend version."""
    from servesim.perf import aic

    par = worker.parallelism
    moe = par.moe_tensor * par.moe_expert > 1
    return aic.AicKey(
        model=engine.model, system=engine.hardware, backend=engine.backend,
        version=version, tp=par.tensor, pp=par.pipeline, attention_dp=par.attention_data,
        moe_tp=par.moe_tensor if moe else None, moe_ep=par.moe_expert if moe else None,
        block_size=worker.kv_cache.block_size_for(engine.backend), systems_path=systems,
        nextn=worker.speculative.num_speculative_tokens if worker.speculative is not None else 0)


_ROOFLINES: dict[tuple, RooflineTiming] = {}


def roofline_timing(engine: EngineConfig, worker: WorkerConfig, timing: RooflineTimingConfig) -> RooflineTiming:
    """servesim's analytic timing (shared by the workers of a role, like its memo)."""
    from servesim.perf.models import resolve_model
    from servesim.perf.roofline import RooflineParams, RooflineTiming

    model = resolve_model(engine.model)
    gpu = gpu_for(engine, worker)
    p = parallel(worker)
    knobs = ("gemm_efficiency", "attention_efficiency", "memory_efficiency", "launch_us", "gemm_floor_us",
             "pass_overhead_ms")
    params = RooflineParams.for_gpu(gpu, **{k: float(getattr(timing, k)) for k in knobs
                                            if k in timing.model_fields_set or not k.endswith("_efficiency")})
    key = (model, gpu.name, gpu.source, timing.gpu_spec, p, params)
    found = _ROOFLINES.get(key)
    if found is None:
        found = _ROOFLINES[key] = RooflineTiming(model, gpu, tp=p.tp, pp=p.pp, attention_dp=p.attention_dp,
                                                 moe_tp=p.moe_tp, moe_ep=p.moe_ep, params=params)
    return found


def _inline_gpu(name: str, spec: GpuSpecConfig) -> GpuSpec:
    from servesim.perf.hardware import spec_from_table

    return spec_from_table(name, spec.model_dump(exclude_none=True), "timing.gpu_spec")


def gpu_for(engine: EngineConfig, worker: WorkerConfig) -> GpuSpec:
    """The GPU constants of a role: a roofline's inline spec or GPU name, else engine.hardware."""
    from servesim.perf.hardware import ready_systems_dir, resolve_gpu, systems_dir

    timing = worker.timing
    name = (timing.gpu if isinstance(timing, RooflineTimingConfig) else None) or engine.hardware
    if isinstance(timing, RooflineTimingConfig) and timing.gpu_spec is not None:
        return _inline_gpu(name, timing.gpu_spec)
    systems, how = systems_dir(engine.aic_systems_path)
    ready_systems_dir(systems, how)
    return resolve_gpu(name, systems)


# -- capacity -------------------------------------------------------------------------------------

def capacity(engine: EngineConfig, worker: WorkerConfig, role: str, sglang_static: bool = False, *,
             upstream013: bool = False) -> Capacity:
    """The default KV capacity of one rank of a role (servesim's formula; see engine.capacity);
    `sglang_static` sizes an SGLang pool by SGLang's own rule (`servesim.perf.static_memory`),
    `upstream013` by upstream 0.13's version of it (`compat: upstream-0.13`)."""
    from servesim.perf.capacity import kv_blocks
    from servesim.perf.hardware import ready_systems_dir, systems_dir
    from servesim.perf.models import ModelNotFound, resolve_model

    cap = worker.kv_cache.capacity
    assert not isinstance(cap, FixedCapacity)
    try:
        model = resolve_model(engine.model)
    except ModelNotFound as exc:
        raise RunError(f"kv_cache.capacity 'default' needs the model's HF config: {exc}; "
                       "or set capacity: {type: fixed, blocks: N}") from None
    systems, how = systems_dir(engine.aic_systems_path)
    if model.family is None:  # the database's own memory model: it needs the GPU's data
        ready_systems_dir(systems, how, engine.hardware, engine.backend, engine.backend_version)
    gpu = gpu_for(engine, worker)
    aic_model = version = None
    if model.family is None and gpu.has_aic_data:
        from servesim.perf import aic

        try:
            aic_model = aic.aic_model_name(engine.model)
            version = aic.resolve_version(systems, engine.hardware, engine.backend, engine.backend_version)
        except aic.AicUnavailable:
            aic_model = version = None
    if upstream013 and engine.backend == "sglang":
        return _sglang_013(engine, worker, role, model, gpu, aic_model, version, str(systems))
    if sglang_static and engine.backend == "sglang":
        return _sglang_static(engine, worker, role, model, gpu, aic_model, version, str(systems))
    return kv_blocks(
        model, gpu, engine.backend, parallel(worker),
        block_size=worker.kv_cache.block_size_for(engine.backend),
        max_batched_tokens=worker.scheduler.max_batched_tokens,
        max_sequences=worker.scheduler.max_sequences_for(role),  # type: ignore[arg-type]
        fraction=cap.memory_fraction_for(engine.backend),
        aic_model=aic_model, version=version, systems_path=str(systems),
        reserved_bytes=cap.cuda_graph_reserved_bytes)


def _sglang_static(engine: EngineConfig, worker: WorkerConfig, role: str, model: ModelSpec, gpu: GpuSpec,
                   aic_model: str | None, version: str | None, systems: str) -> Capacity:
    """An SGLang pool sized by its static fraction, with the database's weights and KV bytes per
    token where it can build the model, else servesim's formula."""
    from servesim.perf.capacity import weight_bytes
    from servesim.perf.static_memory import aic_breakdown, static_blocks

    cap = worker.kv_cache.capacity
    assert not isinstance(cap, FixedCapacity)
    fraction, graphs = cap.memory_fraction_for(engine.backend), cap.cuda_graph_reserved_bytes
    block = worker.kv_cache.block_size_for(engine.backend)
    par = parallel(worker)
    if aic_model is not None and version is not None:
        try:
            weights, per_token = aic_breakdown(
                aic_model, gpu.name, version, par, max_batched_tokens=worker.scheduler.max_batched_tokens,
                max_sequences=worker.scheduler.max_sequences_for(role), systems_path=systems)  # type: ignore[arg-type]
        except Exception:  # noqa: BLE001 - any failure of the foreign estimator: servesim's formula
            pass
        else:
            return static_blocks(gpu.mem_capacity, weights, per_token, fraction, block, "aiconfigurator", graphs)
    return static_blocks(gpu.mem_capacity, weight_bytes(model, par), model.kv_bytes_per_token(par.tp), fraction,
                         block, "servesim" if model.family is not None else "generic", graphs)


def _sglang_013(engine: EngineConfig, worker: WorkerConfig, role: str, model: ModelSpec, gpu: GpuSpec,
                aic_model: str | None, version: str | None, systems: str) -> Capacity:
    """An SGLang pool sized as upstream 0.13 sizes it: the database's breakdown where it can build
    the model, else servesim's weights and the GPU's reserves."""
    from servesim.perf.capacity import check_parallelism, runtime_reserves, weight_bytes
    from servesim.perf.static_memory import (StaticMemory, aic_static_memory, corrects_deepseek,
                                             sglang_deepseek_weights, upstream013_blocks)

    cap = worker.kv_cache.capacity
    assert not isinstance(cap, FixedCapacity)
    fraction = cap.memory_fraction_for(engine.backend)
    block = worker.kv_cache.block_size_for(engine.backend)
    par = parallel(worker)
    graphs = cap.cuda_graph_reserved_bytes
    if model.family is None and aic_model is not None and version is not None:
        try:
            memory = aic_static_memory(
                aic_model, gpu.name, version, par, max_batched_tokens=worker.scheduler.max_batched_tokens,
                max_sequences=worker.scheduler.max_sequences_for(role), systems_path=systems)  # type: ignore[arg-type]
        except Exception:  # noqa: BLE001 - any failure of the foreign estimator: servesim's formula
            pass
        else:
            if corrects_deepseek(model, par):
                memory = replace(memory, weights=sglang_deepseek_weights(memory.weights, model, par))
            return upstream013_blocks(gpu.mem_capacity, memory, fraction, block, graphs, "aiconfigurator")
    check_parallelism(model, par)
    others, nccl = runtime_reserves(gpu, "sglang", par.tp)
    memory = StaticMemory(weight_bytes(model, par), others, nccl, float(model.kv_bytes_per_token(par.tp)))
    return upstream013_blocks(gpu.mem_capacity, memory, fraction, block, graphs,
                              "servesim" if model.family is not None else "generic")


def num_blocks(engine: EngineConfig, worker: WorkerConfig, role: str, sglang_static: bool = False, *,
               upstream013: bool = False) -> int:
    """KV blocks per scheduler rank of one role's workers (`sglang_static`, `upstream013`: see
    `capacity`)."""
    cap = worker.kv_cache.capacity
    if isinstance(cap, FixedCapacity):
        return cap.blocks_for(worker.kv_cache.block_size_for(engine.backend), worker.kv_cache.bytes_per_token)
    measured = calibrated_kv_blocks(worker, worker.kv_cache.block_size_for(engine.backend))
    if measured is not None:
        return measured
    return capacity(engine, worker, role, sglang_static, upstream013=upstream013).blocks
