"""What the planner observes (scaling/planner/observed.py): moving averages that skip leading
zeros (later zeros count), request shapes from forward-pass metrics (no prefill work: 0 ms),
traffic windows merged weighted by completions, FPM coverage (every ready worker, each DP rank),
grouping by worker in order, the latest FPM kept only while its worker is active, and the hit
rate and prompt length of the latest window that has them."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from servesim.scaling.contract import TrafficWindow
from servesim.scaling.planner.observed import (
    MergedTraffic,
    MovingAverage,
    Observations,
    PoolStats,
    fpm_coverage_ok,
    per_worker,
    top,
)


def test_a_moving_average_skips_leading_zeros_only():
    avg = MovingAverage(3)
    assert avg.value == 0.0
    for v in (0.0, 0.0, 4.0, 0.0):
        avg.add(v)
    assert avg.value == pytest.approx(2.0), "(4 + 0) / 2: the later zero counts"
    for v in (6.0, 9.0):
        avg.add(v)
    assert avg.value == pytest.approx(5.0), "window of 3: (0 + 6 + 9) / 3"
    assert MovingAverage(0)._values.maxlen == 1


def _fpm(prefill_requests=0, prefill_tokens=0, decode_requests=0, decode_kv=0):
    return SimpleNamespace(num_prefill_requests=prefill_requests, sum_prefill_tokens=prefill_tokens,
                           num_decode_requests=decode_requests, sum_decode_kv_tokens=decode_kv)


class Timing:
    def __init__(self) -> None:
        self.calls: list = []

    def prefill(self, batch, tokens, cached):
        self.calls.append((batch, tokens, cached))
        return 10.0 * batch + tokens


def test_pool_stats_average_the_request_shapes():
    stats, timing = PoolStats(8), Timing()
    stats.observe(_fpm(2, 300, 4, 1000), timing)
    assert (stats.isl.value, stats.decode_len.value) == (150.0, 250.0)
    assert timing.calls == [(2, 150, 0)] and stats.prefill_ms.value == 170.0
    stats.observe(_fpm(0, 0, 0, 0), timing)
    assert (stats.isl.value, stats.decode_len.value) == (150.0, 250.0), "no requests: nothing to average"
    assert stats.prefill_ms.value == pytest.approx(85.0), "a pass without prompt work takes 0 ms"
    stats.observe(_fpm(3, 2, 0, 0), timing)
    assert stats.prefill_ms.value == pytest.approx(170.0 / 3), "fewer tokens than requests: 0 ms"
    stats.observe(_fpm(1, 1, 1, 7), timing)
    assert timing.calls[-1] == (1, 1, 0)


def _window(duration=1.0, num_req=0, completed=0, isl=0.0, osl=0.0, hit=0.0, hit_samples=0):
    return TrafficWindow(duration_s=duration, num_req=num_req, avg_isl=isl, avg_osl=osl, avg_kv_hit_rate=hit,
                         num_completed=completed, num_kv_hit_samples=hit_samples)


def test_merged_traffic_weights_shapes_by_completions():
    merged = MergedTraffic()
    assert (merged.isl, merged.osl) == (0.0, 0.0)
    merged.add(_window(2.0, 5, 1, 100.0, 10.0))
    merged.add(_window(3.0, 7, 3, 200.0, 30.0))
    merged.add(_window(1.0, 2, 0, 999.0, 999.0))
    assert (merged.duration_s, merged.num_req, merged.completed) == (6.0, 14, 4)
    assert (merged.isl, merged.osl) == (175.0, 25.0)


def test_coverage_needs_every_ready_worker_with_every_rank():
    fpms = {(0, 0): 1, (0, 1): 1, (3, 0): 1, (3, 1): 1}
    assert fpm_coverage_ok(fpms, 2, 2)
    assert not fpm_coverage_ok(fpms, 3, 2) and not fpm_coverage_ok(fpms, 1, 2)
    assert not fpm_coverage_ok({(0, 0): 1, (0, 1): 1, (3, 0): 1}, 2, 2)
    assert not fpm_coverage_ok(fpms, 2, 1)
    assert fpm_coverage_ok({}, 0) and fpm_coverage_ok({(5, 0): 1}, 1)


def test_fpms_group_by_worker_in_order_and_top_takes_the_largest():
    fpms = {(2, 1): "c", (0, 0): "a", (2, 0): "b", (1, 0): "d"}
    assert per_worker(fpms) == [["a"], ["d"], ["b", "c"]]
    assert top([3, 9, 4], lambda v: v) == 9 and top([-3], lambda v: v) == -3


def _snapshot(pools, traffic):
    return SimpleNamespace(pools=pools, traffic=traffic)


def _pool(active, ranks):
    return SimpleNamespace(active=active, ranks=[SimpleNamespace(worker_id=w, dp_rank=r, metrics=m) for w, r, m in ranks],
                           timing=Timing())


def test_observations_keep_the_latest_fpm_of_active_workers():
    seen = Observations(8)
    a, b, c = _fpm(1, 10), _fpm(1, 20), _fpm(1, 30)
    seen.observe(_snapshot({"decode": _pool([0, 1], [(0, 0, a), (1, 0, b)])}, _window()))
    seen.observe(_snapshot({"decode": _pool([0], [(0, 0, None), (1, 0, c)])}, _window()))
    assert seen.fpm["decode"] == {(0, 0): a}, "a missing FPM keeps the last one; an inactive worker's is dropped"
    assert seen.stats["decode"].isl.value == 20.0, "every fresh FPM is folded in, the dropped worker's too"


def test_the_hit_rate_and_prompt_length_come_from_the_latest_window_that_has_them():
    seen = Observations(8)
    assert seen.hit_rate is None and seen.request_isl("decode") == 0.0
    seen.observe(_snapshot({}, _window(num_req=0, hit=0.7, hit_samples=0)))
    assert seen.hit_rate is None, "no requests and no samples: no rate"
    seen.observe(_snapshot({}, _window(num_req=1, hit=0.25)))
    assert seen.hit_rate == 0.25
    seen.observe(_snapshot({}, _window(num_req=0, hit=0.5, hit_samples=2)))
    assert seen.hit_rate == 0.5
    seen.observe(_snapshot({}, _window(completed=1, isl=300.0)))
    assert seen.request_isl("decode") == 300.0
    seen.observe(_snapshot({}, _window(completed=0, isl=900.0)))
    seen.observe(_snapshot({}, _window(completed=2, isl=0.0)))
    assert seen.request_isl("decode") == 300.0


def test_without_traffic_the_prompt_length_is_the_fpms():
    seen = Observations(8)
    seen.observe(_snapshot({"prefill": _pool([0], [(0, 0, _fpm(2, 500))])}, _window()))
    assert seen.request_isl("prefill") == 250.0 and seen.request_isl("decode") == 0.0


def test_taking_the_traffic_starts_a_new_merge():
    seen = Observations(8)
    seen.observe(_snapshot({}, _window(2.0, 3, 1, 10.0)))
    first = seen.take_traffic()
    assert (first.duration_s, first.num_req) == (2.0, 3)
    assert seen.take_traffic().duration_s == 0.0
