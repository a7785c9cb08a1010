"""The polynomial model's bulk decode series matches its one-pass formula bit for bit."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from servesim.perf.timing import PolynomialTiming, quantize_ms


def one_pass(active: int, total: int) -> float:
    """The reference's decode formula, evaluated the plain way (square first, left to right)."""
    u = 1.0 if total == 0 else min(1.0, active / total)
    return quantize_ms(max(1.0, (-25.74 * (u * u) + 54.01 * u) + 5.74))


@settings(max_examples=300, deadline=None)
@given(start=st.integers(0, 3_000_000), step=st.integers(1, 512), count=st.integers(1, 200),
       total=st.sampled_from([0, 1, 64, 4096, 782_464, 2_000_000, 10**9]))
def test_decode_series_is_decode_at_each_point(start: int, step: int, count: int, total: int) -> None:
    timing = PolynomialTiming()
    active = range(start, start + count * step, step)
    expected = [one_pass(a, total) for a in active]
    assert list(timing.decode_series(step, active, total)) == expected
    assert [timing.decode(step, a, a // step, total) for a in active] == expected
    # A second, overlapping series mixes memoised and fresh points.
    shifted = range(start + step // 2, start + step // 2 + 2 * count * step, step)
    assert list(timing.decode_series(step, shifted, total)) == [one_pass(a, total) for a in shifted]
    # One pass at a time, from the series' table where filled in, else computed (below `start`
    # the table's chunks are not filled in).
    points = [*shifted, *range(0, start, max(1, start // 50))]
    assert [timing.decode(step, a, a // step, total) for a in points] == [one_pass(a, total) for a in points]


def test_decode_series_on_a_dense_range() -> None:
    """Every active-token count of a pool, including the flat part beyond it."""
    total = 782_464
    active = range(0, total + 5000, 7)
    assert list(PolynomialTiming().decode_series(1, active, total)) == [one_pass(a, total) for a in active]
