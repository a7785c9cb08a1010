"""Dynamo's planner as a scaling policy (servesim.scaling.planner), on hand-built snapshots.

The burst-case fixture reproduces every tick input of the Dynamo reference stack's
`planner-load-kv-burst` case (1 worker, target load, 5 s ticks, 10 s startup, 4 GPUs max) and
the decision the reference made on it.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import yaml

from servesim.build.control import planner_settings
from servesim.config.load import ConfigError, parse_config
from servesim.config.schema import PlannerConfig, SlaConfig
from servesim.engine.rank import ForwardPassMetrics
from servesim.perf.timing import PolynomialTiming
from servesim.scaling.contract import PoolSnapshot, RankSnapshot, Snapshot, TrafficWindow
from servesim.scaling.planner.budget import guard_pair, guard_single
from servesim.scaling.planner.capacity import Engine, agg_capacity, decode_capacity, prefill_capacity
from servesim.scaling.planner.load import easy_step, easy_thresholds
from servesim.scaling.planner.policy import DynamoPlanner
from servesim.scaling.planner.settings import PlannerSettings

TIMING = PolynomialTiming()
BURST_CONFIG = {"policy": "enabled", "target": "load", "enable_throughput_scaling": False,
                "enable_load_scaling": True, "load_adjustment_interval_seconds": 5,
                "load_scaling_down_sensitivity": 80, "load_min_observations": 5, "max_num_gpus": 4,
                "min_workers": 1}


# --------------------------------------------------------------------------------------------
# builders
# --------------------------------------------------------------------------------------------


def fpm(sched_kv: int = 0, queued_kv: int = 0, queued_prefill: int = 0, *, decodes: int | None = None,
        prefill_tokens: int = 0, prefills: int = 0, wall: float = 0.05) -> ForwardPassMetrics:
    """A forward-pass record with the fields the planner reads."""
    return ForwardPassMetrics(
        num_prefill_requests=prefills, sum_prefill_tokens=prefill_tokens,
        num_decode_requests=(sched_kv // 2600 if decodes is None else decodes), sum_decode_kv_tokens=sched_kv,
        num_queued_prefill=-(-queued_prefill // 2560), sum_queued_prefill_tokens=queued_prefill,
        num_queued_decode=-(-queued_kv // 2600), sum_queued_decode_kv_tokens=queued_kv, wall_time_secs=wall)


def pool(role: str, active: list[int], metrics: dict[int, ForwardPassMetrics | None], *,
         starting: list[int] | None = None, draining: list[int] | None = None, blocks: int = 384,
         gpus: int = 1, dp: int = 1, context_length: int | None = 8192) -> PoolSnapshot:
    """A pool of `active` workers whose rank 0 (.. dp-1) published `metrics[worker]`."""
    ranks = [RankSnapshot(w, r, metrics.get(w), 0, blocks, 0, 0) for w in active for r in range(dp)]
    return PoolSnapshot(role, list(active), list(starting or []), list(draining or []), ranks, gpus, 64,
                        8192, 256, context_length, TIMING)


def snap(now_s: float, *pools: PoolSnapshot, traffic: TrafficWindow | None = None) -> Snapshot:
    """A snapshot at `now_s` (disaggregated when a prefill pool is given)."""
    by_role = {p.role: p for p in pools}
    return Snapshot(0, now_s * 1000.0, by_role, traffic or TrafficWindow(duration_s=5.0), "prefill" in by_role)


def planner(**overrides: Any) -> DynamoPlanner:
    """A planner from `planner:` keys (the burst case's unless overridden)."""
    keys = {**BURST_CONFIG, **overrides}
    disagg = keys.pop("disagg", False)
    sla = keys.pop("sla", None)
    settings = planner_settings(PlannerConfig(**keys), sla, disagg)
    assert settings is not None
    return DynamoPlanner(settings)


# --------------------------------------------------------------------------------------------
# the reference's burst case, tick by tick
# --------------------------------------------------------------------------------------------

# (at_s, active, starting, {worker: (scheduled decode KV, queued decode KV, queued prefill tokens)},
#  the reference's load_decision_reason, the reference's target_decode)
BURST_TICKS = [
    (5, [0], [], {0: (33596, 0, 17920)}, "scale_up", 2),
    (10, [0], [1], {0: (23241, 0, 20480)}, "scaling_in_progress", None),
    (15, [0, 1], [], {0: (30969, 0, 17920)}, "worker_count_mismatch", None),
    (20, [0, 1], [], {0: (15509, 0, 0), 1: (7773, 0, 0)}, "no_change", None),
    (25, [0, 1], [], {0: (12897, 0, 0), 1: (15611, 0, 0)}, "no_change", None),
    (30, [0, 1], [], {0: (5199, 0, 0), 1: (15578, 0, 0)}, "no_change", None),
    (35, [0, 1], [], {0: (36554, 0, 184320), 1: (44185, 2561, 153600)}, "scale_up", 3),
    (40, [0, 1], [2], {0: (41881, 0, 378880), 1: (36391, 0, 371200)}, "scaling_in_progress", None),
    (45, [0, 1, 2], [], {0: (26220, 0, 545280), 1: (36347, 0, 550400)}, "worker_count_mismatch", None),
    (50, [0, 1, 2], [], {0: (36715, 2561, 476160), 1: (41543, 0, 468480), 2: (0, 0, 0)}, "scale_up", 4),
    (55, [0, 1, 2], [3], {0: (28792, 0, 381440), 1: (36295, 0, 401920), 2: (5212, 0, 0)}, "scaling_in_progress", None),
    (60, [0, 1, 2, 3], [], {0: (36528, 0, 314880), 1: (33708, 0, 325120), 2: (2623, 0, 0)}, "worker_count_mismatch", None),
    (65, [0, 1, 2, 3], [], {0: (44397, 0, 243200), 1: (36238, 0, 243200), 2: (2623, 0, 0), 3: (2616, 0, 0)}, "gpu_budget_guard_hold", None),
    (70, [0, 1, 2, 3], [], {0: (28661, 0, 186880), 1: (38913, 0, 176640), 2: (2623, 0, 0), 3: (2623, 0, 0)}, "gpu_budget_guard_hold", None),
    (75, [0, 1, 2, 3], [], {0: (23588, 0, 107520), 1: (36312, 2561, 102400), 2: (2623, 0, 0), 3: (2623, 0, 0)}, "gpu_budget_guard_hold", None),
    (80, [0, 1, 2, 3], [], {0: (13103, 0, 30720), 1: (25942, 2561, 38400), 2: (2623, 0, 0), 3: (2623, 0, 0)}, "gpu_budget_guard_hold", None),
    (85, [0, 1, 2, 3], [], {0: (2572, 0, 0), 1: (2623, 0, 0), 2: (2623, 0, 0), 3: (2623, 0, 0)}, "scale_down", 3),
    (90, [0, 1, 2], [], {0: (0, 0, 0), 1: (0, 0, 0), 2: (0, 0, 0)}, "scale_down", 2),
    (95, [0, 1], [], {0: (2623, 0, 0), 1: (2603, 0, 0)}, "scale_down", 1),
    (100, [0], [], {0: (5198, 0, 0)}, "no_change", None),
    (105, [0], [], {0: (18064, 0, 0)}, "no_change", None),
    (110, [0], [], {0: (7743, 0, 0)}, "no_change", None),
    (120, [0], [], {0: (2595, 0, 0)}, "no_change", None),
    (180, [0], [], {0: (20728, 0, 0)}, "no_change", None),
]


def burst_snapshot(at_s: float, active: list[int], starting: list[int], fpms: dict[int, tuple[int, int, int]]) -> Snapshot:
    """One recorded tick as a snapshot (workers without a record have none yet)."""
    return snap(at_s, pool("decode", active, {w: fpm(*v) for w, v in fpms.items()}, starting=starting))


def test_burst_case_decisions_match_the_reference_tick_by_tick() -> None:
    policy = planner()
    assert policy.initial_tick_ms() == 5000.0
    got, want = [], []
    for at_s, active, starting, fpms, reason, target in BURST_TICKS:
        decision = policy.on_tick(burst_snapshot(at_s, active, starting, fpms))
        got.append((at_s, decision.reason, decision.target_decode))
        want.append((at_s, reason, target))
        assert decision.target_prefill is None
        assert decision.next_tick_ms == at_s * 1000.0 + 5000.0
    assert got == want


def test_burst_case_first_tick_from_the_full_recorded_metrics() -> None:
    # tick 0 of the case, every field of the recorded ForwardPassMetrics
    record = ForwardPassMetrics(num_prefill_requests=1, sum_prefill_tokens=512, sum_prefill_kv_tokens=2048,
                                num_decode_requests=13, sum_decode_kv_tokens=33596,
                                var_decode_kv_tokens=87.90532544378658, num_queued_prefill=7,
                                sum_queued_prefill_tokens=17920, wall_time_secs=0.05839570400000048)
    decision = planner().on_tick(snap(5, pool("decode", [0], {0: record})))
    assert (decision.reason, decision.target_decode) == ("scale_up", 2)
    assert decision.diagnostics["load_decision_reason"] == "scale_up"
    assert decision.diagnostics["kv_utilization"] == [pytest.approx((33596 + 17920) / 24576, abs=1e-4)]


def test_consolidation_guard_keeps_two_workers_when_one_would_overflow() -> None:
    # 20 s of the case: both below 70 %, but 0.631 × 2 / 1 ≥ 90 %
    decision = planner().on_tick(burst_snapshot(20, [0, 1], [], {0: (15509, 0, 0), 1: (7773, 0, 0)}))
    assert (decision.reason, decision.target_decode) == ("no_change", None)
    # a lighter load consolidates
    decision = planner().on_tick(burst_snapshot(20, [0, 1], [], {0: (9000, 0, 0), 1: (7773, 0, 0)}))
    assert (decision.reason, decision.target_decode) == ("scale_down", 1)


def test_latest_metrics_are_kept_across_ticks_until_the_worker_leaves() -> None:
    policy = planner()
    policy.on_tick(burst_snapshot(20, [0, 1], [], {0: (2000, 0, 0), 1: (2000, 0, 0)}))
    # worker 1 published nothing since the previous tick (a long pass): its last record stands
    decision = policy.on_tick(snap(25, pool("decode", [0, 1], {0: fpm(2000), 1: None})))
    assert (decision.reason, decision.target_decode) == ("scale_down", 1)
    # worker 1 drained away and came back as a new active worker: no stale record
    policy.on_tick(snap(30, pool("decode", [0], {0: fpm(2000)})))
    decision = policy.on_tick(snap(35, pool("decode", [0, 1], {0: fpm(2000), 1: None})))
    assert decision.reason == "worker_count_mismatch"


def test_no_metrics_at_all_is_no_fpm_data() -> None:
    decision = planner().on_tick(snap(5, pool("decode", [0], {0: None})))
    assert (decision.reason, decision.target_decode) == ("no_fpm_data", None)


def test_draining_workers_do_not_block_decisions() -> None:
    p = pool("decode", [0, 1], {0: fpm(30000), 1: fpm(100)}, draining=[2])
    decision = planner().on_tick(snap(5, p))
    assert (decision.reason, decision.target_decode) == ("scale_up", 3)


def test_dp_ranks_must_all_report() -> None:
    p = pool("decode", [0], {0: fpm(30000)}, dp=2)
    p.ranks[1].metrics = None
    assert planner().on_tick(snap(5, p)).reason == "worker_count_mismatch"
    p.ranks[1].metrics = fpm(100)
    # utilisation is per rank over the worker's capacity (both ranks): 30000 / 49152 < 90 %
    decision = planner().on_tick(snap(5, p))
    assert decision.reason == "no_change"


# --------------------------------------------------------------------------------------------
# easy targets
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("target", "role", "up", "down", "value_up", "value_not_up", "value_down", "value_not_down"), [
    ("load", "decode", 0.9, 0.7, 0.9, 0.899, 0.7, 0.701),
    ("throughput", "decode", 1.0, 0.6, 1.001, 1.0, 0.599, 0.6),
    ("latency", "decode", 0.4, 0.1, 0.401, 0.4, 0.099, 0.1),
    ("load", "prefill", 1.0, 0.0, 1.0, 0.0, 0.0, 0.5),
    ("throughput", "prefill", 1.0, 0.1, 1.0, 0.999, 0.099, 0.1),
    ("latency", "prefill", 0.1, 0.0, 0.1, 0.099, 0.0, 0.001),
])
def test_easy_thresholds(target: str, role: str, up: float, down: float, value_up: float, value_not_up: float,
                         value_down: float, value_not_down: float) -> None:
    t = easy_thresholds(target, role)
    assert (t.up, t.down) == (up, down)
    assert t.above(value_up) and not t.above(value_not_up)
    assert t.below(value_down) and not t.below(value_not_down)


