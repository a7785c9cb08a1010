"""Pooling equal token gaps: `_merge_equal` gives `np.unique`'s distinct values and the summed
weight of each, exactly."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from servesim.report.tally import _merge_equal

gaps = st.lists(st.tuples(st.sampled_from([0.0, 1.0, 2.5, 10.000001, 33.3, 1e6]) | st.floats(0.0, 1e4),
                          st.integers(1, 1 << 40)), max_size=80)


@given(gaps)
def test_merge_equal_is_unique_with_summed_weights(pairs: list[tuple[float, int]]) -> None:
    values = np.array([v for v, _ in pairs], dtype=np.float64)
    weights = np.array([w for _, w in pairs], dtype=np.int64)
    distinct, counts = _merge_equal(values, weights)
    assert distinct.dtype == np.float64 and counts.dtype == np.int64
    assert distinct.tobytes() == np.unique(values).tobytes()
    assert counts.tolist() == [sum(w for v, w in pairs if v == d) for d in distinct.tolist()]


def plain_merge(values: list[float], weights: list[int]) -> tuple[list[float], list[int]]:
    """Sort stably (NaNs last), then pool neighbours that compare equal: the first one stands for them."""
    order = sorted(range(len(values)), key=lambda i: (math.isnan(values[i]), 0.0 if math.isnan(values[i]) else values[i]))
    distinct: list[float] = []
    counts: list[int] = []
    for i in order:
        if distinct and distinct[-1] == values[i]:
            counts[-1] += weights[i]
        else:
            distinct.append(values[i])
            counts.append(weights[i])
    return distinct, counts


@given(st.lists(st.tuples(st.sampled_from([0.0, -0.0, math.nan, 1.0, -1.0, 2.5]) | st.floats(-10, 10),
                          st.integers(1, 1 << 40)), max_size=60))
def test_merge_equal_keeps_the_first_of_zeros_and_every_nan(pairs: list[tuple[float, int]]) -> None:
    values = np.array([v for v, _ in pairs], dtype=np.float64)
    weights = np.array([w for _, w in pairs], dtype=np.int64)
    distinct, counts = _merge_equal(values, weights)
    expected, expected_counts = plain_merge([v for v, _ in pairs], [w for _, w in pairs])
    assert distinct.tobytes() == np.array(expected, dtype=np.float64).tobytes()
    assert counts.tolist() == expected_counts
