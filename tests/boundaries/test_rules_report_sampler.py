"""Rules of the engine-state time series (collect/sampler.py): a value observed at t holds
until the worker's next observation; each bucket reports its time-weighted mean (NaN where the
worker was not observed), KV use as a fraction of the pool; prefix counters add per bucket;
an observation at the end of the range doubles the width and merges neighbours, an end exactly
at it fits; the output runs through the bucket of the end, at most max_points buckets."""

from __future__ import annotations

import numpy as np
import pytest

from servesim.collect.sampler import TimeSeriesSampler


@pytest.mark.parametrize("points", [0, 1, 3, 7])
def test_max_points_must_be_even_and_at_least_two(points):
    with pytest.raises(ValueError, match="even number >= 2"):
        TimeSeriesSampler(max_points=points)


def test_two_points_are_enough():
    sampler = TimeSeriesSampler(max_points=2, initial_width_ms=10.0)
    sampler.observe(0.0, "agg", 0, waiting=1, running=0, kv_used=0, kv_total=10)
    assert len(sampler.finish(15.0).start_ms) == 2


def test_each_bucket_is_the_time_weighted_mean_of_the_held_values():
    sampler = TimeSeriesSampler(max_points=8, initial_width_ms=10.0)
    sampler.observe(0.0, "agg", 0, waiting=2, running=1, kv_used=4, kv_total=8)
    sampler.observe(5.0, "agg", 0, waiting=4, running=3, kv_used=8, kv_total=8)
    sampler.observe(25.0, "agg", 0, waiting=0, running=0, kv_used=0, kv_total=8)
    out = sampler.finish(30.0)
    (series,) = out.workers
    assert out.width_ms == 10.0 and out.start_ms.tolist() == [0.0, 10.0, 20.0, 30.0]
    assert series.waiting[:3].tolist() == [3.0, 4.0, 2.0]
    assert series.running[:3].tolist() == [2.0, 3.0, 1.5]
    assert series.kv_usage[:3].tolist() == [0.75, 1.0, 0.5]
    assert np.isnan(series.waiting[3]), "the end's bucket holds no time"


def test_a_worker_starts_at_its_first_observation():
    sampler = TimeSeriesSampler(max_points=8, initial_width_ms=10.0)
    sampler.observe(0.0, "agg", 0, waiting=1, running=0, kv_used=0, kv_total=1)
    sampler.observe(25.0, "agg", 1, waiting=5, running=0, kv_used=0, kv_total=1)
    out = sampler.finish(40.0)
    late = out.of_pool("agg")[1]
    assert np.isnan(late.waiting[:2]).all() and late.waiting[2] == 5.0 and late.waiting[3] == 5.0


def test_prefix_counters_add_per_bucket_only_with_lookups():
    sampler = TimeSeriesSampler(max_points=8, initial_width_ms=10.0)
    sampler.observe(1.0, "agg", 0, 0, 1, 0, 1, hits=30, lookups=100)
    sampler.observe(2.0, "agg", 0, 0, 1, 0, 1, hits=10, lookups=50)
    sampler.observe(12.0, "agg", 0, 0, 1, 0, 1, hits=7, lookups=0)
    (series,) = sampler.finish(20.0).workers
    assert series.prefix_hits[:2].tolist() == [40.0, 0.0] and series.prompt_tokens[:2].tolist() == [150.0, 0.0]
    rate = series.hit_rate
    assert rate[0] == pytest.approx(40 / 150) and np.isnan(rate[1])


def test_an_observation_at_the_range_end_doubles_the_width():
    sampler = TimeSeriesSampler(max_points=4, initial_width_ms=10.0)
    sampler.observe(0.0, "agg", 0, waiting=1, running=0, kv_used=0, kv_total=1)
    sampler.observe(39.0, "agg", 0, waiting=3, running=0, kv_used=0, kv_total=1)
    assert sampler.width_ms == 10.0
    sampler.observe(40.0, "agg", 0, waiting=5, running=0, kv_used=0, kv_total=1)
    assert sampler.width_ms == 20.0
    out = sampler.finish(60.0)
    assert out.start_ms.tolist() == [0.0, 20.0, 40.0, 60.0]
    assert out.workers[0].waiting[:3].tolist() == [1.0, 1.1, 5.0], "(19·1 + 1·3) / 20 in the merged bucket"


