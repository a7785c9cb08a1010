"""Planner boundaries (router-planner spec §3.5-3.6): replicas = ceil(demand / engine rps),
capped to ±max_step of the current count; the GPU budget clamps replicas × GPUs into
[min_gpus, max_gpus] rounding toward the inside of the band (down from the ceiling, up from the
floor), a total exactly at a bound is within it, and the guard holds a move past a bound; a
decision is due exactly one interval after the last one."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from servesim.scaling.planner import budget
from servesim.scaling.planner.policy import DynamoPlanner
from servesim.scaling.planner.settings import PlannerSettings

OFF = -1


def test_the_ceiling_rounds_the_count_down():
    assert budget.clamp_single(5, 2, OFF, 7, 1) == 3, "3 × 2 = 6 ≤ 7 < 8 = 4 × 2"


def test_the_floor_rounds_the_count_up():
    assert budget.clamp_single(1, 4, 10, OFF, 1) == 3, "3 × 4 = 12 ≥ 10 > 8 = 2 × 4"


def test_a_total_exactly_at_the_ceiling_is_in_band():
    assert budget.clamp_single(4, 2, OFF, 8, 1) == 4
    assert budget.guard_single(4, 3, 2, OFF, 8, 1) == (3, None), "shrinking from the ceiling is free"


def test_at_the_ceiling_a_growth_is_held():
    assert budget.guard_single(4, 5, 2, OFF, 8, 1) == (4, "gpu_budget_guard_hold")


def test_at_the_floor_a_shrink_is_held():
    assert budget.guard_single(3, 2, 2, 6, OFF, 1) == (3, "gpu_budget_guard_hold")
    assert budget.guard_single(4, 3, 2, 6, OFF, 1) == (3, None), "above the floor a shrink to it is fine"


def test_the_minimum_workers_win_over_the_ceiling():
    assert budget.clamp_single(3, 4, OFF, 6, 2) == 0, "2 workers × 4 GPUs do not fit 6"
    assert budget.clamp_single(3, 4, OFF, 8, 2) == 2


def test_the_pair_is_scaled_down_proportionally_with_floors():
    # 5 prefill + 3 decode of 1 GPU each into 6 GPUs: prefill floor(5 × 6 / 8) = 3, decode the rest.
    assert budget.clamp_pair(5, 3, 1, 1, OFF, 6, 1, 1) == (3, 3)
    assert budget.clamp_pair(3, 3, 2, 2, OFF, 8, 1, 1) == (2, 2)


@given(st.integers(0, 20), st.integers(1, 8), st.integers(1, 64), st.integers(0, 3))
def test_a_clamped_count_never_exceeds_the_ceiling(desired, gpus, max_gpus, min_workers):
    n = budget.clamp_single(desired, gpus, OFF, max_gpus, min_workers)
    if n:
        assert n * gpus <= max_gpus or n == min_workers
        assert n == desired or (n + 1) * gpus > max_gpus or n == min_workers, "no GPU left unused"


@given(st.integers(0, 20), st.integers(1, 8), st.integers(1, 64))
def test_a_clamped_count_reaches_the_floor(desired, gpus, min_gpus):
    n = budget.clamp_single(desired, gpus, min_gpus, OFF, 1)
    assert n * gpus >= min_gpus
    assert n == desired or n == 1 or (n - 1) * gpus < min_gpus, "no GPU more than the floor needs"


def _planner(**knobs) -> DynamoPlanner:
    return DynamoPlanner(PlannerSettings(**knobs))


RPS2 = SimpleNamespace(rps=2.0)


def test_replicas_are_the_ceiling_of_demand_over_engine_rps():
    planner = _planner(max_step=8)
    assert planner._replicas("decode", 6.0, RPS2, 3, {}) == (3, True), "6 / 2 = 3 exactly"
    assert planner._replicas("decode", 6.2, RPS2, 3, {}) == (4, True)


def test_the_step_is_capped_both_ways():
    planner = _planner(max_step=2)
    assert planner._replicas("decode", 0.1, RPS2, 8, {}) == (6, True), "down by at most 2"
    assert planner._replicas("decode", 20.0, RPS2, 3, {}) == (5, True), "up by at most 2"
    assert planner._replicas("decode", 10.0, RPS2, 3, {}) == (5, True), "exactly max_step up"
    assert planner._replicas("decode", 2.0, RPS2, 3, {}) == (1, True), "exactly max_step down"


def test_unknown_capacity_holds_the_count_but_keeps_the_minimum():
    planner = _planner(min_decode=2)
    assert planner._replicas("decode", 5.0, None, 1, {}) == (2, False)
    assert planner._replicas("decode", 5.0, None, 4, {}) == (4, False)


@pytest.mark.parametrize("interval_s", [5, 7])
def test_a_decision_is_due_exactly_one_interval_after_the_last(interval_s):
    planner = _planner(load_interval_s=interval_s)
    ms = interval_s * 1000.0
    assert planner._due("load", ms)
    assert not planner._due("load", 2 * ms - 1.0)
    assert planner._due("load", 2 * ms)


def test_the_floor_band_reaches_one_replica_below_the_floor():
    """Both bounds set: a tolerance of one replica's GPUs below min_gpus is in band."""
    assert budget.clamp_single(3, 2, 8, 16, 1) == 3, "6 GPUs ≥ 8 − 2"
    assert budget.clamp_single(2, 2, 8, 16, 1) == 4, "4 GPUs < 6: up to 8"


