"""The reference's own timing models (fixed, polynomial) and the nanosecond quantisation of
pass phases every model applies.

A model answers two questions per pass (`servesim.engine.pass_time.TimingModel`), in
milliseconds already quantised to whole nanoseconds: ``prefill(batch, mean_isl, mean_prefix)``
and ``decode(batch, active_kv_tokens, mean_ctx, total_kv_tokens)``. Models memoise what is worth
memoising for their own inputs.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from math import floor

_EXACT_NS = float(1 << 40)
"""Below this many nanoseconds (18 minutes) a pass phase rounds from its float product with
1e9 whenever the product is not within 1e-3 of a half: the product is off by at most 2⁻¹³."""


def quantize_ms(ms: float) -> float:
    """`ms` rounded to whole nanoseconds the way the reference's clock does it.

    The value is taken as seconds (``ms / 1000``), its exact binary value rounded to the nearest
    nanosecond (ties to even), and converted back as ``(s + ns / 1e9) * 1000``.
    """
    if ms <= 0.0:
        if ms < 0.0 or ms != ms:
            raise ValueError(f"a pass phase cannot take {ms} ms")
        return 0.0
    ns = (ms / 1000.0) * 1e9
    if ns < _EXACT_NS:
        whole = floor(ns)
        frac = ns - whole  # exact; `ns` is within 1e-4 ns of the true product
        if frac < 0.499 or frac > 0.501:
            q = whole + 1 if frac > 0.5 else whole
            return ((q // 1_000_000_000) + (q % 1_000_000_000) / 1e9) * 1000.0
    num, den = (ms / 1000.0).as_integer_ratio()
    q, r = divmod(num * 1_000_000_000, den)
    twice = 2 * r
    if twice > den or (twice == den and q & 1):
        q += 1
    secs, nanos = divmod(q, 1_000_000_000)
    return (secs + nanos / 1e9) * 1000.0


DENSE_SERIES = 1 << 20
"""Active-token counts below this are kept in a table: 8 bytes per count up to the largest
count asked (at most 8 MB per pool size; `decode`'s memo takes ~100 bytes per value)."""
SERIES_CHUNK = 4096
"""Table entries computed at once."""


class FixedTiming:
    """Constant costs: `prefill_ms` per prefill phase, `max(1, decode_ms)` per decode phase."""

    def __init__(self, prefill_ms: float, decode_ms: float) -> None:
        self._prefill = quantize_ms(float(prefill_ms))
        self._decode = quantize_ms(max(1.0, float(decode_ms)))

    def prefill(self, batch: int, mean_isl: int, mean_prefix: int) -> float:
        return self._prefill

    def decode(self, batch: int, active_kv_tokens: int, mean_ctx: int, total_kv_tokens: int) -> float:
        return self._decode

    def decode_series(self, batch: int, active: range, total_kv_tokens: int) -> list[float]:
        """`decode` at each active-token count of `active`."""
        return [self._decode] * len(active)

    @property
    def constant_phases(self) -> tuple[float, float]:
        """(prefill, decode): the answers, whatever the batch (see `engine.pass_time`)."""
        return self._prefill, self._decode


class PolynomialTiming:
    """The reference's built-in polynomial model.

    prefill = 4.209989e-7·T² + 1.518344e-2·T + 16.50142 with T = batch × (mean_isl − mean_prefix);
    decode = max(1, −25.74·u² + 54.01·u + 5.74) with u = min(1, active / total KV tokens).
    Float evaluation order follows the reference (square first, sums left to right).
    """

    def __init__(self) -> None:
        self._prefill: dict[int, float] = {}
        self._decode: dict[int, dict[int, float]] = {}
        """Decode times by total KV tokens, then active KV tokens."""
        self._dense: dict[int, tuple[array, bytearray]] = {}
        """Decode times by total KV tokens: a table by active KV tokens, and which of its
        `SERIES_CHUNK`-count chunks are filled in."""

    def prefill(self, batch: int, mean_isl: int, mean_prefix: int) -> float:
        tokens = batch * (mean_isl - mean_prefix)
        ms = self._prefill.get(tokens)
        if ms is None:
            t = float(tokens)
            raw = 0.0 if t == 0.0 else max(0.0, (4.209989e-07 * (t * t) + 1.518344e-02 * t) + 16.50142)
            ms = self._prefill[tokens] = quantize_ms(raw)
        return ms

    def decode(self, batch: int, active_kv_tokens: int, mean_ctx: int, total_kv_tokens: int) -> float:
        dense = self._dense.get(total_kv_tokens)
        if dense is not None:
            table = dense[0]
            if 0 <= active_kv_tokens < len(table):
                tabled = table[active_kv_tokens]
                if tabled:  # else its chunk is not filled in (every decode time is at least 1 ms)
                    return tabled
        memo = self._decode.get(total_kv_tokens)
        if memo is None:
            memo = self._decode[total_kv_tokens] = {}
        ms = memo.get(active_kv_tokens)
        if ms is None:
            ms = memo[active_kv_tokens] = self._decode_ms(active_kv_tokens, total_kv_tokens)
        return ms

    def decode_series(self, batch: int, active: range, total_kv_tokens: int) -> Sequence[float]:
        """`decode` at each active-token count of `active`.

        Counts below `DENSE_SERIES` are answered from a table of doubles indexed by the count (a
        slice per series, an array of type 'd'), filled `SERIES_CHUNK` counts at a time; the
        rest from `decode`'s memo (a list).
        """
        if not active:
            return []
        top = active[-1]
        if top >= DENSE_SERIES or active.start < 0 or total_kv_tokens >= 1 << 53:
            return self._sparse_series(active, total_kv_tokens)
        dense = self._dense.get(total_kv_tokens)
        if dense is None:
            dense = self._dense[total_kv_tokens] = (array("d"), bytearray())
        table, filled = dense
        last_chunk = top // SERIES_CHUNK
        if last_chunk >= len(filled):
            grow = last_chunk + 1 - len(filled)
            table.frombytes(bytes(grow * SERIES_CHUNK * table.itemsize))
            filled += bytes(grow)
        for chunk in range(active.start // SERIES_CHUNK, last_chunk + 1):
            if not filled[chunk]:
                lo = chunk * SERIES_CHUNK
                table[lo:lo + SERIES_CHUNK] = decode_ms_range(lo, lo + SERIES_CHUNK, total_kv_tokens)
                filled[chunk] = 1
        return table[active.start:top + 1:active.step]

    def _sparse_series(self, active: range, total_kv_tokens: int) -> list[float]:
        """`decode_series` through `decode`'s memo."""
        memo = self._decode.get(total_kv_tokens)
        if memo is None:
            memo = self._decode[total_kv_tokens] = {}
        series = list(map(memo.get, active))
        if None in series:
            for i in range(series.index(None), len(series)):
                if series[i] is None:
                    a = active[i]
                    series[i] = memo[a] = self._decode_ms(a, total_kv_tokens)
        return series  # type: ignore[return-value]

    @staticmethod
    def _decode_ms(active_kv_tokens: int, total_kv_tokens: int) -> float:
        u = 1.0 if total_kv_tokens == 0 else min(1.0, active_kv_tokens / total_kv_tokens)
        return quantize_ms(max(1.0, (-25.74 * (u * u) + 54.01 * u) + 5.74))


def decode_ms_range(lo: int, hi: int, total_kv_tokens: int) -> array:
    """`PolynomialTiming._decode_ms` at each active-token count in [lo, hi) (total below 2⁵³),
    computed with numpy: the same IEEE operations in the same order, element by element."""
    import numpy as np

    if total_kv_tokens == 0:
        return array("d", [PolynomialTiming._decode_ms(a, 0) for a in range(lo, hi)])
    u = np.minimum(1.0, np.arange(lo, hi, dtype=np.int64) / total_kv_tokens)
    ms = np.maximum(1.0, (-25.74 * (u * u) + 54.01 * u) + 5.74)
    ns = (ms / 1000.0) * 1e9
    whole = np.floor(ns)
    frac = ns - whole
    q = (whole + (frac > 0.5)).astype(np.int64)
    out = ((q // 1_000_000_000).astype(np.float64) + (q % 1_000_000_000).astype(np.float64) / 1e9) * 1000.0
    near_half = (ns >= _EXACT_NS) | ((frac >= 0.499) & (frac <= 0.501))
    for i in np.flatnonzero(near_half).tolist():
        out[i] = quantize_ms(float(ms[i]))
    return array("d", out.tobytes())