def test_easy_step_rules() -> None:
    t = easy_thresholds("load", "decode")
    assert easy_step([0.1, 0.95], 2, t, 1) == (3, "scale_up")       # any engine high
    assert easy_step([0.1, 0.75], 2, t, 1) == (None, "no_change")   # not all low
    assert easy_step([0.5], 1, t, 1) == (None, "no_change")         # one worker never shrinks
    assert easy_step([0.3, 0.3, 0.3], 3, t, 1) == (2, "scale_down")
    assert easy_step([0.3, 0.3, 0.3], 3, t, 3) == (3, "no_change")   # minimum reached
    assert easy_step([0.5, 0.5], 2, t, 1) == (2, "no_change")        # consolidation guard


def test_aggregated_throughput_target_counts_queued_prefill_in_utilisation() -> None:
    policy = planner(target="throughput")
    decision = policy.on_tick(snap(5, pool("decode", [0], {0: fpm(20000, 0, 5000)})))
    assert (decision.reason, decision.target_decode) == ("scale_up", 2)   # 25000 / 24576 > 1.0


def test_min_workers_floor_and_scale_to_zero() -> None:
    two = planner(min_workers=2)
    decision = two.on_tick(burst_snapshot(5, [0, 1, 2], [], {0: (0, 0, 0), 1: (0, 0, 0), 2: (0, 0, 0)}))
    assert decision.target_decode == 2
    decision = two.on_tick(burst_snapshot(10, [0, 1], [], {0: (0, 0, 0), 1: (0, 0, 0)}))
    assert (decision.reason, decision.target_decode) == ("no_change", None)
    # below the minimum (fewer replicas configured): as in Dynamo's aggregated easy path the
    # floor applies to a step, not to a "no change"
    below = planner(min_workers=3)
    assert below.on_tick(burst_snapshot(5, [0], [], {0: (0, 0, 0)})).target_decode is None
    assert below.on_tick(burst_snapshot(10, [0], [], {0: (30000, 0, 0)})).target_decode == 3


