"""Rules that span sections of the document, and the values derived from several sections.

`SimConfig` checks them at validation time (config errors, exit code 2); `request_count`
resolves a synthetic stop from the stop and the load.
"""

from __future__ import annotations

from typing import Any

from servesim.config.dynamo import PlannerConfig
from servesim.config.engine import EngineMode
from servesim.config.evaluation import SlaConfig
from servesim.config.traffic import (
    REQUEST_STOPS,
    SESSION_STOPS,
    ConcurrencyLoad,
    ConstantRateLoad,
    PoissonLoad,
    SourceConfig,
    SyntheticSessionSource,
    TraceSource,
    TrafficConfig,
)

AGGREGATED_ONLY_FORMATS = ("mooncake-delta", "agentic_mooncake")


def aggregated_only_format_rules(source: SourceConfig, mode: EngineMode) -> list[tuple[str, str]]:
    """Some trace formats replay only on aggregated engines."""
    if isinstance(source, TraceSource) and source.format in AGGREGATED_ONLY_FORMATS and mode != "aggregated":
        return [("traffic.source.format", f"'{source.format}' requires engine.mode 'aggregated'")]
    return []


def client_timeout_rules(traffic: TrafficConfig, mode: EngineMode) -> list[tuple[str, str]]:
    """Client timeouts abort requests on aggregated workers only."""
    if traffic.client_timeout_seconds is not None and mode != "aggregated":
        return [("traffic.client_timeout_seconds", "is supported with engine.mode 'aggregated' only")]
    return []


def planner_rules(planner: PlannerConfig, mode: EngineMode, sla: SlaConfig | None) -> list[tuple[str, str]]:
    """Planner rules that involve other sections (the reference adapter's checks)."""
    if planner.policy != "enabled":
        return []
    problems = []
    if mode == "aggregated":
        problems += [(f"planner.{k}", "is only for engine.mode 'disaggregated'; use min_workers")
                     for k in ("prefill_min_workers", "decode_min_workers") if getattr(planner, k) is not None]
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
