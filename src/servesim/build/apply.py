"""What a worker's fidelity keys (`timing.mixed_pass`, `frontend_ms`, `dp_sync_ms`, `calibration`)
change.

Five answers for `servesim.build`:

* `timing_with_fidelity` — the role's timing model with fused mixed passes, calibrated phase
  times and/or the DP ranks' step synchronisation;
* `dp_sync_ms` — that synchronisation's per-pass cost (`servesim.perf.dpsync`);
* `calibrated_kv_blocks` — the KV capacity a calibration file measured (default capacity only);
* `frontend_ms` — the per-request front-end latency of the deployment;
* `async_scheduling` — whether a role's workers plan their next pass during the running one.

Front-end latency default (fused mode): the part of a request's time to first token spent
outside the engine's scheduler. On one GPU it is the API server's work — HTTP and streaming,
prompt tokenisation, detokenisation of the first token, the IPC hops to and from the engine core
— about 3 ms. With several GPUs vLLM runs a multi-process executor: every step is broadcast to
the worker processes and its output gathered back, which adds about 3 ms to a new request's
first step plus about 2 ms per doubling of the GPUs. The wait for the engine's step boundary is
not part of it: the simulated engine models it, and with async scheduling
(`scheduler.async_scheduling`) one more pass. docs/timing.md has the derivation.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from servesim.config.schema import EngineConfig, WorkerConfig
    from servesim.engine.pass_time import TimingModel
    from servesim.perf.calibration import Calibration

API_SERVER_MS = 3.0
"""Front-end latency of a one-GPU worker in fused mode (ms)."""
EXECUTOR_MS = 3.0
"""What a multi-process executor adds (ms), besides `PER_DOUBLING_MS` per doubling of GPUs."""
PER_DOUBLING_MS = 2.0


def default_frontend_ms(gpus: int) -> float:
    """The fused-mode front-end latency of an engine whose executor spans `gpus` GPUs (tensor x
    pipeline; attention data-parallel ranks are engines of their own): 3 ms on one GPU, 8, 10,
    12 ms on 2, 4, 8."""
    if gpus <= 1:
        return API_SERVER_MS
    return API_SERVER_MS + EXECUTOR_MS + PER_DOUBLING_MS * math.log2(gpus)


def _fused(worker: WorkerConfig) -> bool:
    return getattr(worker.timing, "mixed_pass", "sum") == "fused"


def _calibration(timing: Any) -> Calibration | None:
    path = getattr(timing, "calibration", None)
    if path is None:
        return None
    from servesim.perf.calibration import load_calibration

    return load_calibration(path)


def timing_with_fidelity(model: TimingModel, engine: EngineConfig, worker: WorkerConfig) -> TimingModel:
    """`model` as the role's `timing` section asks: fused mixed passes, calibrated phases."""
    if _fused(worker):
        from servesim.perf.mixed import fused

        model = fused(model, _mixed_attention_factor(engine, worker), vllm=engine.backend == "vllm")
    calibration = _calibration(worker.timing)
    if calibration is not None:
        from servesim.perf.calibration import calibrated

        model = calibrated(model, calibration)
    sync = dp_sync_ms(engine, worker)
    if sync > 0:
        from servesim.perf.dpsync import dp_synced

        model = dp_synced(model, sync)
    return model


def dp_sync_ms(engine: EngineConfig, worker: WorkerConfig) -> float:
    """Per-pass cost of the role's DP step synchronisation: 0 without attention DP, else the
    `dp_sync_ms` key, else in fused mode `dpsync.DEFAULT_MS` for a vLLM MoE model, else 0."""
    if worker.parallelism.attention_data <= 1:
        return 0.0
    explicit = getattr(worker.timing, "dp_sync_ms", None)
    if explicit is not None:
        return float(explicit)
    if not _fused(worker) or engine.backend != "vllm" or not _is_moe(engine):
        return 0.0
    from servesim.perf.dpsync import DEFAULT_MS

    return DEFAULT_MS


def _is_moe(engine: EngineConfig) -> bool:
    from servesim.perf.models import ModelNotFound, resolve_model

    try:
        return resolve_model(engine.model).is_moe
    except ModelNotFound:
        return False


def _mixed_attention_factor(engine: EngineConfig, worker: WorkerConfig) -> float:
    """k of `servesim.perf.mixed` for the role: 1 unless vLLM runs a grouped-query model
    with FlashAttention-2."""
    from servesim.perf.mixed import FA2_GPUS, mixed_attention_factor

    gpu = getattr(worker.timing, "gpu", None) or engine.hardware
    if engine.backend != "vllm" or gpu not in FA2_GPUS:
        return 1.0
    from servesim.perf.models import ModelNotFound, resolve_model

    try:
        model = resolve_model(engine.model)
    except ModelNotFound:
        return 1.0
    if model.mla:
        return 1.0
    tp = worker.parallelism.tensor
    return mixed_attention_factor(max(model.num_heads // tp, 1) / model.kv_heads_per_rank(tp))


def calibrated_kv_blocks(worker: WorkerConfig, block_size: int) -> int | None:
    """KV blocks per rank from the role's calibration file, when it measured the capacity."""
    calibration = _calibration(worker.timing)
    if calibration is None or calibration.kv_tokens is None:
        return None
    return max(1, calibration.kv_tokens // block_size)


def frontend_ms(worker: WorkerConfig) -> float:
    """Front-end latency of requests entering `worker`'s role: the `frontend_ms` key, else the
    calibration file's, else the fused-mode default for one engine's GPU count, else 0."""
    timing = worker.timing
    explicit = getattr(timing, "frontend_ms", None)
    if explicit is not None:
        return float(explicit)
    calibration = _calibration(timing)
    if calibration is not None and calibration.frontend_ms is not None:
        return calibration.frontend_ms
    if _fused(worker):
        par = worker.parallelism
        return default_frontend_ms(par.tensor * par.pipeline)
    return 0.0


def async_scheduling(worker: WorkerConfig) -> bool:
    """`scheduler.async_scheduling`, by default on exactly when the role's passes are fused."""
    explicit = worker.scheduler.async_scheduling
    return explicit if explicit is not None else _fused(worker)
