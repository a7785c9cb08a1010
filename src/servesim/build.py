"""Building the stages from a validated `SimConfig`: every default resolved, then objects made.

Every default is resolved here (block sizes, scheduler limits, context length, KV capacity,
timing model, request counts, arrival schedules), so the rest of servesim never looks at the
user's config.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from servesim.config.schema import (
    ConcurrencyLoad,
    ConstantRateLoad,
    EngineConfig,
    FixedCapacity,
    FixedTiming as FixedTimingConfig,
    PoissonLoad,
    PolynomialTiming as PolynomialTimingConfig,
    SimConfig,
    SyntheticSessionSource,
    SyntheticSource,
    TraceSource,
    TraceTimestampsLoad,
    WorkerConfig,
    request_count,
    runtime_rejections,
)
from servesim.engine.timing import FixedTiming, PolynomialTiming, TimingModel
from servesim.engine.rank import Rank, RankConfig, SglangSettings, SpeculativeSettings, make_rank
from servesim.errors import ConfigError, RunError
from servesim.report.summary import Sla
from servesim.traffic.driver import Driver
from servesim.traffic.mooncake import read_mooncake
from servesim.traffic.synthetic import constant_rate_schedule, poisson_schedule, synthetic_workload
from servesim.traffic.workload import Workload

_CONTEXT_KEYS = ("max_position_embeddings", "model_max_length", "max_sequence_length",
                 "seq_length", "n_positions")


@dataclass
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
    """A request reaching a busy worker joins the pass after next (see `Worker`)."""

    def make_ranks(self, worker_id: int, *, lazy_decode: bool = True) -> list[Rank]:
        """The DP ranks of worker `worker_id` (which seeds their speculative-decoding samplers)."""
        first = worker_id * self.dp_size
        return [make_rank(self.rank_config, self.timing, lazy_decode=lazy_decode, sampler_seed=first + r)
                for r in range(self.dp_size)]


@dataclass(frozen=True)
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


@dataclass
class LoweredRun:
    """Everything needed to build one replay."""

    config: SimConfig
    pools: list[PoolSpec]
    """Aggregated: one "aggregated" pool; disaggregated: "prefill" then "decode"."""
    transfer: TransferSpec | None
    time_cap_ms: float | None
    sla: Sla | None

    @property
    def disaggregated(self) -> bool:
        return self.transfer is not None

    def pool(self, role: str) -> PoolSpec:
        return next(p for p in self.pools if p.role == role)

    def make_driver(self) -> Driver:
        return _driver(self.config, self.pools[0].rank_config.block_size, self.frontend_ms)

    @property
    def frontend_ms(self) -> float:
        """Latency from a client's send to the engine seeing the request (its first role's)."""
        from servesim.fidelity.apply import frontend_ms

        return frontend_ms(self.config.engine.roles[self.pools[0].role])  # type: ignore[index]


def lower(config: SimConfig, *, unservable: str = "reject") -> LoweredRun:
    """Resolve every default of a config.

    `unservable` is what happens to a request that can never fit a worker's KV pool: "reject"
    it (with a reason) or "fail" the run the way the reference does.
    """
    problems = runtime_rejections(config)
    if problems:
        raise RunError("; ".join(problems))
    engine = config.engine
    pools = [_pool(config, role, worker, unservable) for role, worker in engine.roles.items()]
    transfer = None
    if engine.mode == "disaggregated":
        kv = engine.kv_transfer
        prefill = engine.workers.prefill
        assert prefill is not None
        transfer = TransferSpec(
            bytes_per_token=_kv_bytes_per_token(engine, prefill) if kv is not None else None,
            bandwidth_gb_s=kv.bandwidth_gb_per_second if kv is not None else None,
            mode=kv.timing_mode if kv is not None else "destination_missing",
        )
    stop = config.traffic.stop
    cap = stop.max_virtual_time_seconds if stop is not None else None
    sla = config.evaluation.sla
    return LoweredRun(
        config=config,
        pools=pools,
        transfer=transfer,
        time_cap_ms=1000 * cap if cap is not None else None,
        sla=Sla(sla.ttft_ms, sla.itl_ms, sla.e2e_ms) if sla is not None else None,
    )


def _pool(config: SimConfig, role: str, worker: WorkerConfig, unservable: str) -> PoolSpec:
    """The resolved settings of one role's pool."""
    engine = config.engine
    par = worker.parallelism
    rank = RankConfig(
        block_size=worker.kv_cache.block_size_for(engine.backend),
        num_blocks=_num_blocks(engine, worker, role),
        max_batched_tokens=worker.scheduler.max_batched_tokens,
        max_sequences=worker.scheduler.max_sequences_for(role),
        prefix_caching=worker.kv_cache.prefix_caching,
        max_model_len=_max_model_len(config),
        backend=engine.backend,
        role=role,
        reject_unservable=unservable == "reject",
        sglang=(SglangSettings(**worker.scheduler.sglang.model_dump())
                if worker.scheduler.sglang is not None else SglangSettings()),
        speculative=_speculative(worker),
        preempt_first=worker.scheduler.preemption_mode == "fifo",
        fused_mixed_pass=getattr(worker.timing, "mixed_pass", "sum") == "fused",
    )
    return PoolSpec(
        role=role,
        replicas=par.replicas,
        dp_size=par.attention_data,
        gpus_per_worker=par.tensor * par.attention_data,
        rank_config=rank,
        timing=_timing_model(engine, worker, role),
        startup_ms=1000 * worker.startup_seconds,
        async_scheduling=_async_scheduling(worker),
    )


