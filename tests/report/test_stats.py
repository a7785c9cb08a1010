"""Tests for servesim.report.stats (runtime.md §8.4: exact and streaming percentiles).

Expected values come from reference reports (AISimulate 0.1.0.dev2), copied into
tests/data/report/stats-cases.json: for each case, the exact-distribution samples recomputed from
its per-request records (ttft, ttst, tpot, e2e), or the multiset of every inter-token gap where the
records determine it (fixed timing: all gaps are decode_ms or decode_ms + prefill_ms), together
with the statistics the reference reported. The tests do not need the reference pack.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servesim.report.stats import (
    ALPHA,
    INV_LN_GAMMA,
    LN_GAMMA,
    PERCENTILES,
    STAT_NAMES,
    exact_stats,
    percentile_rank,
    round_half_away,
    sketch_keys,
    sketch_stats,
    sketch_value,
)

DATA = Path(__file__).parent.parent / "data" / "report"
CASES = json.loads((DATA / "stats-cases.json").read_text())
EXACT_CASES = [(name, metric) for name, case in CASES.items() for metric in case.get("exact", {})]
GAP_CASES = [name for name, case in CASES.items() if "gaps" in case]
PERCENTILE_NAMES = [name for name, _ in PERCENTILES]

# Case replay/01: every gap is 2.0 ms, so every per-user sample is 500.0 tokens/s.
CASE01_MEDIAN_ITL = 1.9997051226201907
CASE01_P99_PER_USER = 500.1967753331094


def close(a: float, b: float, rtol: float = 1e-12) -> bool:
    """Equal up to a relative tolerance (the reference's mean/std depend on summation order)."""
    return a == b or abs(a - b) <= rtol * max(abs(a), abs(b))


def gap_samples(name: str) -> np.ndarray:
    """The case's pooled inter-token gaps (order is irrelevant for percentiles)."""
    counts = CASES[name]["gaps"]["counts"]
    return np.repeat([v for v, _ in counts], [n for _, n in counts]).astype(np.float64)


# --- rounding and the exact percentile index -------------------------------------------------


@pytest.mark.parametrize(
    ("x", "expected"),
    [(0.0, 0), (0.5, 1), (1.5, 2), (2.5, 3), (-2.5, -3), (2.4999999999999996, 2),
     (0.49999999999999994, 0)],  # fmt: skip
)
def test_round_half_away_from_zero(x: float, expected: int) -> None:
    assert round_half_away(x) == expected


@pytest.mark.parametrize(
    ("n", "p", "expected"),
    [(2, 50.0, 1), (6, 50.0, 3), (4, 50.0, 2), (3, 75.0, 2), (5, 99.0, 4), (101, 99.0, 99),
     (1, 99.0, 0)],  # fmt: skip
)
def test_percentile_rank_rounds_half_away(n: int, p: float, expected: int) -> None:
    assert percentile_rank(n, p) == expected


def test_exact_percentiles_select_samples_without_interpolation() -> None:
    stats = exact_stats([60.0, 10.0, 50.0, 20.0, 40.0, 30.0])
    # (N-1)*p/100 = 2.5 -> index 3 (half away from zero; banker's rounding would give 2).
    assert stats["median"] == 40.0
    assert stats["p75"] == 50.0  # 3.75 -> 4
    assert stats["p90"] == stats["p95"] == stats["p99"] == 60.0
    assert (stats["min"], stats["max"], stats["mean"]) == (10.0, 60.0, 35.0)
    assert close(stats["std"], math.sqrt(17.5 * 100 / 6))


def test_exact_stats_empty_is_all_zero() -> None:
    assert exact_stats([]) == dict.fromkeys(STAT_NAMES, 0.0)
    assert list(exact_stats([])) == list(STAT_NAMES)


def test_exact_stats_single_sample() -> None:
    stats = exact_stats(np.array([12.5]))
    assert stats == {**dict.fromkeys(STAT_NAMES, 12.5), "std": 0.0}


@pytest.mark.parametrize(("name", "metric"), EXACT_CASES)
def test_exact_stats_match_reference(name: str, metric: str) -> None:
    case = CASES[name]["exact"][metric]
    stats = exact_stats(case["samples"])
    expected = case["expected"]
    for stat in ("min", "max", *PERCENTILE_NAMES):
        assert stats[stat] == expected[stat], stat
    assert close(stats["mean"], expected["mean"])
    assert close(stats["std"], expected["std"])


# --- the streaming (DDSketch) percentiles ---------------------------------------------------


def test_sketch_stats_empty_is_all_zero() -> None:
    assert sketch_stats(np.array([])) == dict.fromkeys(STAT_NAMES, 0.0)


def test_sketch_single_sample_is_exact() -> None:
    assert sketch_stats([2.0]) == {**dict.fromkeys(STAT_NAMES, 2.0), "std": 0.0}


def test_case01_constant_samples() -> None:
    itl = sketch_stats(np.full(35, 2.0))
    per_user = sketch_stats([1000.0 / 2.0] * 35)
    exact = {"mean": 2.0, "min": 2.0, "max": 2.0, "std": 0.0}
    assert itl == {**exact, **dict.fromkeys(PERCENTILE_NAMES, CASE01_MEDIAN_ITL)}
    assert per_user["p99"] == CASE01_P99_PER_USER
    assert per_user["p99"] > per_user["max"] == 500.0  # a sketch percentile can exceed the max
    assert per_user["std"] == 0.0 and per_user["mean"] == 500.0


@pytest.mark.parametrize("name", GAP_CASES)
def test_sketch_stats_match_reference(name: str) -> None:
    gaps = gap_samples(name)
    expected = CASES[name]["gaps"]["expected"]
    per_user = 1000.0 / gaps[gaps > 0]
    for suffix, samples in (("itl_ms", gaps), ("output_token_throughput_per_user", per_user)):
        stats = sketch_stats(samples)
        for stat in ("min", "max", *PERCENTILE_NAMES):
            assert stats[stat] == expected[f"{stat}_{suffix}"], (suffix, stat)
        assert close(stats["mean"], expected[f"mean_{suffix}"]), suffix
        assert close(stats["std"], expected[f"std_{suffix}"]), suffix


def test_zero_gaps_fall_in_the_zero_bucket() -> None:
    # spec_decode_rates_1_0: 5 zero gaps (tokens of one speculative burst) and 4 gaps of 5 ms.
    stats = sketch_stats([0.0] * 5 + [5.0] * 4)
    assert stats["median"] == 0.0
    assert stats["p75"] == stats["p99"] == 4.997811098765266
    assert stats["min"] == 0.0


def test_non_finite_samples_are_ignored() -> None:
    assert sketch_stats([2.0, math.nan, 2.0, math.inf]) == sketch_stats([2.0, 2.0])


@pytest.mark.parametrize(
    ("value", "key", "representative"),
    [
        (2.0, 347, 1.9997051226201907),
        (5.0, 805, 4.997811098765266),
        (10.0, 1152, 10.004152608697646),
        (12.001, 1243, 12.001124195202625),
        (83.33333333333333, 2212, 83.34602972874508),
        (500.0, 3108, 500.1967753331094),
    ],
)
def test_typical_gap_keys_and_values(value: float, key: int, representative: float) -> None:
    assert int(sketch_keys(np.array([value]))[0]) == key
    assert sketch_value(key) == representative


@pytest.mark.parametrize(
    ("value", "key"),
    # Bucket-boundary values where ceil(ln v * (1/ln_gamma)) (the reference) and
    # ceil(ln v / ln_gamma) differ by one.
    [(1.847808245663812, 308), (2.155451589727471, 385), (0.6649787883852263, -204),
     (1.1320159177891935, 63)],  # fmt: skip
)
def test_boundary_keys_multiply_by_the_inverse(value: float, key: int) -> None:
    assert int(sketch_keys(np.array([value]))[0]) == key
    assert abs(math.ceil(math.log(value) / LN_GAMMA) - key) == 1


def test_keys_next_to_every_boundary_match_libm() -> None:
    values = []
    for k in range(-6000, 12000, 3):
        v = math.exp(k * LN_GAMMA)
        for _ in range(3):
            v = math.nextafter(v, 0.0)
        for _ in range(7):
            values.append(v)
            v = math.nextafter(v, math.inf)
    expected = [math.ceil(math.log(v) * INV_LN_GAMMA) for v in values]
    assert sketch_keys(np.array(values)).tolist() == expected


def test_key_range_beyond_the_store_collapses_the_lowest_keys() -> None:
    # Source-derived (ddsketchy store, 32768 bins): 1e-30 and 1e30 are 69,000 keys apart, so the
    # small samples land in the lowest bin of the window that ends at the largest key.
    stats = sketch_stats([1e-30] * 10 + [1e30])
    assert stats["median"] == sketch_value(int(sketch_keys(np.array([1e30]))[0]) - 32767)
    assert stats["p99"] == sketch_value(int(sketch_keys(np.array([1e30]))[0]))


def model_percentile(samples: list[float], p: float) -> float:
    """A plain-Python model of the reference's streaming percentile, for cross-checking."""
    n = len(samples)
    if n == 1:
        return samples[0]
    span = n - 1
    rank = round_half_away(span * p / 100.0)
    q = 1.0 if rank >= span else (rank + 0.5) / span
    sketch_rank = int(q * span)
    zeros = sum(1 for v in samples if v == 0.0)
    if sketch_rank < zeros:
        return 0.0
    keys = sorted(math.ceil(math.log(v) * INV_LN_GAMMA) for v in samples if v > 0.0)
    gamma = 1.0 + 2.0 * ALPHA / (1.0 - ALPHA)
    return math.exp(keys[sketch_rank - zeros] * LN_GAMMA) * (2.0 / (1.0 + gamma))


samples_strategy = st.lists(
    st.one_of(st.just(0.0), st.just(2.0), st.floats(min_value=1e-6, max_value=1e9)),
    min_size=1,
    max_size=300,
)


@settings(max_examples=300, deadline=None)
@given(samples_strategy)
def test_sketch_percentiles_match_plain_model(samples: list[float]) -> None:
    stats = sketch_stats(samples)
    for name, p in PERCENTILES:
        assert stats[name] == model_percentile(samples, p), name


@settings(max_examples=300, deadline=None)
@given(samples_strategy)
def test_sketch_percentiles_are_within_alpha_of_a_sample(samples: list[float]) -> None:
    stats = sketch_stats(samples)
    data = np.array(samples)
    tolerance = ALPHA * (1.0 + 1e-9)
    for name in PERCENTILE_NAMES:
        value = stats[name]
        assert np.any(np.abs(value - data) <= tolerance * data), name
        assert data.min() * (1.0 - tolerance) <= value <= data.max() * (1.0 + tolerance), name
    assert stats["min"] == data.min() and stats["max"] == data.max()
    assert close(stats["mean"], float(np.mean(data)), 1e-9)
