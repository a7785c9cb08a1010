"""Pooling equal token gaps: `_merge_equal` gives `np.unique`'s distinct values and the summed
weight of each, exactly."""

from __future__ import annotations

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