def test_an_end_exactly_at_the_range_fits_and_one_beyond_coarsens():
    def finish(end):
        sampler = TimeSeriesSampler(max_points=4, initial_width_ms=10.0)
        sampler.observe(0.0, "agg", 0, waiting=1, running=0, kv_used=0, kv_total=1)
        return sampler.finish(end)
    at = finish(40.0)
    assert at.width_ms == 10.0 and len(at.start_ms) == 4 and at.workers[0].waiting.tolist() == [1.0] * 4
    beyond = finish(40.5)
    assert beyond.width_ms == 20.0 and beyond.start_ms.tolist() == [0.0, 20.0, 40.0]


def test_a_removed_worker_stops_at_its_stop_time():
    sampler = TimeSeriesSampler(max_points=8, initial_width_ms=10.0)
    sampler.observe(0.0, "agg", 0, waiting=2, running=0, kv_used=0, kv_total=1)
    sampler.observe(0.0, "agg", 1, waiting=2, running=0, kv_used=0, kv_total=1)
    out = sampler.finish(30.0, stops={("agg", 1): 15.0, ("agg", 0): 99.0})
    kept, removed = out.workers
    assert kept.waiting[:3].tolist() == [2.0, 2.0, 2.0]
    assert removed.waiting[:2].tolist() == [2.0, 2.0] and np.isnan(removed.waiting[2])


def test_one_prompt_token_has_a_hit_rate():
    sampler = TimeSeriesSampler(max_points=4, initial_width_ms=10.0)
    sampler.observe(1.0, "agg", 0, 0, 1, 0, 1, hits=1, lookups=1)
    (series,) = sampler.finish(5.0).workers
    assert series.hit_rate.tolist() == [1.0]


def test_the_default_grid():
    sampler = TimeSeriesSampler()
    assert (sampler.max_points, sampler.width_ms) == (400, 10.0)
    sampler.observe(0.0, "agg", 0, 0, 0, 0, 1)
    assert len(sampler.finish(3990.0).start_ms) == 400 and sampler.width_ms == 10.0


def test_observations_without_lookups_count_no_prompt_tokens():
    sampler = TimeSeriesSampler(max_points=4, initial_width_ms=10.0)
    sampler.observe(1.0, "agg", 0, 0, 1, 0, 1)
    sampler.observe(2.0, "agg", 0, 0, 1, 0, 1)
    (series,) = sampler.finish(5.0).workers
    assert series.prompt_tokens.tolist() == [0.0] and series.prefix_hits.tolist() == [0.0]


def test_a_worker_first_seen_inside_a_bucket_covers_only_its_observed_time():
    sampler = TimeSeriesSampler(max_points=4, initial_width_ms=10.0)
    sampler.observe(2.0, "agg", 0, waiting=1, running=0, kv_used=0, kv_total=1)
    sampler.observe(6.0, "agg", 0, waiting=3, running=0, kv_used=0, kv_total=1)
    sampler.observe(8.0, "agg", 0, waiting=9, running=0, kv_used=0, kv_total=1)
    (series,) = sampler.finish(10.0).workers
    assert series.waiting[0] == pytest.approx((1 * 4 + 3 * 2 + 9 * 2) / 8)


def test_the_range_doubles_with_the_width():
    sampler = TimeSeriesSampler(max_points=4, initial_width_ms=10.0)
    sampler.observe(0.0, "agg", 0, waiting=1, running=0, kv_used=1, kv_total=1)
    sampler.observe(40.0, "agg", 0, waiting=1, running=0, kv_used=1, kv_total=1)
    assert sampler.width_ms == 20.0
    sampler.observe(85.0, "agg", 0, waiting=1, running=0, kv_used=1, kv_total=1)
    assert sampler.width_ms == 40.0
    (series,) = sampler.finish(100.0).workers
    assert series.kv_usage[:3].tolist() == [1.0, 1.0, 1.0], "one block of one: the whole pool"


def test_a_bucket_observed_for_under_a_millisecond_has_a_value():
    sampler = TimeSeriesSampler(max_points=4, initial_width_ms=10.0)
    sampler.observe(9.5, "agg", 0, waiting=2, running=0, kv_used=0, kv_total=0)
    (series,) = sampler.finish(15.0).workers
    assert series.waiting.tolist() == [2.0, 2.0] and series.kv_usage.tolist() == [0.0, 0.0]
