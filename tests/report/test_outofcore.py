"""Exact statistics a chunk at a time (`report/outofcore.py`) against numpy on the whole array,
and the column store they read (`report/columns.py`)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servesim.report.columns import ColumnStore
from servesim.report.outofcore import exact_stats_chunked, key_value, order_keys, select_ranks, sequential_sum
from servesim.report.stats import exact_stats

samples = st.one_of(
    st.sampled_from([0.0, 1.0, 2.5, 10.000001, 33.3, 1e6, -4.0]),  # ties
    st.floats(allow_nan=False, allow_infinity=False, width=64).filter(lambda v: v != 0.0 or str(v) == "0.0"),
    st.floats(0.0, 1e4),
)
with_nan = st.one_of(samples, st.just(float("nan")), st.sampled_from([float("inf"), float("-inf")]))
sizes = st.sampled_from([0, 1, 2, 7, 8, 9, 127, 128, 129, 130, 255, 256, 257, 300])


@st.composite
def chunked(draw: st.DrawFn, values: st.SearchStrategy[float] = samples) -> tuple[np.ndarray, list[int]]:
    """An array (its size near the 8/128-element boundaries or anything up to 300) and cut points
    splitting it into chunks (empty chunks included)."""
    n = draw(st.one_of(sizes, st.integers(0, 300)))
    x = np.array(draw(st.lists(values, min_size=n, max_size=n)), dtype=np.float64)
    cuts = sorted(draw(st.lists(st.integers(0, n), max_size=12)))
    return x, cuts


def source(x: np.ndarray, cuts: list[int]):
    edges = [0, *cuts, len(x)]
    return lambda: (x[a:b] for a, b in zip(edges, edges[1:], strict=False))


@settings(max_examples=150, deadline=None)
@given(chunked(with_nan))
def test_chunked_exact_stats_are_exact_stats_bit_for_bit(case: tuple[np.ndarray, list[int]]) -> None:
    x, cuts = case
    assert json.dumps(exact_stats_chunked(source(x, cuts))) == json.dumps(exact_stats(x))


@settings(max_examples=150, deadline=None)
@given(chunked(with_nan))
def test_carried_sum_is_the_whole_cumulative_sum(case: tuple[np.ndarray, list[int]]) -> None:
    x, cuts = case
    total = sequential_sum(source(x, cuts)())
    if not len(x):
        assert total is None
        return
    assert total is not None
    expected = np.cumsum(x)[-1]
    assert np.float64(total).tobytes() == expected.tobytes() or (math.isnan(total) and math.isnan(expected))


@settings(max_examples=150, deadline=None)
@given(chunked(with_nan))
def test_radix_selection_is_partition(case: tuple[np.ndarray, list[int]]) -> None:
    x, cuts = case
    if not len(x):
        return
    ranks = sorted({*range(0, len(x), max(1, len(x) // 6)), len(x) - 1})
    picked = select_ranks(source(x, cuts), ranks)
    ordered = np.sort(x)
    for rank in ranks:
        expected = ordered[rank]
        assert picked[rank] == expected or (np.isnan(picked[rank]) and np.isnan(expected)), rank


@given(st.lists(with_nan, min_size=1, max_size=50))
def test_order_keys_sort_as_numpy_and_round_trip(values: list[float]) -> None:
    x = np.array(values, dtype=np.float64)
    keys = order_keys(x)
    by_key = x[np.argsort(keys, kind="stable")]
    assert np.array_equal(by_key, np.sort(x), equal_nan=True)
    for value, key in zip(x.tolist(), keys.tolist(), strict=True):
        back = key_value(key)
        assert back == value or (np.isnan(back) and np.isnan(value))


ROWS = np.dtype([("t", np.float64), ("n", np.int64)])


@pytest.mark.parametrize("spool_rows", [0, 5, 1000])
@pytest.mark.parametrize("read_rows", [1, 3, 64])
def test_column_store_gives_back_its_rows_in_order(spool_rows: int, read_rows: int) -> None:
    rng = np.random.default_rng(3)
    store = ColumnStore(ROWS, spool_rows, read_rows=read_rows)
    parts = [{"t": rng.random(size), "n": rng.integers(0, 100, size)} for size in (4, 0, 9, 1, 30)]
    for part in parts:
        store.append(part)
    assert store.rows == 44 and store.on_disk == (spool_rows < 44)
    whole = store.whole()
    for name in ("t", "n"):
        expected = np.concatenate([part[name] for part in parts])
        assert whole[name].tobytes() == expected.tobytes()
        assert np.concatenate([chunk[name] for chunk in store.chunks()]).tobytes() == expected.tobytes()
        assert whole[name].flags.c_contiguous
    store.close()
    assert store.rows == 0 and not store.on_disk
