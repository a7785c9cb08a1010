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
from servesim.engine.rank import Rank, RankConfig, make_rank
from servesim.errors import ConfigError, RunError
from servesim.report.summary import Sla
from servesim.traffic.driver import Driver
from servesim.traffic.mooncake import read_mooncake
from servesim.traffic.synthetic import constant_rate_schedule, poisson_schedule, synthetic_workload
from servesim.traffic.workload import Workload

_CONTEXT_KEYS = ("max_position_embeddings", "model_max_length", "max_sequence_length",
                 "seq_length", "n_positions")


@dataclass
class LoweredRun:
    """Everything needed to build one aggregated replay."""

    config: SimConfig
    replicas: int
    dp_size: int
    gpus_per_worker: int
    rank_config: RankConfig
    time_cap_ms: float | None
    sla: Sla | None

    def make_ranks(self, *, lazy_decode: bool = True) -> list[Rank]:
        engine = self.config.engine
        timing = _timing_model(engine, engine.workers.aggregated, "aggregated")
        return [make_rank(self.rank_config, timing, lazy_decode=lazy_decode) for _ in range(self.dp_size)]

    def make_driver(self) -> Driver:
        return _driver(self.config, self.rank_config.block_size)


def lower(config: SimConfig, *, unservable: str = "reject") -> LoweredRun:
    """Resolve the defaults of an aggregated config.

    `unservable` is what happens to a request that can never fit a worker's KV pool: "reject"
    it (with a reason) or "fail" the run the way the reference does.
    """
    problems = runtime_rejections(config)
    if problems:
        raise RunError("; ".join(problems))
    engine = config.engine
    if engine.mode != "aggregated":
        raise RunError("disaggregated mode is not supported yet")
    worker = engine.workers.aggregated
    assert worker is not None
    par = worker.parallelism
    rank = RankConfig(
        block_size=worker.kv_cache.block_size_for(engine.backend),
        num_blocks=_num_blocks(engine, worker, "aggregated"),
        max_batched_tokens=worker.scheduler.max_batched_tokens,
        max_sequences=worker.scheduler.max_sequences_for("aggregated"),
        prefix_caching=worker.kv_cache.prefix_caching,
        max_model_len=_max_model_len(config),
        backend=engine.backend,
        reject_unservable=unservable == "reject",
    )
    _timing_model(engine, worker, "aggregated")  # validate early
    stop = config.traffic.stop
    cap = stop.max_virtual_time_seconds if stop is not None else None
    sla = config.evaluation.sla
    return LoweredRun(
        config=config,
        replicas=par.replicas,
        dp_size=par.attention_data,
        gpus_per_worker=par.tensor * par.attention_data,
        rank_config=rank,
        time_cap_ms=1000 * cap if cap is not None else None,
        sla=Sla(sla.ttft_ms, sla.itl_ms, sla.e2e_ms) if sla is not None else None,
    )


def _num_blocks(engine: EngineConfig, worker: WorkerConfig, role: str) -> int:
    """KV blocks per scheduler rank of one role's workers."""
    capacity = worker.kv_cache.capacity
    if isinstance(capacity, FixedCapacity):
        return capacity.blocks
    raise RunError("kv_cache.capacity.type 'default' needs the AIConfigurator database, which is "
                   "not supported yet; set capacity: {type: fixed, blocks: N}")


def _timing_model(engine: EngineConfig, worker: WorkerConfig, role: str) -> TimingModel:
    """The pass-time model of one role's workers."""
    timing = worker.timing
    if isinstance(timing, FixedTimingConfig):
        return FixedTiming(timing.prefill_ms, timing.decode_ms)
    if isinstance(timing, PolynomialTimingConfig):
        return PolynomialTiming()
    raise RunError("timing.type 'default' needs the AIConfigurator database, which is not "
                   "supported yet; use timing: {type: fixed, ...} or {type: polynomial}")


def _max_model_len(config: SimConfig) -> int | None:
    engine = config.engine
    if engine.backend != "vllm":
        return None
    if engine.context_length != "max":
        return engine.context_length
    return model_context_length(engine.model)


def model_context_length(model: str) -> int:
    """The context length in a model's HF config (a local directory holding config.json)."""
    path = Path(model) / "config.json"
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        raise RunError(f"engine.context_length 'max' needs the HF config of model {model!r}; "
                       "set engine.context_length to a number") from None
    for section in (data.get("text_config") or {}, data):
        for key in _CONTEXT_KEYS:
            value = section.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
    raise RunError(f"{path}: no context length among {', '.join(_CONTEXT_KEYS)}")


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


def _driver(config: SimConfig, block_size: int) -> Driver:
    workload = _workload(config, block_size)
    load = config.traffic.load
    n = len(workload.sessions)
    if isinstance(load, ConcurrencyLoad):
        return Driver(workload, concurrency=load.concurrency)
    if isinstance(load, PoissonLoad):
        return Driver(workload, first_arrivals=poisson_schedule(n, load.rate, load.seed))
    if isinstance(load, ConstantRateLoad):
        return Driver(workload, first_arrivals=constant_rate_schedule(n, load.rate))
    assert isinstance(load, TraceTimestampsLoad)
    return Driver(workload, first_arrivals=_trace_arrivals(workload, load.speedup),
                  delay_scale=load.speedup)


def _trace_arrivals(workload: Workload, speedup: float) -> list[float]:
    """First arrivals normalised by the earliest present timestamp, divided by the speedup."""
    present = [s.first_arrival_ms for s in workload.sessions if s.first_arrival_ms is not None]
    origin = min(present) if present else 0.0
    return [0.0 if s.first_arrival_ms is None else (s.first_arrival_ms - origin) / speedup
            for s in workload.sessions]


__all__ = ["LoweredRun", "lower", "model_context_length", "ConfigError"]