def _async_scheduling(worker: WorkerConfig) -> bool:
    """`scheduler.async_scheduling`, by default on exactly when the role's passes are fused."""
    explicit = worker.scheduler.async_scheduling
    return explicit if explicit is not None else getattr(worker.timing, "mixed_pass", "sum") == "fused"


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


def _kv_bytes_per_token(engine: EngineConfig, prefill: WorkerConfig) -> int:
    """KV bytes per token moved by a transfer: explicit, or from the model's HF config."""
    kv = engine.kv_transfer
    assert kv is not None
    if kv.bytes_per_token != "auto":
        return kv.bytes_per_token
    from servesim.engine.models import resolve_model

    spec = resolve_model(engine.model)
    par = prefill.parallelism
    dtype = str(spec.config.get("torch_dtype") or spec.config.get("text_config", {}).get("torch_dtype") or "")
    width = _DTYPE_BYTES.get(dtype.removeprefix("torch."), 2)
    layers = -(-spec.num_layers // par.pipeline)
    return layers * spec.kv_heads_per_rank(par.tensor) * spec.head_dim * 2 * width


_DTYPE_BYTES = {"float32": 4, "float64": 8, "float16": 2, "bfloat16": 2, "float8_e4m3fn": 1, "float8_e5m2": 1}
"""Bytes per element of the HF `torch_dtype`s a transfer can carry (anything else: 2)."""


def _num_blocks(engine: EngineConfig, worker: WorkerConfig, role: str) -> int:
    """KV blocks per scheduler rank of one role's workers."""
    from servesim.perf import num_blocks

    return num_blocks(engine, worker, role)


def _timing_model(engine: EngineConfig, worker: WorkerConfig, role: str) -> TimingModel:
    """The pass-time model of one role's workers."""
    from servesim.perf import timing_model

    return timing_model(engine, worker, role)


def _max_model_len(config: SimConfig) -> int | None:
    engine = config.engine
    if engine.backend != "vllm":
        return None
    if engine.context_length != "max":
        return engine.context_length
    return model_context_length(engine.model)


def model_context_length(model: str) -> int:
    """The context length in a model's HF config (a local directory holding config.json, or a
    model config bundled with the AIConfigurator database)."""
    from servesim.engine.models import model_context_length as from_hf_config

    return from_hf_config(model)


# -- traffic ------------------------------------------------------------------------------

def _workload(config: SimConfig, block_size: int) -> Workload:
    source = config.traffic.source
    if isinstance(source, SyntheticSource):
        return synthetic_workload(request_count(config.traffic), source.input_tokens,
                                  source.output_tokens, block_size)
    if isinstance(source, SyntheticSessionSource):
        s = source.session
        return synthetic_workload(request_count(config.traffic), source.new_input_tokens_per_turn,
                                  source.output_tokens_per_turn, block_size, turns=s.turns,
                                  shared_prefix_ratio=s.shared_prefix_ratio,
                                  prefix_groups=s.prefix_groups,
                                  inter_turn_delay_ms=s.inter_turn_delay_ms)
    assert isinstance(source, TraceSource)
    if source.format not in ("mooncake", "mooncake-delta"):
        raise RunError(f"trace format {source.format!r} is not supported yet")
    return read_mooncake(source.paths[0], source.trace_block_size,
                         accumulate=source.format == "mooncake-delta")


def _driver(config: SimConfig, block_size: int, frontend_ms: float = 0.0) -> Driver:
    workload = _workload(config, block_size)
    load = config.traffic.load
    n = len(workload.sessions)
    if isinstance(load, ConcurrencyLoad):
        return Driver(workload, concurrency=load.concurrency, frontend_ms=frontend_ms)
    if isinstance(load, PoissonLoad):
        return Driver(workload, first_arrivals=poisson_schedule(n, load.rate, load.seed), frontend_ms=frontend_ms)
    if isinstance(load, ConstantRateLoad):
        return Driver(workload, first_arrivals=constant_rate_schedule(n, load.rate), frontend_ms=frontend_ms)
    assert isinstance(load, TraceTimestampsLoad)
    return Driver(workload, first_arrivals=_trace_arrivals(workload, load.speedup),
                  delay_scale=load.speedup, frontend_ms=frontend_ms)


def _trace_arrivals(workload: Workload, speedup: float) -> list[float]:
    """First arrivals normalised by the earliest present timestamp, divided by the speedup."""
    present = [s.first_arrival_ms for s in workload.sessions if s.first_arrival_ms is not None]
    origin = min(present) if present else 0.0
    return [0.0 if s.first_arrival_ms is None else (s.first_arrival_ms - origin) / speedup
            for s in workload.sessions]


__all__ = ["LoweredRun", "lower", "model_context_length", "ConfigError"]