def test_disaggregated_easy_load_decides_each_pool() -> None:
    policy = planner(disagg=True)
    prefill = pool("prefill", [0, 1], {0: fpm(queued_prefill=3000), 1: fpm()})
    decode = pool("decode", [0, 1], {0: fpm(2000), 1: fpm(1000)})
    decision = policy.on_tick(snap(5, prefill, decode))
    assert (decision.target_prefill, decision.target_decode) == (3, 1)
    assert decision.reason == "scale_up"
    assert decision.diagnostics["load_decision_reason_prefill"] == "scale_up"
    assert decision.diagnostics["load_decision_reason_decode"] == "scale_down"


def test_disaggregated_gating_covers_both_pools() -> None:
    policy = planner(disagg=True)
    prefill = pool("prefill", [0], {0: fpm(queued_prefill=3000)}, starting=[1])
    decode = pool("decode", [0], {0: fpm(2000)})
    assert policy.on_tick(snap(5, prefill, decode)).reason == "scaling_in_progress"
    prefill = pool("prefill", [0, 1], {0: fpm(queued_prefill=3000), 1: None})
    assert policy.on_tick(snap(10, prefill, decode)).reason == "worker_count_mismatch"


def test_disaggregated_gpu_budget_holds_at_the_ceiling() -> None:
    policy = planner(disagg=True, max_num_gpus=4)
    prefill = pool("prefill", [0, 1], {0: fpm(queued_prefill=3000), 1: fpm()})
    decode = pool("decode", [0, 1], {0: fpm(20000), 1: fpm(20000)})
    decision = policy.on_tick(snap(5, prefill, decode))
    assert (decision.reason, decision.target_prefill, decision.target_decode) == ("gpu_budget_guard_hold", None, None)


