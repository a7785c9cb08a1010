"""Planner GPU-budget and sizing rules beyond test_bounds_planner.py (scaling/planner/budget.py,
policy.py, settings.py): a bound of 0 GPUs is a real bound (only a negative one is off), a worker
of 0 GPUs is outside the budget, the one-replica tolerance below the floor needs both bounds
(for a pair: the ceiling), the floor rounds up and the ceiling down (a pair's prefill share too),
a ceiling of exactly the minimums keeps them, a raise that overshoots the ceiling keeps the
pair, and the planner's replica count, decision and tick."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from servesim.scaling.planner import budget
from servesim.scaling.planner.policy import DynamoPlanner
from servesim.scaling.planner.settings import PlannerSettings

OFF = -1
HOLD, RECONCILE = "gpu_budget_guard_hold", "gpu_budget_reconcile"


# -- one pool --------------------------------------------------------------------------------

def test_a_ceiling_of_zero_gpus_is_a_bound():
    assert budget.clamp_single(3, 2, OFF, 0, 0) == 0
    assert budget.clamp_single(3, 2, OFF, 0, 1) == 0
    assert budget.clamp_single(0, 2, OFF, 0, 0) == 0
    assert budget.guard_single(0, 1, 2, OFF, 0, 0) == (0, HOLD), "at a ceiling of 0 a growth is held"
    assert budget.guard_single(2, 2, 2, OFF, 0, 0) == (0, RECONCILE)


def test_a_floor_of_zero_gpus_takes_nothing_away():
    assert budget.clamp_single(0, 2, 0, OFF, 0) == 0
    assert budget.guard_single(1, 0, 2, 0, OFF, 0) == (0, None)


def test_workers_without_gpus_are_outside_the_budget():
    assert budget.clamp_single(3, 0, 4, OFF, 1) == 3
    assert budget.clamp_single(3, 0, OFF, 1, 1) == 3
    assert budget.guard_single(2, 5, 0, 4, 4, 1) == (5, None)
    assert budget.clamp_single(7, 2, OFF, OFF, 1) == 7, "both bounds off"


@pytest.mark.parametrize(("desired", "min_gpus", "max_gpus", "expected"), [
    (2, 10, OFF, 3),    # no ceiling: no tolerance, 8 < 10, up to ceil(10 / 4)
    (2, 10, 100, 2),    # both bounds: 8 ≥ 10 − 4
    (2, 12, 100, 2),    # exactly at the tolerated floor
    (2, 13, 100, 4),    # one GPU below it: ceil(13 / 4)
    (1, 10, 100, 3),
])
def test_the_floor_tolerance_needs_both_bounds(desired, min_gpus, max_gpus, expected):
    assert budget.clamp_single(desired, 4, min_gpus, max_gpus, 1) == expected


def test_the_floor_rounds_up_and_the_minimum_wins():
    assert budget.clamp_single(1, 3, 7, OFF, 1) == 3, "ceil(7 / 3)"
    assert budget.clamp_single(0, 4, 4, OFF, 2) == 2, "the minimum workers over ceil(4 / 4) = 1"


def test_a_ceiling_of_exactly_the_minimum_workers_keeps_them():
    assert budget.clamp_single(5, 2, OFF, 4, 2) == 2
    assert budget.clamp_single(5, 2, OFF, 3, 2) == 0
    assert budget.clamp_single(5, 2, OFF, 5, 1) == 2, "floor(5 / 2)"


def test_a_current_count_out_of_band_is_reconciled():
    assert budget.guard_single(5, 5, 2, OFF, 8, 1) == (4, RECONCILE)
    assert budget.guard_single(2, 3, 4, 12, OFF, 1) == (3, RECONCILE), "8 < 12 with no tolerance"
    assert budget.guard_single(2, 3, 4, 12, 100, 1) == (3, None), "8 ≥ 12 − 4: in band, a free growth"


def test_a_clamp_that_would_reverse_the_move_holds():
    # in band at 4 GPUs; growing to 5 × 4 clamps to 0 (2 workers × 4 GPUs do not fit 6)
    assert budget.guard_single(1, 5, 4, OFF, 6, 2) == (1, HOLD)


def test_a_shrink_into_the_band_passes_and_one_below_is_raised():
    assert budget.guard_single(4, 1, 2, 6, 20, 1) == (3, None), "clamped up to ceil(6 / 2), still a shrink"


# -- a pair ----------------------------------------------------------------------------------

def test_a_pair_without_gpus_or_bounds_is_untouched():
    assert budget.clamp_pair(3, 3, 0, 1, OFF, 2, 1, 1) == (3, 3)
    assert budget.clamp_pair(3, 3, 1, 0, OFF, 2, 1, 1) == (3, 3)
    assert budget.clamp_pair(3, 3, 1, 1, OFF, OFF, 1, 1) == (3, 3)
    assert budget.guard_pair((1, 1), (4, 4), (0, 1), OFF, 2, (1, 1)) == (4, 4, None)
    assert budget.guard_pair((1, 1), (4, 4), (1, 0), OFF, 2, (1, 1)) == (4, 4, None)


def test_a_pair_ceiling_of_zero_is_a_bound():
    assert budget.clamp_pair(1, 1, 1, 1, OFF, 0, 0, 0) == (0, 0)


def test_the_prefill_share_of_a_ceiling_rounds_down():
    assert budget.clamp_pair(4, 4, 1, 1, OFF, 7, 1, 1) == (3, 4), "floor(4 × 7 / 8) = 3, decode the rest"


def test_a_pair_ceiling_of_exactly_the_minimums_keeps_them():
    assert budget.clamp_pair(5, 5, 1, 1, OFF, 2, 1, 1) == (1, 1)
    assert budget.clamp_pair(5, 5, 1, 1, OFF, 1, 1, 1) == (0, 0)


@pytest.mark.parametrize(("min_gpus", "max_gpus", "expected"), [
    (8, 100, (1, 1)),    # both bounds: 5 GPUs ≥ 8 − max(2, 3)
    (9, 100, (2, 2)),    # one below: prefill ceil(1 × 9 / 5) = 2, decode ceil((9 − 4) / 3) = 2
    (8, OFF, (2, 2)),    # no ceiling, no tolerance
])
def test_the_pair_floor_tolerance_is_the_larger_worker(min_gpus, max_gpus, expected):
    assert budget.clamp_pair(1, 1, 2, 3, min_gpus, max_gpus, 1, 1) == expected


def test_an_empty_pair_is_raised_half_and_half():
    assert budget.clamp_pair(0, 0, 2, 2, 8, OFF, 0, 0) == (2, 2)
    assert budget.clamp_pair(0, 0, 3, 2, 7, OFF, 0, 0) == (2, 1), "prefill ceil(7 / 2 / 3), decode the rest"


def test_a_raise_past_the_ceiling_keeps_the_pair():
    assert budget.clamp_pair(1, 1, 4, 4, 20, 20, 1, 1) == (3, 2), "exactly at the ceiling"
    assert budget.clamp_pair(1, 1, 4, 4, 20, 19, 1, 1) == (1, 1)


def test_a_raise_keeps_a_larger_decode_count():
    assert budget.clamp_pair(2, 6, 4, 1, 16, OFF, 1, 1) == (3, 6)


def test_a_pair_below_its_minimums_is_reconciled_from_the_proposal():
    assert budget.guard_pair((0, 2), (0, 3), (1, 1), OFF, OFF, (1, 1)) == (1, 3, RECONCILE)
    assert budget.guard_pair((2, 0), (1, 0), (1, 1), OFF, OFF, (1, 1)) == (1, 1, RECONCILE)
    assert budget.guard_pair((1, 1), (1, 2), (1, 1), OFF, OFF, (1, 1)) == (1, 2, None), "at the minimums"


def test_the_pair_guard_tolerance_comes_with_the_ceiling():
    assert budget.guard_pair((1, 1), (1, 1), (2, 3), 8, OFF, (1, 1)) == (2, 2, RECONCILE)
    assert budget.guard_pair((1, 1), (1, 1), (2, 3), 8, 100, (1, 1)) == (1, 1, None)


def test_an_opposing_move_at_the_ceiling_passes_only_if_it_fits():
    assert budget.guard_pair((2, 2), (3, 1), (2, 2), OFF, 8, (1, 1)) == (3, 1, None)
    assert budget.guard_pair((2, 2), (4, 1), (2, 2), OFF, 8, (1, 1)) == (2, 2, HOLD)
    assert budget.guard_pair((2, 2), (1, 3), (2, 2), 8, 20, (1, 1)) == (1, 3, None), "at the floor too"


def test_a_pair_clamp_that_reverses_a_move_holds():
    # 6 GPUs, growing decode to 6 overshoots 10: the clamp would cut prefill to 1 < 2
    assert budget.guard_pair((2, 1), (2, 6), (2, 2), OFF, 10, (1, 1)) == (2, 1, HOLD)


# -- the planner's sizing and answer ---------------------------------------------------------

def _planner(**knobs) -> DynamoPlanner:
    return DynamoPlanner(PlannerSettings(**knobs))


def test_a_capacity_of_zero_rps_is_unknown():
    planner = _planner()
    diag: dict = {}
    assert planner._replicas("decode", 5.0, SimpleNamespace(rps=0.0), 3, diag) == (3, False)
    assert diag["engine_rps_decode"] is None
    assert planner._replicas("prefill", 5.0, SimpleNamespace(rps=0.5), 3, diag) == (10, True)
    assert diag["engine_rps_prefill"] == 0.5


def test_the_minimum_wins_over_the_step_cap():
    planner = _planner(min_decode=3, max_step=1)
    assert planner._replicas("decode", 10.0, SimpleNamespace(rps=2.0), 0, {}) == (3, True)
    assert planner._replicas("decode", 0.0, SimpleNamespace(rps=2.0), 5, {}) == (4, True)


def test_a_demand_of_zero_needs_the_minimum():
    planner = _planner(min_prefill=2, max_step=8)
    assert planner._replicas("prefill", 0.0, SimpleNamespace(rps=2.0), 4, {}) == (2, True)


def _snapshot(now: float, decode: int, prefill: int | None = None):
    pools = {"decode": SimpleNamespace(non_draining=decode)}
    if prefill is not None:
        pools["prefill"] = SimpleNamespace(non_draining=prefill)
    return SimpleNamespace(now_ms=now, pools=pools)


def test_a_decision_carries_only_changed_targets_and_never_a_negative_one():
    planner = _planner(load_interval_s=5)
    decision = planner._decision(_snapshot(10_000.0, 3, 2), {"decode": -1, "prefill": 2}, "scale", {})
    assert (decision.target_decode, decision.target_prefill, decision.reason) == (0, None, "scale_down")
    assert decision.next_tick_ms == 15_000.0
    same = planner._decision(_snapshot(0.0, 3), {"decode": 3}, "scale", {})
    assert (same.target_decode, same.reason) == (None, "scale")
    up = planner._decision(_snapshot(0.0, 3), {"decode": 4}, "scale", {})
    assert (up.target_decode, up.reason) == (4, "scale_up")
    kept = planner._decision(_snapshot(0.0, 3), {"decode": 4}, "set_lower_bound", {})
    assert kept.reason == "set_lower_bound"
    unknown = planner._decision(_snapshot(0.0, 3), {"other": 4}, "scale", {})
    assert unknown.target_decode is None and unknown.target_prefill is None


def test_the_base_tick_is_the_gcd_of_the_running_intervals():
    assert PlannerSettings(load_interval_s=6, throughput_interval_s=20).tick_s == 6
    assert PlannerSettings(load_interval_s=6, throughput_interval_s=20, throughput_scaling=True).tick_s == 2
    assert _planner(load_interval_s=6).initial_tick_ms() == 6_000.0


def test_a_disabled_decision_is_never_due():
    planner = _planner(load_scaling=False, load_interval_s=5)
    assert not planner._due("load", 1e9)
    planner = _planner(throughput_scaling=True, throughput_interval_s=10)
    assert not planner._due("throughput", 9_999.0)
    assert planner._due("throughput", 10_000.0) and not planner._due("throughput", 10_000.0)
    assert planner._due("throughput", 20_000.0 - 1e-7), "within the tolerance of a full interval"


def test_the_planners_defaults():
    s = PlannerSettings()
    assert (s.disaggregated, s.target, s.throughput_scaling, s.load_scaling) == (False, "throughput", False, True)
    assert (s.throughput_interval_s, s.load_interval_s, s.min_prefill, s.min_decode) == (180, 5, 1, 1)
    assert (s.max_gpus, s.min_gpus, s.max_step, s.fpm_window, s.sensitivity) == (8, -1, 8, 64, 0.8)
    assert (s.ttft_ms, s.itl_ms) == (500.0, 50.0)
    assert s.min_workers("prefill") == 1 and PlannerSettings(min_prefill=3).min_workers("prefill") == 3
    assert PlannerSettings(min_decode=4).min_workers("decode") == 4