def test_the_prefill_ceiling_leaves_room_for_the_decode_minimum():
    assert budget.clamp_pair(10, 1, 1, 1, OFF, 6, 1, 3) == (3, 3)


def test_a_pair_exactly_at_the_ceiling_is_held_from_growing():
    assert budget.guard_pair((2, 2), (3, 2), (2, 2), OFF, 8, (1, 1)) == (2, 2, "gpu_budget_guard_hold")


@given(st.integers(1, 6), st.integers(1, 6), st.integers(0, 8), st.integers(0, 8), st.integers(1, 4),
       st.integers(1, 4), st.integers(4, 40))
def test_a_budgeted_pair_fits_the_ceiling(p, d, pp, pd, pg, dg, max_gpus):
    fp, fd, reason = budget.guard_pair((p, d), (max(pp, 1), max(pd, 1)), (pg, dg), OFF, max_gpus, (1, 1))
    if pg + dg <= max_gpus and reason != "gpu_budget_guard_hold":
        assert fp * pg + fd * dg <= max_gpus + max(pg, dg)


@given(st.integers(0, 12), st.integers(0, 12), st.integers(1, 4), st.integers(0, 24), st.integers(0, 48))
def test_the_guard_never_reverses_a_move(current, proposed, gpus, min_gpus, span):
    final, reason = budget.guard_single(current, proposed, gpus, min_gpus, min_gpus + span, 0)
    if reason != "gpu_budget_reconcile":
        assert min(current, proposed) <= final <= max(current, proposed)


def test_a_throughput_decision_is_scale_up_if_any_pool_grows():
    snapshot = SimpleNamespace(pools={"prefill": SimpleNamespace(non_draining=2),
                                      "decode": SimpleNamespace(non_draining=2)})
    assert DynamoPlanner._direction(snapshot, {"prefill": 3, "decode": 1}) == "scale_up"
    assert DynamoPlanner._direction(snapshot, {"prefill": 1, "decode": 2}) == "scale_down"


# -- the disaggregated pair at the floor (total ≤ min_gpus holds a shrink) ------------------------

@pytest.mark.parametrize(("min_gpus", "held"), [(7, False), (8, True), (9, True)])
@pytest.mark.parametrize("proposal", [(1, 2), (2, 1), (1, 1)])
def test_a_pair_at_or_below_the_floor_is_held_from_shrinking(min_gpus, held, proposal):
    """(2, 2) with 2 GPUs each is 8 GPUs; max 20 gives a tolerance of 2, so 9 is still in band.
    Above the floor a shrink to 6 GPUs is within [7 − 2, 20] and passes; one to 4 is not, and is
    clamped back up (ceil(1 · 7 / 4) = 2 prefill, ceil((7 − 4) / 2) = 2 decode), with no hold."""
    result = budget.guard_pair((2, 2), proposal, (2, 2), min_gpus, 20, (1, 1))
    free = (2, 2, None) if proposal == (1, 1) else (*proposal, None)
    assert result == ((2, 2, "gpu_budget_guard_hold") if held else free)


@pytest.mark.parametrize("min_gpus", [8, 9])
def test_at_the_floor_an_opposing_move_passes_when_it_fits(min_gpus):
    assert budget.guard_pair((2, 2), (3, 1), (2, 2), min_gpus, 20, (1, 1)) == (3, 1, None)
    assert budget.guard_pair((2, 2), (3, 2), (2, 2), min_gpus, 20, (1, 1)) == (3, 2, None), "growth is free"


def test_a_pair_at_the_floor_without_a_ceiling_is_held_from_shrinking():
    assert budget.guard_pair((2, 3), (2, 2), (2, 2), 10, OFF, (1, 1)) == (2, 3, "gpu_budget_guard_hold")
    assert budget.guard_pair((2, 3), (2, 2), (2, 2), 8, OFF, (1, 1)) == (2, 2, None), "10 > 8: down to the floor"
