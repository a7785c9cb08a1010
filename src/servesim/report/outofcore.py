"""`exact_stats` over samples read a chunk at a time, bit-identical to it on the whole array.

Each statistic is re-derived so that only one chunk is held at once:

* the mean and std are left-to-right sums (`np.cumsum`, which is sequential): the sum of the
  chunks so far is carried in front of the next chunk, so every addition is the one the whole
  array's cumulative sum makes, in the same order;
* min and max combine the chunks' (NaN propagates as `ndarray.min`/`max` propagate it);
* each percentile is the rounded-rank order statistic: an exact radix selection on the samples'
  64-bit order-preserving keys, 16 bits per pass over the chunks (four passes for any number of
  ranks), counting keys into 65,536 buckets under the prefix chosen so far.

The order of the keys is that of `np.partition`: NaNs last, -0.0 equal to 0.0 (a tie between
them, which no latency produces, is reported as 0.0).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import numpy as np

from servesim.report.stats import PERCENTILES, STAT_NAMES, FloatArray, _zero_stats, percentile_rank

Chunks = Callable[[], Iterable[FloatArray]]
"""A source of samples: each call iterates them again, a chunk at a time, in order."""

_DIGIT_BITS = 16
_SHIFTS = (48, 32, 16, 0)
_SIGN = np.uint64(1 << 63)
_ALL = np.uint64((1 << 64) - 1)


def sequential_sum(chunks: Iterable[FloatArray]) -> float | None:
    """The left-to-right float sum of the chunks' samples (None for no samples), as
    ``np.cumsum(whole)[-1]`` gives it."""
    total: float | None = None
    for chunk in chunks:
        if not len(chunk):
            continue
        carried = chunk if total is None else np.concatenate(([total], chunk))
        total = float(np.cumsum(carried)[-1])
    return total


def order_keys(x: FloatArray) -> np.ndarray:
    """Unsigned 64-bit keys whose order is the samples' order (NaN above +inf, -0.0 as 0.0)."""
    canonical = np.where(np.isnan(x), np.nan, x + 0.0)  # one NaN; -0.0 + 0.0 is 0.0
    bits = canonical.view(np.uint64)
    return bits ^ np.where(bits & _SIGN, _ALL, _SIGN)


def key_value(key: int) -> float:
    """The sample whose key is `key` (the inverse of `order_keys`)."""
    bits = np.uint64(key)
    bits = bits ^ (_SIGN if bits & _SIGN else _ALL)
    return float(np.array([bits], dtype=np.uint64).view(np.float64)[0])


def select_ranks(chunks: Chunks, ranks: Iterable[int]) -> dict[int, float]:
    """The rank-th smallest sample (0-based) for each rank, as ``np.partition`` places it."""
    wanted = sorted(set(ranks))
    prefix = dict.fromkeys(wanted, 0)
    remaining = {rank: rank for rank in wanted}
    for shift in _SHIFTS:
        counts = {p: np.zeros(1 << _DIGIT_BITS, dtype=np.int64) for p in set(prefix.values())}
        for chunk in chunks():
            keys = order_keys(chunk)
            above = keys >> np.uint64(shift + _DIGIT_BITS) if shift < _SHIFTS[0] else None
            for p, histogram in counts.items():
                under = keys if above is None else keys[above == np.uint64(p)]
                digits = ((under >> np.uint64(shift)) & np.uint64(0xFFFF)).astype(np.intp)
                histogram += np.bincount(digits, minlength=1 << _DIGIT_BITS)
        for rank in wanted:
            cumulative = np.cumsum(counts[prefix[rank]])
            digit = int(np.searchsorted(cumulative, remaining[rank], side="right"))
            remaining[rank] -= int(cumulative[digit - 1]) if digit else 0
            prefix[rank] = (prefix[rank] << _DIGIT_BITS) | digit
    return {rank: key_value(prefix[rank]) for rank in wanted}


def exact_stats_chunked(chunks: Chunks) -> dict[str, float]:
    """`exact_stats` of the samples `chunks` gives, holding one chunk at a time."""
    n = 0
    lows, highs = [], []
    for chunk in chunks():
        if len(chunk):
            n += len(chunk)
            lows.append(chunk.min())
            highs.append(chunk.max())
    if n == 0:
        return _zero_stats()
    total = sequential_sum(chunks())
    assert total is not None
    mean = total / n
    squares = sequential_sum((chunk - mean) ** 2 for chunk in chunks())
    assert squares is not None
    std = math.sqrt(squares / n)
    ranks = [percentile_rank(n, p) for _, p in PERCENTILES]
    picked = select_ranks(chunks, ranks)
    stats = {"mean": mean, "min": float(np.min(lows)), "max": float(np.max(highs)), "std": std}
    for (name, _), rank in zip(PERCENTILES, ranks, strict=True):
        stats[name] = picked[rank]
    return {name: stats[name] for name in STAT_NAMES}
