"""The time-series sampler: exact time-weighted bucket means, bounded size, order per worker only."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servesim.collect.sampler import TimeSeriesSampler

observation = st.tuples(st.floats(0.0, 50.0), st.integers(0, 30), st.integers(0, 30), st.integers(0, 100),
                        st.integers(0, 500), st.integers(0, 1000))
"""(time step ms, waiting, running, kv blocks used, hit tokens, extra looked-up tokens)."""


def _observe_all(sampler: TimeSeriesSampler, key: tuple[str, int], rows: list[tuple]) -> list[tuple]:
    """Feed one worker's observations; returns them with absolute times."""
    t, out = 0.0, []
    for step, waiting, running, used, hits, extra in rows:
        t += step
        sampler.observe(t, key[0], key[1], waiting, running, used, 100, hits, hits + extra)
        out.append((t, waiting, running, used, hits, hits + extra))
    return out


def _expected_means(obs: list[tuple], field: int, edges: np.ndarray, end: float) -> np.ndarray:
    """The time-weighted mean of a step function (value held from each observation to the next)
    over each bucket, computed directly."""
    integral = np.zeros(len(edges) - 1)
    covered = np.zeros(len(edges) - 1)
    for (t0, *values), (t1, *_) in zip(obs, [*obs[1:], (end,)], strict=True):
        for b in range(len(edges) - 1):
            overlap = max(0.0, min(t1, edges[b + 1], end) - max(t0, edges[b]))
            integral[b] += values[field - 1] * overlap
            covered[b] += overlap
    with np.errstate(invalid="ignore"):
        return np.where(covered > 0, integral / np.where(covered > 0, covered, 1), np.nan)


@settings(max_examples=150, deadline=None)
@given(st.lists(observation, min_size=1, max_size=60), st.sampled_from([2, 4, 8, 16]), st.floats(0.0, 40.0))
def test_bucket_means_are_exact_time_weighted_means(rows, max_points, tail):
    sampler = TimeSeriesSampler(max_points=max_points, initial_width_ms=1.0)
    obs = _observe_all(sampler, ("agg", 0), rows)
    end = obs[-1][0] + tail
    series = sampler.finish(end)
    assert len(series.start_ms) <= max_points
    edges = np.append(series.start_ms, series.start_ms[-1] + series.width_ms)
    assert edges[-1] >= end or end == 0
    worker = series.workers[0]
    for field, values in ((1, worker.waiting), (2, worker.running), (3, worker.kv_usage * 100)):
        np.testing.assert_allclose(values, _expected_means(obs, field, edges, end), rtol=1e-9, atol=1e-9)
    assert worker.prefix_hits.sum() == sum(o[4] for o in obs)
    assert worker.prompt_tokens.sum() == sum(o[5] for o in obs)
    hit_buckets = np.searchsorted(edges, [o[0] for o in obs], side="right") - 1
    np.testing.assert_array_equal(worker.prompt_tokens, np.bincount(
        np.minimum(hit_buckets, len(edges) - 2), weights=[o[5] for o in obs], minlength=len(edges) - 1))


@settings(max_examples=50, deadline=None)
@given(st.lists(observation, min_size=1, max_size=30), st.lists(observation, min_size=1, max_size=30))
def test_workers_may_be_observed_one_after_another(first, second):
    """Interleaved (shared clock) and one-worker-at-a-time (isolated replay) give the same series."""
    one_by_one = TimeSeriesSampler(max_points=8, initial_width_ms=1.0)
    a = _observe_all(one_by_one, ("agg", 0), first)
    b = _observe_all(one_by_one, ("agg", 1), second)
    interleaved = TimeSeriesSampler(max_points=8, initial_width_ms=1.0)
    events = sorted([(o[0], 0, o) for o in a] + [(o[0], 1, o) for o in b], key=lambda e: e[0])
    for t, worker, o in events:
        interleaved.observe(t, "agg", worker, o[1], o[2], o[3], 100, o[4], o[5])
    end = max(a[-1][0], b[-1][0]) + 1.0
    x, y = one_by_one.finish(end), interleaved.finish(end)
    assert x.width_ms == y.width_ms
    for s, t in zip(x.workers, y.workers, strict=True):
        np.testing.assert_allclose(s.waiting, t.waiting, rtol=1e-12, equal_nan=True)
        np.testing.assert_array_equal(s.prompt_tokens, t.prompt_tokens)


def test_a_removed_worker_stops_at_its_removal():
    sampler = TimeSeriesSampler(max_points=10, initial_width_ms=10.0)
    sampler.observe(5.0, "decode", 3, 2, 4, 50, 100)
    series = sampler.finish(100.0, stops={("decode", 3): 30.0})
    waiting = series.workers[0].waiting
    assert waiting[0] == pytest.approx(2.0) and waiting[2] == pytest.approx(2.0)
    assert np.isnan(waiting[3:]).all()


def test_a_long_run_keeps_at_most_max_points():
    sampler = TimeSeriesSampler(max_points=400)
    for i in range(20000):
        sampler.observe(i * 97.0, "agg", i % 3, 1, 2, 3, 10)
    series = sampler.finish(20000 * 97.0)
    assert len(series.start_ms) <= 400
    assert series.start_ms[-1] + series.width_ms >= 20000 * 97.0
    assert np.nanmax(series.workers[0].running) == 2.0


def test_max_points_must_be_even():
    with pytest.raises(ValueError, match="max_points"):
        TimeSeriesSampler(max_points=5)