# --------------------------------------------------------------------------------------------
# GPU budget
# --------------------------------------------------------------------------------------------


def test_guard_single() -> None:
    assert guard_single(3, 4, 1, -1, 8, 1) == (4, None)
    assert guard_single(4, 5, 1, -1, 4, 1) == (4, "gpu_budget_guard_hold")     # at the ceiling
    assert guard_single(3, 6, 1, -1, 4, 1) == (4, None)                         # clamped, same direction
    assert guard_single(2, 1, 2, 4, 8, 1) == (2, "gpu_budget_guard_hold")     # at the floor
    assert guard_single(6, 5, 1, -1, 4, 1) == (4, "gpu_budget_reconcile")     # over budget now
    assert guard_single(2, 3, 4, -1, 8, 1) == (2, "gpu_budget_guard_hold")     # 8 GPUs used already
    assert guard_single(1, 2, 1, -1, -1, 1) == (2, None)                        # no budget


def test_guard_pair_proportional_and_direction_preserving() -> None:
    assert guard_pair((2, 2), (3, 3), (1, 1), -1, 8, (1, 1)) == (3, 3, None)
    # 6P + 6D on 8 GPUs: shrunk proportionally (never below the current counts' direction)
    assert guard_pair((2, 2), (6, 6), (1, 1), -1, 8, (1, 1)) == (4, 4, None)
    assert guard_pair((4, 4), (5, 4), (1, 1), -1, 8, (1, 1)) == (4, 4, "gpu_budget_guard_hold")
    # at the ceiling an opposing rebalance that fits is allowed
    assert guard_pair((4, 4), (5, 3), (1, 1), -1, 8, (1, 1)) == (5, 3, None)
    # endpoint recovery wins over the budget's hold
    assert guard_pair((0, 2), (0, 2), (1, 1), -1, 8, (1, 1)) == (1, 2, "gpu_budget_reconcile")
    # unequal GPU costs: 2P×2 + 2D×1 = 6 of 6, decode up alone is held
    assert guard_pair((2, 2), (2, 3), (2, 1), -1, 6, (1, 1)) == (2, 2, "gpu_budget_guard_hold")


