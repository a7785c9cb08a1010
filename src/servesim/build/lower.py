"""Lowering a validated `SimConfig`: every default resolved, every stage's settings made.

Block sizes, scheduler limits, context length, KV capacity, timing models (`build.perf`),
request counts and arrivals (`build.traffic`), the router and the planner (`build.control`):
everything is resolved here, into settings types the stages own, so nothing after `lower`
reads the user's config.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from servesim.build.control import planner_settings, router_spec
from servesim.build.describe import describe
from servesim.build.traffic import traffic_spec
from servesim.config.schema import EngineConfig, Role, SimConfig, SlaConfig, WorkerConfig, runtime_rejections
from servesim.engine.cache.disk import G3Settings
from servesim.engine.cache.host import HostOffloadSettings
from servesim.engine.factory import make_rank
from servesim.engine.interface import HandoffRank
from servesim.engine.pass_time import TimingModel
from servesim.engine.rank import RankConfig, SglangSettings, SpeculativeSettings
from servesim.errors import RunError
from servesim.build.apply import async_scheduling, frontend_ms
from servesim.build.resolve import provenance, resolve_backend_version, resolve_fidelity
from servesim.placement.factory import RouterSpec
from servesim.report.sla import Sla
from servesim.traffic.spec import TrafficSpec

if TYPE_CHECKING:
    from servesim.scaling.planner.settings import PlannerSettings


@dataclass(eq=False, repr=False)
class PoolSpec:
    """One role's workers: how many, how each is split, and the settings of each rank."""

    role: str
    replicas: int
    dp_size: int
    gpus_per_worker: int
    rank_config: RankConfig
    timing: TimingModel
    startup_ms: float = 0.0
    async_scheduling: bool = False
    """A request reaching a busy worker joins the pass after next (see `engine.worker.Worker`)."""

    def make_ranks(self, worker_id: int, *, lazy_decode: bool = True) -> list[HandoffRank]:
        """The DP ranks of worker `worker_id` (which seeds their speculative-decoding samplers)."""
        first = worker_id * self.dp_size
        return [make_rank(self.rank_config, self.timing, lazy_decode=lazy_decode, sampler_seed=first + r)
                for r in range(self.dp_size)]

    def recording_metrics(self) -> PoolSpec:
        """The same pool with ranks that publish forward-pass metrics every pass."""
        return replace(self, rank_config=replace(self.rank_config, record_metrics=True))


@dataclass(frozen=True, eq=False, repr=False)
class TransferSpec:
    """How prefill workers ship KV to decode workers (disaggregated serving)."""

    bytes_per_token: int | None
    """Per-rank KV bytes per token of the prefill role (None: transfers take no time)."""
    bandwidth_gb_s: float | None
    mode: str
    """"full_prompt" (the whole prompt moves) or "destination_missing" (only absent blocks)."""

    def delay_ms(self, tokens: int) -> float:
        """Transfer time of `tokens` tokens, as the reference computes it."""
        if not self.bytes_per_token or not self.bandwidth_gb_s or self.bandwidth_gb_s <= 0:
            return 0.0
        return ((tokens * self.bytes_per_token) / (self.bandwidth_gb_s * 1e9)) * 1000


@dataclass(eq=False, repr=False)
class LoweredRun:
    """Everything needed to build one replay."""

    pools: list[PoolSpec]
    """Aggregated: one "aggregated" pool; disaggregated: "prefill" then "decode"."""
    transfer: TransferSpec | None
    traffic: TrafficSpec
    router: RouterSpec
    planner: PlannerSettings | None
    """The planner's settings when the config enables it."""
    time_cap_ms: float | None
    sla: Sla | None
    provenance: dict[str, str] = field(default_factory=dict)
    """What the run resolved (`servesim.build.resolve.provenance`)."""
    deployment: dict[str, str] = field(default_factory=dict)
    """What the run simulates, in words (`build.describe`): the report's headline."""

    @property
    def disaggregated(self) -> bool:
        return self.transfer is not None

    def pool(self, role: str) -> PoolSpec:
        return next(p for p in self.pools if p.role == role)


def lower(config: SimConfig, *, unservable: str = "reject") -> LoweredRun:
    """Resolve every default of a config.

    `unservable` is what happens to a request that can never fit a worker's KV pool: "reject"
    it (with a reason) or "fail" the run the way the reference does.
    """
    problems = runtime_rejections(config)
    if problems:
        raise RunError("; ".join(problems))
    config = resolve_backend_version(resolve_fidelity(config))
    engine = config.engine
    stop = config.traffic.stop
    cap = stop.max_virtual_time_seconds if stop is not None else None
    pools = [_pool(config, role, worker, unservable, capped=cap is not None) for role, worker in engine.roles.items()]
    transfer = _transfer(engine) if engine.mode == "disaggregated" else None
    sla = config.evaluation.sla
    labels = {pool.role: str(getattr(pool.timing, "label", type(pool.timing).__name__)) for pool in pools}
    return LoweredRun(
        provenance=provenance(config, labels),
        pools=pools,
        transfer=transfer,
        traffic=traffic_spec(config.traffic, aggregated=engine.mode == "aggregated",
                             frontend_ms=frontend_ms(_entry_role(engine))),
        router=router_spec(config.router),
        planner=planner_settings(config.planner, sla, transfer is not None),
        time_cap_ms=1000 * cap if cap is not None else None,
        sla=_sla(sla) if sla is not None else None,
        deployment=describe(config),
    )


