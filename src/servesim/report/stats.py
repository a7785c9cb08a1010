"""Distribution statistics of the report (docs/metrics.md, 'Latency distributions').

Two flavours, both returning the nine ``STAT_NAMES``:

* ``exact_stats`` (ttft, ttst, tpot, e2e): rounded-rank selection on the sorted samples,
  left-to-right mean and two-pass population std, as the reference computes them.
* ``sketch_stats`` (itl, output_token_throughput_per_user): exact mean/min/max/std, but the
  percentiles come from the reference's streaming DDSketch (crate ``ddsketchy``, alpha 0.001,
  32768 bins per store), reproduced bit for bit without building the sketch.

Everything is vectorised with numpy; only a handful of samples that sit within 1e-6 of a bucket
boundary are re-keyed one by one with ``math.log`` (the libm ``log`` the reference calls), because
numpy's SIMD ``log`` may differ from it in the last bit.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable
from typing import TypeVar

import numpy as np
import numpy.typing as npt

STAT_NAMES = ("mean", "min", "max", "median", "p75", "p90", "p95", "p99", "std")

# (stat name, percentile p in [0, 100]) in report order.
PERCENTILES: tuple[tuple[str, float], ...] = (
    ("median", 50.0),
    ("p75", 75.0),
    ("p90", 90.0),
    ("p95", 95.0),
    ("p99", 99.0),
)

# --- DDSketch mapping constants, evaluated exactly as the reference evaluates them -----------
ALPHA = 0.001
GAMMA = 1.0 + 2.0 * ALPHA / (1.0 - ALPHA)
# The key multiplies ln(v) by 1/log1p(2a/(1-a)); it does NOT divide by ln(gamma).
INV_LN_GAMMA = 1.0 / math.log1p(2.0 * ALPHA / (1.0 - ALPHA))
# value(key) recomputes ln(gamma) as the reciprocal of INV_LN_GAMMA.
LN_GAMMA = 1.0 / INV_LN_GAMMA
VALUE_SCALE = 2.0 / (1.0 + GAMMA)
# |v| below this goes to the zero bucket (DataDog's MinIndexableValue; ~2.2295e-308).
MIN_INDEXABLE = max(math.exp(-(2.0**31) / INV_LN_GAMMA + 1.0), sys.float_info.min * GAMMA)
# Bins per store; when the key range exceeds it the lowest keys collapse into the lowest bin.
MAX_BINS = 32768
# Samples whose scaled log lies this close to an integer are re-keyed with math.log.
_BOUNDARY_EPS = 1e-6

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


def round_half_away(x: float) -> int:
    """Round a finite float to the nearest integer, ties away from zero (Rust ``f64::round``)."""
    whole = math.floor(abs(x))
    if abs(x) - whole >= 0.5:  # exact: the fractional part of a double is representable
        whole += 1
    return int(math.copysign(whole, x)) if whole else 0


def percentile_rank(n: int, p: float) -> int:
    """Index of the p-th percentile among n sorted samples: min(n-1, round((n-1)*p/100))."""
    span = n - 1
    return min(span, round_half_away(span * p / 100.0))


def _as_array(values: Iterable[float] | FloatArray) -> FloatArray:
    """The samples as a 1-D float64 array (no copy when already one)."""
    if isinstance(values, np.ndarray):
        return np.asarray(values, dtype=np.float64).ravel()
    return np.fromiter(values, dtype=np.float64)


ScalarT = TypeVar("ScalarT", bound=np.generic)


def _keep(x: npt.NDArray[ScalarT], mask: npt.NDArray[np.bool_]) -> npt.NDArray[ScalarT]:
    """x[mask], without the copy when the mask keeps everything."""
    return x if mask.all() else x[mask]


def _zero_stats() -> dict[str, float]:
    """Every statistic 0.0 (the value reported for an empty distribution)."""
    return dict.fromkeys(STAT_NAMES, 0.0)


def _sequential_sum(x: FloatArray) -> float:
    """Left-to-right float sum (what a Rust ``iter().sum()`` gives), unlike numpy's pairwise sum."""
    return float(np.cumsum(x)[-1])


def exact_stats(values: Iterable[float] | FloatArray) -> dict[str, float]:
    """Mean, min, max, population std and exact rounded-rank percentiles of the samples.

    The mean is the left-to-right sum divided by N and the std is the two-pass
    sqrt(sum((x - mean)^2) / N), both in the order given, as the reference does. Empty input
    gives 0.0 for every statistic.
    """
    x = _as_array(values)
    n = x.size
    if n == 0:
        return _zero_stats()
    mean = _sequential_sum(x) / n
    std = math.sqrt(_sequential_sum((x - mean) ** 2) / n)
    ranks = [percentile_rank(n, p) for _, p in PERCENTILES]
    picked = np.partition(x, sorted(set(ranks)))
    stats = {"mean": mean, "min": float(x.min()), "max": float(x.max()), "std": std}
    for (name, _), rank in zip(PERCENTILES, ranks, strict=True):
        stats[name] = float(picked[rank])
    return {name: stats[name] for name in STAT_NAMES}


