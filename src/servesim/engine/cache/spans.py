"""The pieces of a block pool's cache (`servesim.engine.cache.kv`): cached blocks, the spans
that hold them, and the LRU queue of free spans with the surgery that keeps spans whole.

A *span* is the blocks of consecutive positions stored (or kept) together and held by the same
requests, with one reference count. Free spans wait in an LRU queue of *runs* (the spans one
release freed, in eviction order) and *gaps* (counted free blocks nobody can reuse). A request
holds whole spans only: pinning or releasing part of a span splits it first.
"""

from __future__ import annotations

from collections import deque


class Block:
    """A block holding cached content: `span` is the span it belongs to (`EVICTED` once a
    private block is evicted)."""

    __slots__ = ("span",)

    def __init__(self, span: Span) -> None:
        self.span = span

    @property
    def key(self) -> int | None:
        """The content's key; None for content private to one request."""
        span = self.span
        return None if span.keys is None else span.keys[span.blocks.index(self)]

    @property
    def refs(self) -> int:
        """Requests holding the block; -1 for a private block that was evicted."""
        return self.span.refs


class Span:
    """Blocks of consecutive positions (in position order), held by the same `refs` requests,
    and their `keys` (None for content private to one request).

    While free (``refs == 0``) the span waits in the LRU: `run` is the run holding its live
    entry (None while held); eviction takes its blocks from the last one down.
    """

    __slots__ = ("blocks", "keys", "refs", "run")

    def __init__(self, blocks: list[Block], keys: list[int] | None, refs: int) -> None:
        self.blocks = blocks
        self.keys = keys
        self.refs = refs
        self.run: Run | None = None


EVICTED = Span([], None, -1)
"""The span of every evicted private block."""


class Gap:
    """A run of free blocks whose content nobody can reuse, in the LRU; `due` is when the
    latest copy of one of them to a host KV tier completes (0: none in flight)."""

    __slots__ = ("count", "due")

    def __init__(self, count: int, due: float = 0.0) -> None:
        self.count = count
        self.due = due


class Run:
    """Free spans released together, in eviction order, in the LRU; `start` is the next one.

    An entry is live while its span is free and names this run.
    """

    __slots__ = ("spans", "start", "due")

    def __init__(self, due: float = 0.0) -> None:
        self.spans: list[Span] = []
        self.start = 0
        self.due = due
        """When the latest copy of one of its blocks to a host KV tier completes (0: none)."""


def common_length(first: list[int], second: list[int], at: int, most: int) -> int:
    """How many leading entries of `first` equal those of `second` from `at` on (at most `most`)."""
    if first[:most] == second[at:at + most]:
        return most
    lo, hi = 0, most - 1  # first[:lo] matches; first[:hi + 1] does not
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if first[:mid] == second[at:at + mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


class SpanQueue:
    """The LRU queue of a pool's free spans and the splitting of spans (a base of `BlockPool`).

    Reviving a span does not take it out of its run: the entry goes stale and is skipped when it
    reaches the head (or dropped when the queue is compacted). `_queued` counts the span entries
    in the queue, stale ones included.
    """

    _lru: deque[Run | Gap]
    _queued: int

    def _held_span(self, lease: list[Block | None], i: int) -> Span:
        """The span of ``lease[i]``, which the lease holds whole up to `i` (split off if the
        lease holds only part of it)."""
        block = lease[i]
        assert block is not None
        span = block.span
        members = span.blocks
        k = len(members)
        if members[-1] is block and k <= i + 1 and lease[i - k + 1:i + 1] == members:
            return span
        q = members.index(block)
        t = 1
        while t <= q and t <= i and lease[i - t] is members[q - t]:
            t += 1
        return self._isolate(span, q - t + 1, q + 1)

    def _carve(self, blocks: list[Block], i: int) -> Span:
        """The span holding ``blocks[i]`` and the blocks after it in `blocks` that follow it in
        its span, split off as a span of its own."""
        block = blocks[i]
        span = block.span
        members = span.blocks
        q = members.index(block)
        m = min(len(blocks) - i, len(members) - q)
        if blocks[i:i + m] != members[q:q + m]:  # another copy takes over within the span
            m = 1
            while blocks[i + m] is members[q + m]:
                m += 1
        return self._isolate(span, q, q + m)

    def _isolate(self, span: Span, first: int, stop: int) -> Span:
        """Split `span` so its blocks [first, stop) form a span of their own; returns it."""
        if stop < len(span.blocks):
            self._split(span, stop)
        return self._split(span, first) if first else span

    def _split(self, span: Span, at: int) -> Span:
        """Move `span`'s blocks from `at` on to a new span in the same state; returns it. In the
        LRU it goes just before `span` (a span is evicted from its last block down)."""
        members, keys = span.blocks, span.keys
        upper = Span(members[at:], None if keys is None else keys[at:], span.refs)
        del members[at:]
        if keys is not None:
            del keys[at:]
        for block in upper.blocks:
            block.span = upper
        run = span.run
        if run is not None:
            upper.run = run
            run.spans.insert(run.spans.index(span, run.start), upper)
            self._queued += 1
        return upper

    def _push(self, run: Run, gap: int) -> int:
        """Append a run of spans, then a gap of `gap` anonymous blocks (with the run's `due`),
        at the LRU's tail; returns how many free blocks that adds."""
        lru = self._lru
        added = gap
        if run.spans:
            lru.append(run)
            self._queued += len(run.spans)
            for span in run.spans:
                added += len(span.blocks)
        if gap:
            last = lru[-1] if lru else None
            if type(last) is Gap and last.due == run.due:  # gaps of other copies stay apart
                last.count += gap
            else:
                lru.append(Gap(gap, run.due))
        return added

    def _compact(self) -> None:
        """Drop the queue's stale entries (keeping its order)."""
        live: deque[Run | Gap] = deque()
        queued = 0
        for entry in self._lru:
            if type(entry) is Run:
                old = entry
                spans = [span for span in old.spans[old.start:] if span.run is old]
                if not spans:
                    continue
                entry = Run(old.due)
                entry.spans = spans
                for span in spans:
                    span.run = entry
                queued += len(spans)
            last = live[-1] if live else None
            if type(entry) is Gap and type(last) is Gap and last.due == entry.due:
                last.count += entry.count
            else:
                live.append(entry)
        self._lru = live
        self._queued = queued