def _sla(sla: SlaConfig) -> Sla:
    """The report's SLA: the per-request thresholds and the run-level targets."""
    return Sla(sla.per_request("ttft_ms"), sla.per_request("itl_ms"), sla.per_request("e2e_ms"),
               tuple(sla.run_targets()))


def _entry_role(engine: EngineConfig) -> WorkerConfig:
    """The role whose workers requests reach first (aggregated, or prefill)."""
    return next(iter(engine.roles.values()))


def _transfer(engine: EngineConfig) -> TransferSpec:
    kv = engine.kv_transfer
    prefill = engine.workers.prefill
    assert prefill is not None
    return TransferSpec(
        bytes_per_token=_kv_bytes_per_token(engine, prefill) if kv is not None else None,
        bandwidth_gb_s=kv.bandwidth_gb_per_second if kv is not None else None,
        mode=kv.timing_mode if kv is not None else "destination_missing",
    )


def _pool(config: SimConfig, role: Role, worker: WorkerConfig, unservable: str, *, capped: bool) -> PoolSpec:
    """The resolved settings of one role's pool."""
    engine = config.engine.for_role(worker)
    par = worker.parallelism
    rank = RankConfig(
        block_size=worker.kv_cache.block_size_for(engine.backend),
        num_blocks=_num_blocks(engine, worker, role, sglang_static=config.compat != "reference",
                               upstream013=config.compat == "upstream-0.13"),
        max_batched_tokens=worker.scheduler.max_batched_tokens,
        max_sequences=worker.scheduler.max_sequences_for(role),
        prefix_caching=worker.kv_cache.prefix_caching and worker.kv_cache.state_cache is None,
        state_blocks=worker.kv_cache.state_blocks(),
        max_model_len=_max_model_len(config),
        backend=engine.backend,
        role=role,
        reject_unservable=unservable == "reject",
        stop_livelocks=not capped,
        sglang=(SglangSettings(**worker.scheduler.sglang.model_dump())
                if worker.scheduler.sglang is not None else SglangSettings()),
        speculative=_speculative(worker),
        preempt_first=worker.scheduler.preemption_mode == "fifo",
        prefill_schedule_interval=worker.scheduler.prefill_schedule_interval,
        prefill_decode_interval=worker.scheduler.prefill_decode_interval,
        prefill_emits_first_token=config.compat == "upstream-0.13" and role != "decode",
        host=_host_offload(engine, worker, upstream013=config.compat == "upstream-0.13"),
    )
    return PoolSpec(
        role=role,
        replicas=par.replicas,
        dp_size=par.attention_data,
        gpus_per_worker=par.gpus_per_worker,
        rank_config=rank,
        timing=_timing_model(engine, worker, role, metered=config.compat != "reference",
                             upstream013=config.compat == "upstream-0.13"),
        startup_ms=1000 * worker.startup_seconds,
        async_scheduling=async_scheduling(worker),
    )


_DEFAULT_ACCEPTANCE = (0.85, 0.3, 0.0, 0.0, 0.0)


def _speculative(worker: WorkerConfig) -> SpeculativeSettings | None:
    """Speculative decoding settings with the reference's defaults (rates padded with 0)."""
    spec = worker.speculative
    if spec is None:
        return None
    n = spec.num_speculative_tokens
    rates = list(spec.acceptance_rates) if spec.acceptance_rates is not None else list(_DEFAULT_ACCEPTANCE)
    rates = (rates + [0.0] * n)[:n]
    return SpeculativeSettings(nextn=n, acceptance_rates=tuple(float(r) for r in rates), seed=spec.seed)


def _host_offload(engine: EngineConfig, worker: WorkerConfig, *, upstream013: bool = False) -> HostOffloadSettings | None:
    """The host tier of each rank of `worker`'s role (upstream 0.13 `kv_cache.host_offload`;
    with `upstream013`, 0.13's eviction order for a tier per rank)."""
    host = worker.kv_cache.host_offload
    if host is None:
        return None
    per_token = worker.kv_cache.bytes_per_token
    if per_token == "auto":
        per_token = _model_kv_bytes_per_token(engine, worker)
    block_bytes = worker.kv_cache.block_size_for(engine.backend) * per_token
    disk = worker.kv_cache.g3_offload
    g3 = None
    if disk is not None:
        shared_disk = disk.scope == "cluster_shared"
        read, write = disk.read_bandwidth_gbps, disk.write_bandwidth_gbps
        if shared_disk:  # through the worker's link and the shared one: the slower (0 = unlimited)
            read, write = _slower(read, disk.shared_read_bandwidth_gbps), _slower(write, disk.shared_write_bandwidth_gbps)
        g3 = G3Settings(disk.num_g3_blocks, block_bytes, disk.latency_to_first_byte_ms, read, write, shared_disk)
    shared = host.shared_h2d_bandwidth_gbps if host.scope == "cluster_shared" else None
    return HostOffloadSettings(host.num_host_blocks, block_bytes, host.h2d_bandwidth_gbps,
                               host.latency_to_first_byte_ms, g3, kvcr=worker.kv_cache.kvcr is not None,
                               d2h_gb_per_second=host.d2h_bandwidth_gbps, shared_h2d_gb_per_second=shared,
                               gpu_gone_first=upstream013 and shared is None)