# --------------------------------------------------------------------------------------------
# SLA target (timing-model predictions)
# --------------------------------------------------------------------------------------------

SLA = SlaConfig(ttft_ms=500, itl_ms=50)


def sla_planner(**overrides: Any) -> DynamoPlanner:
    """A load-scaling planner with target sla."""
    keys = {"target": "sla", "enable_throughput_scaling": False, "enable_load_scaling": True, "sla": SLA}
    return planner(**{**keys, **overrides})


def test_sla_aggregated_scales_up_when_every_worker_misses_ttft() -> None:
    busy = {w: fpm(10000, 0, 60000, decodes=4) for w in (0, 1)}
    decision = sla_planner().on_tick(snap(5, pool("decode", [0, 1], busy)))
    assert (decision.reason, decision.target_decode) == ("scale_up", 3)
    assert decision.diagnostics["estimated_ttft_ms"] > 500


def test_sla_aggregated_needs_all_workers_over_the_sla() -> None:
    metrics = {0: fpm(10000, 0, 60000, decodes=4), 1: fpm(10000, decodes=4)}
    decision = sla_planner().on_tick(snap(5, pool("decode", [0, 1], metrics)))
    assert decision.target_decode is None


def test_sla_aggregated_scales_down_a_light_fleet() -> None:
    light = {w: fpm(2600, decodes=1) for w in (0, 1, 2)}
    decision = sla_planner().on_tick(snap(5, pool("decode", [0, 1, 2], light)))
    assert (decision.reason, decision.target_decode) == ("scale_down", 2)
    assert decision.diagnostics["estimated_itl_ms"] < 50


def test_sla_aggregated_refuses_a_scale_down_the_survivor_could_not_hold() -> None:
    # each worker at 61 % KV: ITL fine now, but one worker would hold 122 % of its cache
    metrics = {w: fpm(15000, decodes=6) for w in (0, 1)}
    decision = sla_planner().on_tick(snap(5, pool("decode", [0, 1], metrics)))
    assert (decision.reason, decision.target_decode) == ("scale_down_refused_consolidation", None)


def test_sla_values_come_from_the_evaluation_sla() -> None:
    metrics = {0: fpm(2600, 0, 5000, decodes=1)}   # TTFT ≈ 100 ms
    assert sla_planner().on_tick(snap(5, pool("decode", [0], metrics))).target_decode is None
    strict = planner(target="sla", enable_throughput_scaling=False, enable_load_scaling=True,
                     sla=SlaConfig(ttft_ms=50, itl_ms=50))
    assert strict.on_tick(snap(5, pool("decode", [0], metrics))).target_decode == 2


