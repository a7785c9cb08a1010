"""Candidate scoring (search/score.py's rules): the derived metrics (GPUs averaged over the run,
per-GPU throughput, attainment = SLA-meeting / all requests, cost per million tokens), which
settings gate a candidate, each miss's relative shortfall, the score's sign per target and the
Pareto front's left-to-right order with its tie-breaks."""

from __future__ import annotations

import math

import pytest

from servesim.search.score import MISSED_FLOOR, Objective, avg_gpus, metrics, pareto_front

HOUR = 3_600_000.0
SLA = {"ttft_ms": 100.0, "itl_ms": 20.0}


def test_avg_gpus_is_gpu_hours_over_the_duration():
    assert avg_gpus({"gpu_hours": 2.0, "duration_ms": HOUR / 2}) == 4.0
    assert avg_gpus({"gpu_hours": 0.0, "duration_ms": HOUR}) == 0.0
    assert avg_gpus({"gpu_hours": 1.0, "duration_ms": 0.0}) == 0.0
    assert avg_gpus({}) == 0.0


def test_derived_metrics_of_a_hand_made_summary():
    summary = {"output_throughput_tok_s": 800.0, "goodput_output_throughput_tok_s": 600.0, "gpu_hours": 4.0,
               "duration_ms": HOUR, "num_requests": 50, "completed_requests": 40, "goodput_completed_requests": 30,
               "mean_output_token_throughput_per_user": 25.0, "total_output_tokens": 2_000_000,
               "mean_ttft_ms": None}
    m = metrics(summary, gpu_hour_price=3.0)
    assert m["avg_gpus"] == 4.0
    assert m["throughput_per_gpu"] == 200.0
    assert m["goodput_per_gpu"] == 150.0
    assert m["throughput_per_user"] == 25.0
    assert m["sla_attainment"] == 0.6, "30 of all 50 requests, not of the 40 completed"
    assert m["cost_per_million_output_tokens"] == 6.0, "3 × 4 GPU-hours for 2 M tokens"
    assert "mean_ttft_ms" not in m, "a null field is left out"


def test_attainment_falls_back_to_completed_requests_and_no_gpus_gives_zero():
    m = metrics({"completed_requests": 4, "goodput_completed_requests": 3, "output_throughput_tok_s": 9.0,
                 "goodput_output_throughput_tok_s": 5.0}, None)
    assert m["sla_attainment"] == 0.75
    assert m["throughput_per_gpu"] == 0.0 and m["goodput_per_gpu"] == 0.0
    assert "cost_per_million_output_tokens" not in m
    assert metrics({"gpu_hours": 1.0, "duration_ms": HOUR}, 2.0)["cost_per_million_output_tokens"] is None


@pytest.mark.parametrize(("kwargs", "gated"), [
    ({}, False),
    ({"sla": SLA}, True),
    ({"sla": SLA, "sla_attainment": None}, False),
    ({"sla": SLA, "sla_attainment": None, "strict_sla": True}, True),
    ({"sla_attainment": 0.9, "strict_sla": True}, False),
    ({"min_goodput_rps": 1.0}, True),
    ({"min_goodput_rps": 1.0, "sla": SLA, "sla_attainment": None}, True),
])
def test_which_settings_gate_a_candidate(kwargs, gated):
    assert Objective("throughput", **kwargs).gated is gated


def test_without_an_sla_attainment_and_strict_means_are_not_checked():
    objective = Objective("throughput", sla_attainment=0.9, strict_sla=True)
    assert objective.qualifies({"sla_attainment": 0.1, "mean_ttft_ms": 1e9})


def test_a_missing_attainment_fails_closed():
    ((_, shortfall),) = Objective("throughput", sla=SLA).misses({})
    assert shortfall == math.inf


