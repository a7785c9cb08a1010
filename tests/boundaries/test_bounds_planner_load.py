"""Load-scaling boundaries (router-planner spec §3.3-3.4): each easy target's up/down thresholds
and whether the value exactly at one counts; +1 when ANY engine is up, −1 only when ALL are down
and there is more than one worker, refused when consolidating onto N − 1 workers
(max × N/(N−1)) would reach the up threshold; the SLA step goes up only when EVERY prediction
is over the SLA."""

from __future__ import annotations

import pytest

from servesim.scaling.planner.load import Thresholds, classify, consolidation, easy_step, easy_thresholds, sla_step

# (target, role): (up, down, up inclusive, down inclusive), from the spec's §3.3 table.
SPEC = {
    ("throughput", "prefill"): (1.0, 0.1, True, False),
    ("throughput", "decode"): (1.0, 0.6, False, False),
    ("latency", "prefill"): (0.1, 0.0, True, True),
    ("latency", "decode"): (0.4, 0.1, False, False),
    ("load", "prefill"): (1.0, 0.0, True, True),
    ("load", "decode"): (0.9, 0.7, True, True),
}
EPS = 1e-9


@pytest.mark.parametrize("key", sorted(SPEC))
def test_each_target_has_the_spec_thresholds(key):
    up, down, up_incl, down_incl = SPEC[key]
    t = easy_thresholds(*key)
    assert t.above(up) is up_incl, "exactly at the up threshold"
    assert t.above(up + EPS) and not t.above(up - EPS)
    assert t.below(down) is down_incl, "exactly at the down threshold"
    assert t.below(down - EPS) and not t.below(down + EPS)


def test_aggregated_pools_use_the_decode_thresholds():
    for target in ("throughput", "latency", "load"):
        assert easy_thresholds(target, "agg") == easy_thresholds(target, "decode")


LOAD = Thresholds(0.9, 0.7, True, True)
STRICT = Thresholds(1.0, 0.6, False, False)


def test_one_engine_at_the_up_threshold_scales_up():
    assert easy_step([0.1, 0.9, 0.2], 3, LOAD, 1) == (4, "scale_up")
    assert easy_step([0.1, 0.89, 0.2], 3, LOAD, 1) == (None, "no_change")


def test_a_strict_up_threshold_needs_a_value_over_it():
    assert easy_step([1.0], 2, STRICT, 1) == (None, "no_change")
    assert easy_step([1.0 + EPS], 2, STRICT, 1) == (3, "scale_up")


def test_all_engines_must_be_down_to_scale_down():
    # 10 → 9: the guard sees max 0.7 × 10/9 = 0.78 < 0.9.
    assert easy_step([0.3, 0.7, 0.1] + [0.0] * 7, 10, LOAD, 1) == (9, "scale_down"), "0.7 is at (inclusive) the down threshold"
    assert easy_step([0.3, 0.71, 0.1] + [0.0] * 7, 10, LOAD, 1) == (None, "no_change"), "one above the down threshold"


def test_a_strict_down_threshold_excludes_the_value_at_it():
    assert easy_step([0.6, 0.1], 4, STRICT, 1) == (None, "no_change")
    assert easy_step([0.6 - EPS, 0.1], 4, STRICT, 1) == (3, "scale_down")


def test_one_worker_never_scales_down():
    assert easy_step([0.0], 1, LOAD, 0) == (None, "no_change")
    assert easy_step([0.0, 0.0], 2, LOAD, 0) == (1, "scale_down")


def test_the_minimum_holds_a_scale_down():
    assert easy_step([0.0, 0.0, 0.0], 3, LOAD, 3) == (3, "no_change")
    assert easy_step([0.0, 0.0, 0.0], 3, LOAD, 2) == (2, "scale_down")


def test_consolidation_reaching_the_up_threshold_is_refused():
    wide = Thresholds(1.0, 0.75, True, True)
    # 0.5 × 2/1 = 1.0 and 0.75 × 4/3 = 1.0: exactly the up threshold, so the survivor would scale up again.
    assert easy_step([0.5, 0.1], 2, wide, 1) == (2, "no_change")
    assert easy_step([0.75, 0.1, 0.1, 0.1], 4, wide, 1) == (4, "no_change")
    # Just below: 0.4999 × 2 and 0.7499 × 4/3 stay under 1.0.
    assert easy_step([0.4999, 0.1], 2, wide, 1) == (1, "scale_down")
    assert easy_step([0.7499, 0.1, 0.1, 0.1], 4, wide, 1) == (3, "scale_down")


def test_the_guard_uses_the_largest_value_and_n_over_n_minus_one():
    # 2 → 1: 0.5 × 2/1 = 1.0 ≥ 0.9 refused; 0.44 × 2 = 0.88 passes.
    assert easy_step([0.1, 0.5], 2, LOAD, 1) == (2, "no_change")
    assert easy_step([0.44, 0.1], 2, LOAD, 1) == (1, "scale_down")
    # 4 → 3: 0.68 × 4/3 = 0.9067 ≥ 0.9 refused; 0.67 × 4/3 = 0.8933 passes.
    assert easy_step([0.68, 0.0, 0.0, 0.0], 4, LOAD, 1) == (4, "no_change")
    assert easy_step([0.67, 0.0, 0.0, 0.0], 4, LOAD, 1) == (3, "scale_down")


def test_scaling_to_zero_has_no_guard():
    assert easy_step([0.7], 1, LOAD, 0) == (None, "no_change"), "one worker: no scale-down at all"
    assert easy_step([0.7, 0.7], 2, LOAD, 0) == (2, "no_change"), "0.7 × 2 = 1.4 ≥ 0.9"


def test_consolidation_factor():
    assert consolidation(2) == 2.0
    assert consolidation(3) == 1.5
    assert consolidation(5) == 1.25
    assert consolidation(1) == 1.0
    assert consolidation(0) == 1.0


def test_sla_scales_up_only_when_every_prediction_is_over():
    assert sla([60.0, 51.0], 50.0, 2, 1, False, False, False) == _step(3, "scale_up")
    assert sla([60.0, 50.0], 50.0, 2, 1, True, False, False) == _step(1, "scale_down"), "50 is not over 50"
    assert sla([60.0, 49.0], 50.0, 2, 1, False, False, False) == _step(None, "no_change")


def test_sla_scale_down_and_refusals():
    assert sla([10.0], 50.0, 3, 3, True, False, False) == _step(3, "scale_down"), "held at the minimum"
    assert sla([10.0], 50.0, 3, 1, False, True, False) == _step(None, "scale_down_refused_consolidation", True)
    assert sla([10.0], 50.0, 3, 1, False, True, True) == _step(3, "scale_down_refused_consolidation", True)
    assert sla([], 50.0, 3, 1, True, False, False) == _step(None, "insufficient_data")


def _step(desired, reason, refused=False):
    return desired, reason, refused


def sla(*args):
    """`sla_step`'s Step as (desired, reason, refused)."""
    step = sla_step(*args)
    return step.desired, step.reason, step.refused


def test_classify_from_where_the_decision_ended():
    assert classify(5, 4, 5, False) == "scale_up"
    assert classify(3, 4, 3, False) == "scale_down"
    assert classify(3, 4, 2, False) == "scale_down_capped_by_throughput", "raised from 2 by the lower bound"
    assert classify(4, 4, 3, False) == "scale_down_capped_by_throughput"
    assert classify(4, 4, 4, True) == "scale_down_refused_consolidation"
    assert classify(4, 4, 4, False) == "no_change"
    assert classify(4, 4, 5, False) == "no_change", "a held scale-up is not capped"
