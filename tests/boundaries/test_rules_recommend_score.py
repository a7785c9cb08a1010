"""Rules of recommend's ledger metrics (search/score.py): per-GPU values divide by the
time-averaged GPU count even below one GPU, and are 0 without GPUs; attainment needs both the
SLA-meeting count and a request count; cost per million output tokens needs output tokens;
percentile fields are named ``median_`` at 50 and ``p<N>_`` otherwise, p90 by default; no SLA
shows no percentile columns."""

from __future__ import annotations

import pytest

from servesim.search.score import avg_gpus, metrics, percentile_key, sla_keys

HOUR_MS = 3_600_000.0


@pytest.mark.parametrize(("hours", "gpus"), [(0.5, 0.5), (1.0, 1.0), (0.0, 0.0), (3.0, 3.0)])
def test_average_gpus_below_and_at_one(hours, gpus):
    assert avg_gpus({"gpu_hours": hours, "duration_ms": HOUR_MS}) == gpus


def test_a_sub_millisecond_run_has_gpus():
    assert avg_gpus({"gpu_hours": 2 * 0.5 / HOUR_MS, "duration_ms": 0.5}) == pytest.approx(2.0)


def test_no_duration_is_no_gpus():
    assert avg_gpus({"gpu_hours": 2.0, "duration_ms": 0.0}) == 0.0
    assert avg_gpus({"gpu_hours": 2.0}) == 0.0


def test_per_gpu_values_below_one_gpu():
    m = metrics({"gpu_hours": 0.5, "duration_ms": HOUR_MS, "output_throughput_tok_s": 100.0,
                 "goodput_output_throughput_tok_s": 40.0}, None)
    assert m["avg_gpus"] == 0.5
    assert m["throughput_per_gpu"] == 200.0 and m["goodput_per_gpu"] == 80.0


def test_per_gpu_values_without_gpus_are_zero():
    m = metrics({"output_throughput_tok_s": 100.0, "goodput_output_throughput_tok_s": 40.0}, None)
    assert m["throughput_per_gpu"] == 0.0 and m["goodput_per_gpu"] == 0.0


def test_attainment_needs_the_sla_count_and_a_request_count():
    assert "sla_attainment" not in metrics({"num_requests": 10}, None)
    assert "sla_attainment" not in metrics({"goodput_completed_requests": 3, "num_requests": 0}, None)
    assert metrics({"goodput_completed_requests": 3, "num_requests": 4}, None)["sla_attainment"] == 0.75


def test_cost_per_million_output_tokens():
    summary = {"gpu_hours": 2.0, "total_output_tokens": 1}
    assert metrics(summary, 3.0)["cost_per_million_output_tokens"] == pytest.approx(6e6)
    assert metrics({"gpu_hours": 2.0, "total_output_tokens": 0}, 3.0)["cost_per_million_output_tokens"] is None
    assert "cost_per_million_output_tokens" not in metrics(summary, None)


@pytest.mark.parametrize(("percentile", "key"), [(50, "median_ttft_ms"), (51, "p51_ttft_ms"), (90, "p90_ttft_ms"),
                                                 (99, "p99_ttft_ms")])
def test_percentile_field_names(percentile, key):
    assert percentile_key("ttft", percentile) == key


def test_sla_columns_follow_the_bounds_set():
    assert sla_keys({"ttft_ms": 100, "e2e_ms": 900}) == ["p90_ttft_ms", "p90_e2e_latency_ms"]
    assert sla_keys({"itl_ms": 5}, 50) == ["median_itl_ms"]
    assert sla_keys(None) == [] and sla_keys({}) == []
