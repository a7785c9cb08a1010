"""`servesim recommend` boundaries (search/score.py docstring): candidates rank by score, then
(min_gpus) the higher SLA-meeting rate, then fewer GPUs, then their config; the gate is met
exactly at a bound (attainment ≥ sla_attainment, goodput ≥ min_goodput_rps, strict means ≤ the
SLA); a zero shortfall is no miss; equal candidates do not dominate each other."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from servesim.search.score import MISSED_FLOOR, Objective, pareto_front, rank_key


def _entry(score: float, gpus: int, knobs: dict, goodput: float = 0.0) -> dict:
    return {"score": score, "used_gpus": gpus, "knobs": knobs, "metrics": {"goodput_request_throughput_rps": goodput}}


def test_equal_scores_prefer_fewer_gpus_then_the_config():
    entries = [_entry(5.0, 4, {"tp": 4}), _entry(5.0, 2, {"tp": 2, "z": 1}), _entry(5.0, 2, {"tp": 2, "a": 1}),
               _entry(6.0, 8, {"tp": 8})]
    ranked = sorted(entries, key=lambda e: rank_key(e, "throughput"))
    assert [(e["score"], e["used_gpus"]) for e in ranked] == [(6.0, 8), (5.0, 2), (5.0, 2), (5.0, 4)]
    assert ranked[1]["knobs"] == {"tp": 2, "a": 1}, "then the config's JSON, sorted keys"


def test_min_gpus_ties_prefer_the_higher_sla_meeting_rate():
    a, b = _entry(-2.0, 2, {"x": 1}, goodput=3.0), _entry(-2.0, 2, {"x": 2}, goodput=4.0)
    assert sorted([a, b], key=lambda e: rank_key(e, "min_gpus")) == [b, a]
    assert sorted([b, a], key=lambda e: rank_key(e, "throughput")) == [a, b], "other targets ignore it"


@given(st.lists(st.tuples(st.integers(0, 3), st.integers(1, 8), st.integers(0, 5)), min_size=1, max_size=10))
def test_the_ranking_is_independent_of_the_input_order(items):
    entries = [_entry(float(s), g, {"k": k, "g": g, "s": s}) for s, g, k in items]
    shuffled = entries[:]
    random.Random(len(items)).shuffle(shuffled)
    key = lambda e: rank_key(e, "throughput")  # noqa: E731
    assert [rank_key(e, "throughput") for e in sorted(entries, key=key)] == \
        [rank_key(e, "throughput") for e in sorted(shuffled, key=key)]
    best = min(entries, key=key)
    assert all(best["score"] > e["score"] or (best["score"] == e["score"] and best["used_gpus"] <= e["used_gpus"])
               for e in entries)


SLA = {"ttft_ms": 100.0, "itl_ms": 20.0}


@pytest.mark.parametrize(("share", "ok"), [(0.9, True), (0.8999, False), (1.0, True)])
def test_attainment_exactly_at_the_bound_qualifies(share, ok):
    assert Objective("throughput", sla=SLA, sla_attainment=0.9).qualifies({"sla_attainment": share}) is ok


@pytest.mark.parametrize(("rate", "ok"), [(2.0, True), (1.999, False)])
def test_goodput_exactly_at_min_goodput_rps_qualifies(rate, ok):
    objective = Objective("min_gpus", min_goodput_rps=2.0, sla=SLA, sla_attainment=None)
    assert objective.qualifies({"goodput_request_throughput_rps": rate}) is ok


@pytest.mark.parametrize(("ttft", "ok"), [(100.0, True), (100.001, False)])
def test_a_mean_exactly_at_the_strict_bound_qualifies(ttft, ok):
    objective = Objective("throughput", sla=SLA, sla_attainment=None, strict_sla=True)
    assert objective.qualifies({"mean_ttft_ms": ttft, "mean_tpot_ms": 20.0}) is ok


def test_a_zero_shortfall_is_told_the_score():
    objective = Objective("throughput")
    assert objective.told(7.5, 0.0) == 7.5
    assert objective.told(7.5, 0.25) == MISSED_FLOOR - 0.25


def _pareto(tpg: float, tpu: float, gpus: int = 1, name: str = "a") -> dict:
    return {"objectives": {"throughput_per_gpu": tpg, "throughput_per_user": tpu}, "used_gpus": gpus,
            "knobs": {"name": name}}


def test_equal_candidates_both_stay_on_the_front():
    a, b, worse = _pareto(10.0, 5.0, name="a"), _pareto(10.0, 5.0, name="b"), _pareto(9.0, 5.0, name="c")
    assert pareto_front([a, worse, b]) == [a, b]


def test_a_candidate_better_in_one_objective_and_equal_in_the_other_dominates():
    a, b = _pareto(10.0, 5.0), _pareto(10.0, 6.0, name="b")
    assert pareto_front([a, b]) == [b]


def test_min_gpus_scores_fewer_gpus_higher():
    objective = Objective("min_gpus")
    assert objective.score({}, {"min_gpus": 2.0}) > objective.score({}, {"min_gpus": 4.0})


def test_the_attainment_shortfall_is_relative():
    objective = Objective("throughput", sla=SLA, sla_attainment=0.8)
    ((_, shortfall),) = objective.misses({"sla_attainment": 0.6})
    assert shortfall == pytest.approx(0.25), "1 − 0.6 / 0.8"
