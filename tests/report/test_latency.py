"""Latency samples for reports: consistent with the summary, CDFs bounded and faithful."""

from __future__ import annotations

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st

import servesim
from servesim.report.latency import cdf_points, from_request_rows, quantile

CONFIG = {
    "engine": {"model": "Qwen/Qwen3-8B", "hardware": "h200_sxm", "backend": "vllm", "context_length": 8192,
               "workers": {"aggregated": {"parallelism": {"replicas": 2, "tensor": 1},
                                          "kv_cache": {"block_size": 16, "capacity": {"type": "fixed", "blocks": 400}},
                                          "timing": {"type": "fixed", "prefill_ms": 20, "decode_ms": 7}}}},
    "traffic": {"source": {"type": "synthetic", "input_tokens": 300, "output_tokens": 24},
                "load": {"type": "poisson", "requests_per_second": 40, "seed": 7}, "stop": {"requests": 300}},
}


def test_samples_agree_with_the_summary():
    report = servesim.simulate(CONFIG, timeseries=True, capture_per_request=True)
    lat = report.latency
    assert len(lat.ttft_ms) == report["completed_requests"]
    assert abs(np.mean(lat.ttft_ms) - report["mean_ttft_ms"]) < 1e-9 * report["mean_ttft_ms"]
    assert abs(np.mean(lat.e2e_ms) - report["mean_e2e_latency_ms"]) < 1e-9 * report["mean_e2e_latency_ms"]
    assert lat.ttft_ms.max() == report["max_ttft_ms"]
    assert lat.tpot_ms.max() == report["max_tpot_ms"]
    weighted_itl = (lat.itl_ms * lat.itl_weights).sum() / lat.itl_weights.sum()
    assert abs(weighted_itl - report["mean_itl_ms"]) < 1e-9 * report["mean_itl_ms"]
    assert len(lat.arrival_ms) == report["num_requests"]
    # The same samples from the written per-request records (ITL there is per request).
    rows = from_request_rows(report.per_request)
    np.testing.assert_allclose(np.sort(rows.ttft_ms), np.sort(lat.ttft_ms))
    np.testing.assert_allclose(np.sort(rows.tpot_ms), np.sort(lat.tpot_ms))
    assert rows.itl_per_request and not lat.itl_per_request


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(0, 1e6), min_size=1, max_size=3000), st.integers(20, 200))
@example([float(i) for i in range(30)], 20)  # fewer points than the upper tail's 40 (a crash before)
def test_cdf_points_are_bounded_monotone_and_on_the_data(values, max_points):
    x, y = cdf_points(np.array(values), max_points=max_points)
    assert len(x) <= max_points + 1
    assert np.all(np.diff(x) >= 0) and np.all(np.diff(y) >= 0)
    assert y[-1] == 1.0 and x[-1] == max(values) and x[0] == min(values)
    assert set(x) <= set(values)
    # No point claims more of the samples than lie at or below its value.
    data = np.sort(values)
    for xi, yi in zip(x, y, strict=True):
        assert np.mean(data <= xi) >= yi - 1e-12


def test_weighted_quantiles_count_each_value_by_its_weight():
    values, weights = np.array([1.0, 2.0, 10.0]), np.array([1, 8, 1])
    assert quantile(values, weights, 0.5) == 2.0
    assert quantile(values, weights, 0.95) == 10.0
    assert quantile(values, weights, 0.05) == 1.0
    assert np.isnan(quantile(np.empty(0), None, 0.5))