def test_sla_disaggregated_prefill_and_decode() -> None:
    policy = sla_planner(disagg=True)
    prefill = pool("prefill", [0, 1], {0: fpm(queued_prefill=40000), 1: fpm(queued_prefill=50000)})
    decode = pool("decode", [0, 1], {0: fpm(2600, decodes=1), 1: fpm(2600, decodes=1)})
    decision = policy.on_tick(snap(5, prefill, decode))
    assert (decision.target_prefill, decision.target_decode) == (3, 1)
    assert decision.diagnostics["estimated_ttft_ms"] > 500


def test_sla_disaggregated_decode_scales_up_on_itl() -> None:
    policy = sla_planner(disagg=True, sla=SlaConfig(ttft_ms=500, itl_ms=20))
    prefill = pool("prefill", [0], {0: fpm()})
    decode = pool("decode", [0], {0: fpm(15000, decodes=6)})
    decision = policy.on_tick(snap(5, prefill, decode))
    assert decision.target_decode == 2 and decision.target_prefill is None


# --------------------------------------------------------------------------------------------
# throughput scaling (target sla)
# --------------------------------------------------------------------------------------------

ENGINE = Engine(TIMING, 8192, 256, 384 * 64, 1)


def test_capacity_searches_are_consistent_with_the_timing_model() -> None:
    p = prefill_capacity(ENGINE, 2560, 0.5, 500)
    assert p is not None and p.eligible and p.ttft_ms <= 500
    assert p.rps == pytest.approx(p.batch / (TIMING.prefill(p.batch, 1280, 0) / 1000))
    d = decode_capacity(ENGINE, 2560, 64, 50)
    assert d is not None and d.eligible and d.batch == 24576 // 2592   # KV-bound before the ITL bound
    assert d.rps == pytest.approx(d.batch / (64 * TIMING.decode(d.batch, d.batch * 2592, 2592, 24576) / 1000))
    a = agg_capacity(ENGINE, 2560, 64, 0.5, 500, 50)
    assert a is not None and a.eligible and a.itl_ms <= 50 and a.ttft_ms <= 500
    assert a.rps > 0


def test_capacity_falls_back_to_the_least_violating_point() -> None:
    d = decode_capacity(ENGINE, 2560, 64, 1.0)   # no batch meets a 1 ms ITL
    assert d is not None and not d.eligible and d.batch == 1
    assert prefill_capacity(ENGINE, 0, None, 500) is None


def throughput_planner(**overrides: Any) -> DynamoPlanner:
    keys = {"target": "sla", "enable_throughput_scaling": True, "enable_load_scaling": False,
            "throughput_adjustment_interval_seconds": 60, "load_predictor": "constant", "sla": SLA,
            "max_num_gpus": 16}
    return planner(**{**keys, **overrides})


def busy_window(num_req: int, seconds: float = 5.0) -> TrafficWindow:
    return TrafficWindow(duration_s=seconds, num_req=num_req, avg_isl=2560, avg_osl=64, num_completed=num_req,
                         avg_kv_hit_rate=0.5, num_kv_hit_samples=num_req)


def test_throughput_ticks_on_its_own_interval() -> None:
    policy = throughput_planner()
    assert policy.initial_tick_ms() == 5000.0   # gcd(60, 5)
    p = pool("decode", [0], {0: fpm(100)})
    for at in range(5, 60, 5):
        assert policy.on_tick(snap(at, p, traffic=busy_window(100))).reason == "not_due"
    decision = policy.on_tick(snap(60, p, traffic=busy_window(100)))
    assert decision.reason == "scale_up"
    assert decision.diagnostics["predicted_num_req"] == 1200   # the merged 60 s window


def test_throughput_replicas_are_demand_over_engine_capacity() -> None:
    policy = throughput_planner()
    p = pool("decode", [0], {0: fpm(100)})
    decision = None
    for at in range(5, 65, 5):
        decision = policy.on_tick(snap(at, p, traffic=busy_window(40)))
    assert decision is not None
    rps = agg_capacity(ENGINE, 2560, 64, 0.5, 500, 50).rps
    assert decision.diagnostics["engine_rps_decode"] == pytest.approx(rps)
    assert decision.target_decode == math.ceil(8.0 / rps)


def test_throughput_change_is_capped_per_decision() -> None:
    policy = throughput_planner(max_throughput_scaling_replicas=2)
    p = pool("decode", [0], {0: fpm(100)})
    decision = policy.on_tick(snap(60, p, traffic=busy_window(60000, 60)))
    assert decision.target_decode == 3


