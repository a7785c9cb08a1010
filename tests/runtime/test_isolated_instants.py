"""The per-worker replay's distinct sorted instants equal `np.unique`'s (which it avoids for
start-up time)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from servesim.runtime.isolated import _sorted_distinct


@settings(deadline=None)  # the first `np.unique` imports numpy.ma: slow on a loaded machine
@given(st.lists(st.floats(min_value=0.0, max_value=1e9, allow_nan=False), max_size=60),
       st.integers(min_value=0, max_value=3))
def test_sorted_distinct_equals_np_unique(values: list[float], repeats: int) -> None:
    array = np.array(values * (repeats + 1), dtype=float)
    got = _sorted_distinct(array)
    assert got.dtype == np.float64
    assert got.tobytes() == np.unique(array).tobytes()
