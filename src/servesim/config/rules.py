"""Rules that span sections of the document, and the values derived from several sections.

`SimConfig` checks them at validation time (config errors, exit code 2); `request_count`
resolves a synthetic stop from the stop and the load.
"""

from __future__ import annotations

from servesim.config.dynamo import PlannerConfig
from servesim.config.engine import EngineConfig, EngineMode
from servesim.config.evaluation import SlaConfig
from servesim.config.traffic import (
    REQUEST_STOPS,
    SESSION_STOPS,
    SourceConfig,
    SyntheticSessionSource,
    TraceSource,
    TrafficConfig,
    stop_count,
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


def planner_rules(planner: PlannerConfig, engine: EngineConfig, sla: SlaConfig | None) -> list[tuple[str, str]]:
    """Planner rules that involve other sections (the reference adapter's checks, and Dynamo's
    start-up check that the GPU budget holds the minimum fleet)."""
    if planner.policy != "enabled":
        return []
    mode = engine.mode
    problems = _budget_rules(planner, engine)
    if mode == "aggregated":
        problems += [(f"planner.{k}", "is only for engine.mode 'disaggregated'; use min_workers")
                     for k in ("prefill_min_workers", "decode_min_workers") if getattr(planner, k) is not None]
    if planner.scaling_modes[0] and (sla is None or sla.per_request("ttft_ms") is None
                                     or sla.per_request("itl_ms") is None):
        problems.append(("planner.enable_throughput_scaling",
                         "needs evaluation.sla.ttft_ms and evaluation.sla.itl_ms (per-request numbers)"))
    return problems


def _budget_rules(planner: PlannerConfig, engine: EngineConfig) -> list[tuple[str, str]]:
    """The GPU ceiling must hold the minimum fleet (else the planner would scale to no worker);
    the floor may not exceed the ceiling."""
    most, least = planner.max_num_gpus, planner.min_num_gpus
    if most >= 0 and least > most:
        return [("planner.min_num_gpus", f"must be <= max_num_gpus ({most}) (got {least})")]
    if most < 0:
        return []
    floors = {"prefill": planner.prefill_min_workers, "decode": planner.decode_min_workers}
    needed: list[tuple[int, int]] = []
    for role, worker in engine.roles.items():
        floor = floors.get(role)
        needed.append((planner.min_workers if floor is None else floor, worker.parallelism.gpus_per_worker))
    gpus = sum(workers * per_worker for workers, per_worker in needed)
    if gpus <= most:
        return []
    terms = " + ".join(f"{workers} x {per_worker}" for workers, per_worker in needed)
    return [("planner.max_num_gpus", f"must hold the minimum fleet: min workers x GPUs per worker = {terms} = "
                                     f"{gpus} GPUs (got {most})")]


def request_count(traffic: TrafficConfig) -> int | None:
    """Resolved request count (synthetic) or session count (synthetic-session); None for traces.

    A relative stop gives ``max(1, round(ratio x load_unit))`` where the load unit is the
    concurrency or the arrival rate; ``round`` is Python's (half to even).
    """
    if isinstance(traffic.source, TraceSource) or traffic.stop is None:
        return None
    keys = SESSION_STOPS if isinstance(traffic.source, SyntheticSessionSource) else REQUEST_STOPS
    given = traffic.stop.given(keys)
    return stop_count(traffic.stop, given[0], traffic.load) if given else None