def test_throughput_scales_down_to_the_minimum_when_idle() -> None:
    policy = throughput_planner()
    p = pool("decode", [0, 1, 2], {w: fpm() for w in range(3)})
    policy.on_tick(snap(60, p, traffic=busy_window(1, 60)))
    decision = policy.on_tick(snap(120, p, traffic=TrafficWindow(duration_s=60)))
    assert (decision.reason, decision.target_decode) == ("scale_down", 1)


def floor_run(workers: int, per_tick: int) -> Any:
    """Throughput (60 s) + load (5 s) scaling over idle workers and steady traffic; the 60 s decision."""
    policy = throughput_planner(enable_load_scaling=True, load_adjustment_interval_seconds=5)
    idle = pool("decode", list(range(workers)), {w: fpm() for w in range(workers)})
    decisions = [policy.on_tick(snap(at, idle, traffic=busy_window(per_tick))) for at in range(5, 65, 5)]
    assert decisions[0].diagnostics["throughput_lower_bound"] == {"prefill": 1, "decode": 1}
    return decisions[-1]


def test_throughput_is_a_floor_for_load_scaling() -> None:
    rps = agg_capacity(ENGINE, 2560, 64, 0.5, 500, 50).rps
    assert math.ceil(2.0 / rps) == 2 and math.ceil(8.0 / rps) == 5
    decision = floor_run(4, 10)                     # 2 req/s: floor 2, load steps 4 → 3
    assert decision.diagnostics["throughput_decision_reason"] == "set_lower_bound"
    assert decision.diagnostics["throughput_lower_bound"]["decode"] == 2
    assert (decision.reason, decision.target_decode) == ("scale_down", 3)
    decision = floor_run(2, 10)                     # load wants 1, the floor keeps 2
    assert (decision.reason, decision.target_decode) == ("scale_down_capped_by_throughput", None)
    decision = floor_run(4, 40)                     # 8 req/s: the floor lifts idle workers to 5
    assert (decision.reason, decision.target_decode) == ("scale_up", 5)


def test_throughput_disaggregated_sizes_both_pools() -> None:
    policy = throughput_planner(disagg=True)
    prefill = pool("prefill", [0], {0: fpm()})
    decode = pool("decode", [0], {0: fpm()})
    decision = policy.on_tick(snap(60, prefill, decode, traffic=busy_window(1200, 60)))
    engine_p = prefill_capacity(ENGINE, 2560, 0.5, 500).rps
    engine_d = decode_capacity(ENGINE, 2560, 64, 50).rps
    assert math.ceil(20 / engine_p) == 1 and math.ceil(20 / engine_d) == 5
    assert (decision.reason, decision.target_prefill, decision.target_decode) == ("scale_up", None, 5)
    # 3P + 9D (the step cap) on a 6-GPU budget: shrunk proportionally, decode takes the rest
    assert (math.ceil(100 / engine_p), math.ceil(100 / engine_d)) == (3, 25)
    policy = throughput_planner(disagg=True, max_num_gpus=6)
    decision = policy.on_tick(snap(60, prefill, decode, traffic=busy_window(6000, 60)))
    assert (decision.target_prefill, decision.target_decode) == (None, 5)
    # from 2P + 2D the proportional share would shrink prefill while it asked to grow: held
    two = (pool("prefill", [0, 1], {0: fpm(), 1: fpm()}), pool("decode", [0, 1], {0: fpm(), 1: fpm()}))
    decision = throughput_planner(disagg=True, max_num_gpus=6).on_tick(
        snap(60, *two, traffic=busy_window(6000, 60)))
    assert (decision.reason, decision.target_prefill, decision.target_decode) == ("gpu_budget_guard_hold", None, None)


# --------------------------------------------------------------------------------------------
# configuration and factory
# --------------------------------------------------------------------------------------------

ENGINE_YAML = """
engine:
  mode: aggregated
  model: Qwen/Qwen3-32B-FP8
  hardware: h200_sxm
  workers:
    aggregated:
      kv_cache: {block_size: 64, capacity: {type: fixed, blocks: 384}}
      timing: {type: polynomial}
"""


def parse(planner_yaml: str, extra: str = "") -> Any:
    return parse_config(yaml.safe_load(ENGINE_YAML + extra + planner_yaml))