def test_each_strict_mean_misses_by_its_relative_excess():
    objective = Objective("throughput", sla={"ttft_ms": 100.0, "itl_ms": 20.0, "e2e_ms": 400.0},
                          sla_attainment=None, strict_sla=True)
    misses = objective.misses({"mean_ttft_ms": 150.0, "mean_tpot_ms": 20.0, "mean_e2e_latency_ms": 500.0,
                               "mean_itl_ms": 99.0})
    assert [round(s, 9) for _, s in misses] == [0.5, 0.25], "TTFT 150/100 − 1, E2E 500/400 − 1; TPOT at its bound"
    ((text, shortfall),) = objective.misses({"mean_ttft_ms": 1.0, "mean_tpot_ms": 30.0, "mean_e2e_latency_ms": 1.0})
    assert shortfall == pytest.approx(0.5) and "ITL" in text, "ITL is checked against the mean TPOT"
    ((_, shortfall),) = objective.misses({"mean_ttft_ms": 1.0, "mean_e2e_latency_ms": 1.0})
    assert shortfall == math.inf


def test_the_goodput_rate_misses_relatively():
    objective = Objective("min_gpus", min_goodput_rps=4.0)
    ((_, shortfall),) = objective.misses({"goodput_request_throughput_rps": 3.0})
    assert shortfall == 0.25
    ((_, shortfall),) = objective.misses({})
    assert shortfall == 1.0


def test_several_misses_are_all_reported():
    objective = Objective("throughput", sla=SLA, sla_attainment=0.5, strict_sla=True, min_goodput_rps=2.0)
    misses = objective.misses({"sla_attainment": 0.25, "mean_ttft_ms": 200.0, "mean_tpot_ms": 10.0,
                               "goodput_request_throughput_rps": 1.0})
    assert [round(s, 9) for _, s in misses] == [0.5, 1.0, 0.5]


def test_the_score_sign_per_target():
    for target, value in (("throughput", 5.0), ("goodput", 5.0), ("throughput_per_gpu", 5.0)):
        assert Objective(target).score({}, {target: value}) == 5.0
    for target in ("ttft", "e2e_latency", "min_gpus"):
        assert Objective(target).score({}, {target: 5.0}) == -5.0
    assert Objective("pareto").score({}, {"throughput_per_gpu": 3.0, "throughput_per_user": 9.0}) == 3.0


def test_values_read_the_report_fields():
    m = {"output_throughput_tok_s": 1.0, "goodput_output_throughput_tok_s": 2.0, "mean_ttft_ms": 3.0,
         "mean_e2e_latency_ms": 4.0, "avg_gpus": 5.0}
    for target, expected in (("throughput", 1.0), ("goodput", 2.0), ("ttft", 3.0), ("e2e_latency", 4.0),
                             ("min_gpus", 5.0)):
        assert Objective(target).values(m) == {target: expected}
    with pytest.raises(KeyError):
        Objective("ttft").values({"mean_ttft_ms": float("nan")})


def test_a_missed_target_is_told_below_every_qualifying_score():
    objective = Objective("throughput")
    assert objective.told(-1e11, 0.0) == -1e11
    assert objective.told(5.0, 1e-9) < objective.told(-1e11, 0.0)
    assert objective.told(5.0, 0.5) > objective.told(5.0, 0.75), "lower the more it missed"
    assert objective.told(5.0, math.inf) == MISSED_FLOOR - 1e6


def _p(tpg: float, tpu: float, gpus: int = 1, name: str = "a") -> dict:
    return {"objectives": {"throughput_per_gpu": tpg, "throughput_per_user": tpu}, "used_gpus": gpus,
            "knobs": {"name": name}}


def test_the_front_runs_left_to_right_by_throughput_per_user():
    a, b, c = _p(30.0, 1.0, name="a"), _p(20.0, 2.0, name="b"), _p(10.0, 3.0, name="c")
    dominated = _p(15.0, 1.5, name="d")
    assert pareto_front([c, dominated, a, b]) == [a, b, c]


def test_front_ties_prefer_fewer_gpus_then_the_config():
    one, two = _p(10.0, 5.0, gpus=1, name="z"), _p(10.0, 5.0, gpus=2, name="a")
    same_a, same_b = _p(10.0, 5.0, gpus=1, name="b"), _p(10.0, 5.0, gpus=1, name="c")
    assert pareto_front([two, same_b, one, same_a]) == [same_a, same_b, one, two]


def test_a_candidate_dominated_in_both_objectives_leaves_the_front():
    assert pareto_front([_p(10.0, 10.0), _p(9.0, 9.0, name="b")]) == [_p(10.0, 10.0)]
    both = [_p(10.0, 9.0), _p(9.0, 10.0, name="b")]
    assert pareto_front(both) == [both[0], both[1]]