def _slower(a: float, b: float) -> float:
    """The lower of two bandwidths, 0 meaning unlimited."""
    if a <= 0:
        return b
    return a if b <= 0 else min(a, b)


def _kv_bytes_per_token(engine: EngineConfig, prefill: WorkerConfig) -> int:
    """KV bytes per token moved by a transfer: explicit, or from the model's HF config."""
    kv = engine.kv_transfer
    assert kv is not None
    if kv.bytes_per_token != "auto":
        return kv.bytes_per_token
    return _model_kv_bytes_per_token(engine, prefill)


def _model_kv_bytes_per_token(engine: EngineConfig, prefill: WorkerConfig) -> int:
    """KV bytes per token per rank of `prefill`'s split, from the model's HF config."""
    from servesim.perf.models import resolve_model

    spec = resolve_model(engine.model)
    par = prefill.parallelism
    dtype = str(spec.config.get("torch_dtype") or spec.config.get("text_config", {}).get("torch_dtype") or "")
    width = _DTYPE_BYTES.get(dtype.removeprefix("torch."), 2)
    layers = -(-spec.num_layers // par.pipeline)
    return layers * spec.kv_heads_per_rank(par.tensor) * spec.head_dim * 2 * width


_DTYPE_BYTES = {"float32": 4, "float64": 8, "float16": 2, "bfloat16": 2, "float8_e4m3fn": 1, "float8_e5m2": 1}
"""Bytes per element of the HF `torch_dtype`s a transfer can carry (anything else: 2)."""


def _num_blocks(engine: EngineConfig, worker: WorkerConfig, role: str, sglang_static: bool = False, *,
                upstream013: bool = False) -> int:
    """KV blocks per scheduler rank of one role's workers (`sglang_static`: SGLang's own sizing;
    `upstream013`: upstream 0.13's version of it)."""
    from servesim.build.perf import num_blocks

    return num_blocks(engine, worker, role, sglang_static, upstream013=upstream013)


def _timing_model(engine: EngineConfig, worker: WorkerConfig, role: str, *, metered: bool,
                  upstream013: bool = False) -> TimingModel:
    """The pass-time model of one role's workers; with `metered` (not under `compat:
    reference`, whose report has no power fields) an AIC-timed role's is metered for energy
    (`servesim.perf.energy`); with `upstream013` an AIC-timed role's decode steps are asked
    0.13's way (`servesim.perf.upstream013`)."""
    from servesim.build.perf import timing_model
    from servesim.config.timing import DefaultTiming as DefaultTimingConfig

    model = timing_model(engine, worker, role)
    if not isinstance(worker.timing, DefaultTimingConfig):
        return model
    from servesim.perf.aic import AicTiming

    base = _innermost(model)
    if not isinstance(base, AicTiming):
        return model
    extra = _qk_norm_ms(engine, worker) if upstream013 else 0.0
    if upstream013:
        from servesim.perf.upstream013 import Upstream013Decode

        model = Upstream013Decode(model, extra)
    if not metered:
        return model
    from servesim.perf.energy import AicEnergy, make_meter

    return make_meter(model, AicEnergy(base, decode_extra_ms=extra, decode_ctx_shift=int(upstream013)))


def _qk_norm_ms(engine: EngineConfig, worker: WorkerConfig) -> float:
    """0.13's Q/K-norm latency per decode step of a role (0 when the model has none or its
    config cannot be read)."""
    from servesim.build.perf import gpu_for
    from servesim.perf.models import ModelNotFound, resolve_model
    from servesim.perf.upstream013 import qk_norm_ms

    try:
        model = resolve_model(engine.model)
    except ModelNotFound:
        return 0.0
    par = worker.parallelism
    return qk_norm_ms(model.architecture, model.num_layers // par.pipeline, model.num_heads, model.num_kv_heads,
                      par.tensor, gpu_for(engine, worker).mem_bw)


def _innermost(model: Any) -> Any:
    """The timing model under its fidelity wrappers (fused, calibrated, DP-synced)."""
    for _ in range(8):
        if not hasattr(model, "_timing"):
            break
        model = model._timing
    return model


def _max_model_len(config: SimConfig) -> int | None:
    engine = config.engine
    if engine.backend != "vllm":
        return None
    if engine.context_length != "max":
        return engine.context_length
    from servesim.perf.models import model_context_length

    return model_context_length(engine.model)