def sketch_keys(magnitudes: FloatArray) -> IntArray:
    """DDSketch bucket keys ceil(ln(v) * INV_LN_GAMMA) of positive samples, bit-exact with libm."""
    if magnitudes.size == 0:
        return np.zeros(0, dtype=np.int64)
    scaled = np.log(magnitudes) * INV_LN_GAMMA
    keys = np.ceil(scaled)
    above = keys - scaled  # in [0, 1); near 0 or 1 means next to a bucket boundary
    near = (above < _BOUNDARY_EPS) | (above > 1.0 - _BOUNDARY_EPS)
    for i in np.flatnonzero(near):
        keys[i] = math.ceil(math.log(float(magnitudes[i])) * INV_LN_GAMMA)
    return keys.astype(np.int64)


def sketch_value(key: int) -> float:
    """Representative value of a bucket: exp(key * ln(gamma)) * 2 / (1 + gamma)."""
    return math.exp(key * LN_GAMMA) * VALUE_SCALE


def _collapse_lowest(keys: IntArray) -> IntArray:
    """Merge keys below the store's MAX_BINS-wide window into its lowest bin."""
    if keys.size and int(keys.max()) - int(keys.min()) + 1 > MAX_BINS:
        return np.maximum(keys, int(keys.max()) - MAX_BINS + 1)
    return keys


def _sketch_rank(n: int, p: float) -> int:
    """The rank the sketch is asked for: q from the rounded rank, then floor(q * (n - 1))."""
    span = n - 1
    rank = round_half_away(span * p / 100.0)
    q = 1.0 if rank >= span else (rank + 0.5) / span
    return int(q * float(span))


def _select_keys(keys: IntArray, counts: IntArray, ranks: list[int]) -> dict[int, int]:
    """The rank-th smallest key (0-based, counting each key `counts` times) for each rank."""
    if not ranks:
        return {}
    lowest = int(keys.min())  # the keys span at most MAX_BINS (`_collapse_lowest`): count them per key
    cumulative = np.cumsum(np.bincount(keys - lowest, weights=counts))  # exact below 2**53 samples
    wanted = sorted(set(ranks))
    where = np.searchsorted(cumulative, wanted, side="right")
    return {r: lowest + i for r, i in zip(wanted, where.tolist(), strict=True)}


def sketch_percentiles(x: FloatArray, counts: IntArray) -> dict[str, float]:
    """The DDSketch estimates of ``PERCENTILES`` for finite samples x, each occurring `counts`
    times (N = Σ counts >= 1).

    Walk order is negative buckets (largest magnitude first), the zero bucket, then positive
    buckets ascending; a single sample is returned exactly.
    """
    n = int(counts.sum())
    if n == 1:
        value = float(x[np.flatnonzero(counts)[0]])
        return {name: value for name, _ in PERCENTILES}
    up, down = x >= MIN_INDEXABLE, x <= -MIN_INDEXABLE
    positive, pos_counts = _collapse_lowest(sketch_keys(_keep(x, up))), _keep(counts, up)
    negative, neg_counts = _collapse_lowest(sketch_keys(-_keep(x, down))), _keep(counts, down)
    n_neg = int(neg_counts.sum())
    n_zero = n - int(pos_counts.sum()) - n_neg
    ranks = {name: _sketch_rank(n, p) for name, p in PERCENTILES}
    neg_keys = _select_keys(negative, neg_counts, [n_neg - 1 - r for r in ranks.values() if r < n_neg])
    first = n_neg + n_zero  # sketch rank of the smallest positive sample
    pos_keys = _select_keys(positive, pos_counts, [r - first for r in ranks.values() if r >= first])
    out: dict[str, float] = {}
    for name, r in ranks.items():
        if r < n_neg:
            out[name] = -sketch_value(neg_keys[n_neg - 1 - r])
        elif r < first:
            out[name] = 0.0
        else:
            out[name] = sketch_value(pos_keys[r - first])
    return out


def sketch_stats(values: Iterable[float] | FloatArray, counts: IntArray | None = None) -> dict[str, float]:
    """Mean, min, max, population std (exact) and streaming-DDSketch percentiles of the samples,
    sample i occurring `counts[i]` times (once each without `counts`).

    Non-finite samples are ignored, as the reference's accumulator ignores them. The reference
    accumulates mean/std with Welford; the weighted two-pass result here may differ from it in
    the last ulp, except that a constant sample set gives exactly (mean = value, std = 0.0) like
    Welford. Empty input gives 0.0 for every statistic.
    """
    x = _as_array(values)
    w = np.ones(x.size, dtype=np.int64) if counts is None else np.asarray(counts, dtype=np.int64)
    keep = np.isfinite(x) & (w > 0)
    x, w = _keep(x, keep), _keep(w, keep)
    if x.size == 0:
        return _zero_stats()
    n = int(w.sum())
    lo, hi = float(x.min()), float(x.max())
    if lo == hi:
        mean, std = lo, 0.0
    else:
        weights = w.astype(np.float64)
        mean = float(np.dot(weights, x) / n)
        std = math.sqrt(float(np.dot(weights, (x - mean) ** 2)) / n)
    stats = {"mean": mean, "min": lo, "max": hi, "std": std, **sketch_percentiles(x, w)}
    return {name: stats[name] for name in STAT_NAMES}
