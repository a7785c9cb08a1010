"""Rules that span sections of the document, and the values derived from several sections.

`SimConfig` checks the first group at validation time (config errors, exit code 2);
`runtime_rejections` lists settings the schema accepts but the reference refuses once its run
starts (exit code 1); `request_count` resolves a synthetic stop.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from servesim.config.engine import FIXED_TIMING_KEYS, FixedTiming
from servesim.config.fields import U64_MAX
from servesim.config.traffic import (
    REQUEST_STOPS,
    SESSION_STOPS,
    ConcurrencyLoad,
    ConstantRateLoad,
    PoissonLoad,
    SyntheticSessionSource,
    TraceSource,
    TrafficConfig,
)

if TYPE_CHECKING:
    from servesim.config.schema import SimConfig

AGGREGATED_ONLY_FORMATS = ("mooncake-delta", "agentic_mooncake")


def aggregated_only_format_rules(config: SimConfig) -> list[tuple[str, str]]:
    """Some trace formats replay only on aggregated engines."""
    source = config.traffic.source
    if isinstance(source, TraceSource) and source.format in AGGREGATED_ONLY_FORMATS and config.engine.mode != "aggregated":
        return [("traffic.source.format", f"'{source.format}' requires engine.mode 'aggregated'")]
    return []


def planner_rules(config: SimConfig) -> list[tuple[str, str]]:
    """Planner rules that involve other sections (the reference adapter's checks)."""
    planner = config.planner
    if planner.policy != "enabled":
        return []
    problems = []
    if config.engine.mode == "aggregated":
        problems += [(f"planner.{k}", "is only for engine.mode 'disaggregated'; use min_workers")
                     for k in ("prefill_min_workers", "decode_min_workers") if getattr(planner, k) is not None]
    sla = config.evaluation.sla
    if planner.scaling_modes[0] and (sla is None or sla.ttft_ms is None):
        problems.append(("planner.enable_throughput_scaling", "needs evaluation.sla.ttft_ms and evaluation.sla.itl_ms"))
    return problems


def request_count(traffic: TrafficConfig) -> int | None:
    """Resolved request count (synthetic) or session count (synthetic-session); None for traces.

    A relative stop gives ``max(1, round(ratio x load_unit))`` where the load unit is the
    concurrency or the arrival rate; ``round`` is Python's (half to even).
    """
    if isinstance(traffic.source, TraceSource) or traffic.stop is None:
        return None
    keys = SESSION_STOPS if isinstance(traffic.source, SyntheticSessionSource) else REQUEST_STOPS
    count, ratio = (getattr(traffic.stop, k) for k in keys)
    if count is not None:
        return int(count)
    if ratio is None:
        return None
    return max(1, round(ratio * _load_unit(traffic.load)))


def _load_unit(load: Any) -> float:
    """What a relative stop multiplies: the concurrency or the arrival rate."""
    if isinstance(load, ConcurrencyLoad):
        return load.concurrency
    rate = load.rate if isinstance(load, (PoissonLoad, ConstantRateLoad)) else None
    if rate is None:
        raise ValueError(f"load type '{load.type}' has no load unit")
    return rate


def runtime_rejections(config: SimConfig) -> list[str]:
    """Settings the schema accepts but the reference refuses once the run starts (exit code 1).

    Each entry is ``dotted.key.path: reason``; lowering should raise them as a RunError.
    """
    found = []
    engine = config.engine
    for role, worker in engine.roles.items():
        where = f"engine.workers.{role}"
        if engine.mode == "disaggregated" and worker.parallelism.attention_data > 1:
            found.append(f"{where}.parallelism.attention_data: disaggregated replay requires 1 (attention-DP handoff is not implemented)")
        if not math.isfinite(worker.startup_seconds):
            found.append(f"{where}.startup_seconds: must be finite")
        if isinstance(worker.timing, FixedTiming):
            found += [f"{where}.timing.{k}: must be finite" for k in FIXED_TIMING_KEYS if not math.isfinite(getattr(worker.timing, k))]
    load = config.traffic.load
    if isinstance(load, PoissonLoad) and load.seed > U64_MAX:
        found.append(f"traffic.load.seed: must fit in 64 bits (got {load.seed})")
    return found