def test_burst_case_planner_section_is_accepted_as_written() -> None:
    config = parse(yaml.safe_dump({"planner": BURST_CONFIG}))
    assert config.planner.policy == "enabled" and config.planner.target == "load"
    assert config.planner.scaling_modes == (False, True)
    settings = planner_settings(config.planner, config.evaluation.sla, False)
    assert settings is not None
    assert (settings.tick_s, settings.max_gpus, settings.min_decode) == (5, 4, 1)


def test_planner_defaults_follow_dynamo() -> None:
    c = PlannerConfig()
    assert c.policy == "disabled" and c.target == "throughput"
    assert (c.enable_throughput_scaling, c.enable_load_scaling) == (True, False)
    assert (c.throughput_adjustment_interval_seconds, c.load_adjustment_interval_seconds) == (180, 5)
    assert (c.max_num_gpus, c.min_num_gpus, c.min_workers, c.max_throughput_scaling_replicas) == (8, -1, 1, 8)
    assert (c.load_predictor, c.load_scaling_down_sensitivity, c.load_min_observations) == ("arima", 80, 5)
    assert (c.max_num_fpm_samples, c.fpm_sample_bucket_size, c.prophet_window_size) == (64, 16, 50)
    assert (c.kalman_q_level, c.kalman_q_trend, c.kalman_r, c.kalman_min_points) == (1.0, 0.1, 10.0, 5)


@pytest.mark.parametrize(("section", "message"), [
    ("planner: {policy: enabled, target: load, surprise: 1}", "planner.surprise"),
    ("planner: {policy: enabled, target: load, fpm_sample_bucket_size: 10}", "perfect square"),
    ("planner: {policy: enabled, target: sla}", "needs evaluation.sla"),
    ("planner: {policy: enabled, target: load, prefill_min_workers: 2}", "only for engine.mode 'disaggregated'"),
    ("planner: {policy: enabled, target: sla, enable_throughput_scaling: false, enable_load_scaling: false}",
     "at least one"),
    ("planner: {policy: enabled, target: load, load_adjustment_interval_seconds: null}", "cannot be null"),
    ("planner: {policy: enabled, target: load, load_adjustment_interval_seconds: '5'}", "load_adjustment_interval"),
    ("planner: {policy: enabled, target: load, load_scaling_down_sensitivity: 120}", "load_scaling_down_sensitivity"),
])
def test_planner_config_errors(section: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse(section)


def test_sla_throughput_load_intervals_must_be_ordered() -> None:
    extra = "evaluation: {sla: {ttft_ms: 500, itl_ms: 50}}\n"
    with pytest.raises(ConfigError, match="must be shorter"):
        parse("planner: {policy: enabled, target: sla, enable_load_scaling: true,"
              " throughput_adjustment_interval_seconds: 5}", extra)
    config = parse("planner: {policy: enabled, target: sla, enable_load_scaling: true}", extra)
    settings = planner_settings(config.planner, config.evaluation.sla, False)
    assert settings is not None
    assert (settings.throughput_scaling, settings.load_scaling, settings.tick_s) == (True, True, 5)
    assert (settings.ttft_ms, settings.itl_ms) == (500.0, 50.0)


def test_lowering_the_planner_section() -> None:
    assert planner_settings(PlannerConfig(), None, False) is None
    assert planner_settings(PlannerConfig(policy="disabled", target="load"), None, False) is None
    config = PlannerConfig(policy="enabled", target="latency", min_workers=2, decode_min_workers=3)
    settings = planner_settings(config, SlaConfig(ttft_ms=100, itl_ms=10), True)
    assert settings is not None
    # easy targets ignore the SLA (Dynamo's defaults) and force load-only scaling
    assert (settings.ttft_ms, settings.itl_ms) == (500.0, 50.0)
    assert (settings.throughput_scaling, settings.load_scaling) == (False, True)
    assert (settings.min_prefill, settings.min_decode) == (2, 3)
    sla = planner_settings(PlannerConfig(policy="enabled", target="sla"), SlaConfig(ttft_ms=100, itl_ms=10), False)
    assert sla is not None
    assert (sla.ttft_ms, sla.itl_ms, sla.tick_s) == (100.0, 10.0, 5)


def test_settings_default_is_a_valid_policy() -> None:
    policy = DynamoPlanner(PlannerSettings())
    decision = policy.on_tick(snap(5, pool("decode", [0], {0: fpm(24000)})))
    assert (decision.reason, decision.target_decode) == ("no_change", None)   # 97.7 % ≤ 100 %
