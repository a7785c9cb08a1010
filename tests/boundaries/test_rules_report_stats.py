"""Rules of the DDSketch percentiles (report/stats.py, docs/metrics.md): a bucket's value is
within alpha (0.1 %) of every sample in it, on either sign; the store keeps MAX_BINS keys and
merges only the keys below that window into its lowest bin; the smallest indexable magnitude is
a bucket of its own, not the zero bucket; a sample counted zero times is no sample."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servesim.report import stats

_MAGNITUDE = st.floats(1e-6, 1e9)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.booleans(), _MAGNITUDE), min_size=2, max_size=40))
def test_sketch_percentiles_are_within_alpha_of_the_exact_sample(signed):
    values = [-m if negative else m for negative, m in signed]
    exact, sketch = stats.exact_stats(values), stats.sketch_stats(values)
    for name, _ in stats.PERCENTILES:
        assert abs(sketch[name] - exact[name]) <= stats.ALPHA * abs(exact[name]) * (1 + 1e-9), name


@pytest.mark.parametrize("value", [1.0, 3.7, 1234.5, 1e-3, 7e8])
def test_a_bucket_value_is_within_alpha_on_both_sides(value):
    key = int(stats.sketch_keys(np.array([value]))[0])
    assert abs(stats.sketch_value(key) / value - 1.0) <= stats.ALPHA * (1 + 1e-9)
    assert stats.sketch_value(key - 1) < value <= stats.sketch_value(key) * (1 + 2 * stats.ALPHA)


def test_the_store_keeps_max_bins_keys_and_merges_only_below_them():
    top = 40_000
    exactly = np.array([top - stats.MAX_BINS + 1, top - 5, top])
    assert stats._collapse_lowest(exactly).tolist() == exactly.tolist(), "a range of MAX_BINS keys fits"
    over = np.array([top - stats.MAX_BINS, top - stats.MAX_BINS + 1, top - 5, top])
    assert stats._collapse_lowest(over).tolist() == [top - stats.MAX_BINS + 1] * 2 + [top - 5, top]


def test_a_wide_sample_collapses_its_smallest_values_upwards():
    values = [1e-20, 1e-20, 1e-20, 1e20, 1e20]  # ~ 92,000 keys apart
    got = stats.sketch_stats(values)
    assert got["median"] > 1e-9, "the smallest samples sit in the lowest kept bin"
    assert got["p99"] == pytest.approx(1e20, rel=stats.ALPHA)
    assert got["min"] == 1e-20, "min is exact"


def test_the_smallest_indexable_magnitude_is_not_the_zero_bucket():
    tiny = stats.MIN_INDEXABLE
    got = stats.sketch_stats([tiny, tiny, 1.0])
    assert got["median"] > 0.0
    assert stats.sketch_stats([-tiny, -tiny, 1.0])["median"] < 0.0


def test_one_positive_among_negatives_is_keyed():
    got = stats.sketch_stats([-5.0, 3.0])
    assert got["p99"] == pytest.approx(3.0, rel=stats.ALPHA)
    assert stats.sketch_stats([-5.0, -4.0, 3.0])["median"] == pytest.approx(-4.0, rel=stats.ALPHA)


def test_a_sample_counted_zero_times_is_no_sample():
    got = stats.sketch_stats(np.array([1.0, 100.0, 5.0]), np.array([1, 0, 1]))
    assert got["max"] == 5.0 and got["min"] == 1.0 and got["mean"] == 3.0
    assert stats.sketch_stats(np.array([100.0]), np.array([0])) == dict.fromkeys(stats.STAT_NAMES, 0.0)


def test_non_finite_samples_are_ignored():
    got = stats.sketch_stats([1.0, float("inf"), 3.0, float("nan")])
    assert (got["min"], got["max"], got["mean"]) == (1.0, 3.0, 2.0)
