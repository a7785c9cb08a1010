"""Token sequences stored as runs, and the token segments radix-tree edges are made of.

A request's tokens are a `TokenSeq`: its runs (see `servesim.traffic.workload`; ``(v, c > 0)`` =
c copies of v, ``(v, -c)`` = v, v+1, …) with cumulative start offsets, so random access is
O(log runs) and comparing two sequences is O(runs), never O(tokens). A *segment*
``(seq, start, end)`` names a token range of a sequence; a radix edge is a short list of them.
"""

from __future__ import annotations

from bisect import bisect_right
from itertools import accumulate
from operator import itemgetter

from servesim.engine.cache.blocks import ROOT_KEY, chain_keys
from servesim.traffic.workload import Run


class TokenSeq:
    """An immutable token sequence stored as runs, with O(log runs) random access."""

    __slots__ = ("runs", "starts", "length", "shared_pages", "keys")

    def __init__(self, runs: list[Run], shared_pages: int = 1 << 62) -> None:
        counts = list(map(_COUNT, runs))
        if 0 in counts:
            runs = [r for r in runs if r[1] != 0]
            counts = list(map(_COUNT, runs))
        self.runs = runs
        self.starts = [0, *accumulate(map(abs, counts))]
        self.length = self.starts[-1]
        self.shared_pages = shared_pages
        """Leading pages whose content another sequence could also have (KV events only)."""
        self.keys: list[int] = []
        """Chained keys of the leading pages, as far as KV events needed them."""

    def page_keys(self, page: int, stop: int) -> list[int]:
        """Chained keys of (at least) the first `stop` pages of `page` tokens."""
        keys = self.keys
        have = len(keys)
        if have < stop:
            keys.extend(chain_keys(self.runs, page, stop - have, have, keys[-1] if keys else ROOT_KEY))
        return keys

    def token_at(self, pos: int) -> int:
        """The token at position `pos`."""
        i = bisect_right(self.starts, pos) - 1
        value, count = self.runs[i]
        return value if count > 0 else value + (pos - self.starts[i])

    def tokens(self, start: int, end: int) -> tuple[int, ...]:
        """The tokens of [start, end) as a tuple (for short ranges only)."""
        return tuple(self.token_at(p) for p in range(start, end))

    def common(self, pos: int, other: TokenSeq, opos: int, limit: int) -> int:
        """How many tokens from `pos` equal `other`'s tokens from `opos`, at most `limit`.

        Runs are compared piece by piece; where both sides are at run boundaries, identical runs
        are skipped in bulk (slice comparisons), so long equal histories cost C-level work only.
        """
        if limit <= 0:
            return 0
        if other is self and opos == pos:
            return limit
        ra, sa, rb, sb = self.runs, self.starts, other.runs, other.starts
        i = bisect_right(sa, pos) - 1
        j = bisect_right(sb, opos) - 1
        n = 0
        while n < limit:
            oa = pos - sa[i]
            ob = opos - sb[j]
            if oa == 0 and ob == 0 and ra[i] == rb[j]:
                k = _equal_runs(ra, i, rb, j, bisect_right(sa, pos + limit - n) - 1 - i)
                if k:
                    step = sa[i + k] - pos
                    n += step
                    pos += step
                    opos += step
                    i += k
                    j += k
                    continue
            va, ca = ra[i]
            vb, cb = rb[j]
            xa, la = (va, ca - oa) if ca > 0 else (va + oa, -ca - oa)
            xb, lb = (vb, cb - ob) if cb > 0 else (vb + ob, -cb - ob)
            if xa != xb:
                break
            m = min(la, lb, limit - n)
            k = m if (ca > 0) == (cb > 0) or m == 1 else 1
            n += k
            pos += k
            opos += k
            if k == la:
                i += 1
            if k == lb:
                j += 1
        return n


_COUNT = itemgetter(1)


def _equal_runs(ra: list[Run], i: int, rb: list[Run], j: int, most: int) -> int:
    """How many runs from ra[i] equal those from rb[j] (at most `most`), by galloping."""
    most = min(most, len(rb) - j)
    if most <= 0:
        return 0
    lo, k = 0, 1
    while k <= most and ra[i:i + k] == rb[j:j + k]:
        lo, k = k, 2 * k
    hi = min(k, most + 1)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ra[i + lo:i + mid] == rb[j + lo:j + mid]:
            lo = mid
        else:
            hi = mid
    return lo


Segment = tuple[TokenSeq, int, int]


def segs_common(segs: list[Segment], seq: TokenSeq, pos: int, limit: int) -> int:
    """Common prefix length of an edge's tokens and `seq` from `pos`, at most `limit`."""
    n = 0
    for s, a, b in segs:
        want = min(b - a, limit - n)
        c = s.common(a, seq, pos + n, want)
        n += c
        if c < want or n >= limit:
            break
    return n


def segs_split(segs: list[Segment], k: int) -> tuple[list[Segment], list[Segment]]:
    """The first `k` tokens of an edge and the rest."""
    head: list[Segment] = []
    for i, (s, a, b) in enumerate(segs):
        if k >= b - a:
            head.append((s, a, b))
            k -= b - a
            if k == 0:
                return head, segs[i + 1:]
            continue
        return head + [(s, a, a + k)], [(s, a + k, b)] + segs[i + 1:]
    return head, []
