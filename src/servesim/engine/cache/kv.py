"""KV block pool with prefix caching (vLLM / TRT-LLM style), per scheduler rank.

Capacity is `num_blocks`. A block is one of:

* anonymous free capacity (never used, or a released partial block) — only counted;
* held by a request (``active_blocks``): an entry of its lease — a `Block` when its content is
  cached, or None for a private block (the partial last block, a block whose content no other
  request can ever have, or any block when caching is off);
* free cached: released but still holding content, evictable in LRU order (least recently
  released first). Shareable content is a `Block` with a key, found through the index; content
  private to one request is either a keyless `Block` its (preempted) owner may still reuse, or —
  once its owner is gone — just counted in a `Gap` that keeps its place in the LRU order.

Allocation takes anonymous capacity first, then evicts the LRU head. Releases go tail-first,
so a finished request's last blocks are evicted before its first ones. Several physical copies
of one key may exist; lookups use the oldest one.

Blocks are counted, pinned, released and evicted a *span* at a time: the blocks of consecutive
positions stored (or kept) together and held by the same requests. A request holds whole spans
only: pinning part of a span splits it first, so one reference count serves all its blocks.
The blocks, spans and the LRU queue with its span surgery are `servesim.engine.cache.spans`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from functools import partial
from itertools import islice, repeat, takewhile
from operator import is_not
from typing import cast

from servesim.engine.cache.spans import EVICTED, Block, Gap, Run, Span, SpanQueue, common_length

_is_block = partial(is_not, None)
_bare_block = object.__new__

KvListener = Callable[[str, int], None]
"""Called with ("stored", key) when a key becomes resident and ("removed", key) when it leaves."""


class BlockPool(SpanQueue):
    """The blocks of one rank and the prefix-cache index over them.

    Free cached spans wait in a queue of runs and gaps in LRU order (head first); each release
    appends its spans as one run. Reviving a span does not take it out of its run: the entry
    goes stale and is skipped when it reaches the head (or dropped when the queue is compacted).
    """

    join_spans = True
    """Whether a release joins consecutive cached spans it frees (results are the same either
    way; the tests check that with it off). Never while a listener or the host tier follows the
    pool's blocks: they see evictions span by span."""

    def __init__(self, num_blocks: int, caching: bool = True) -> None:
        self.num_blocks = num_blocks
        self.caching = caching
        self.anonymous_blocks = num_blocks
        self.active_blocks = 0
        """Blocks held by some request (private, or cached with refs > 0)."""
        self._index: dict[int, Block] = {}
        self._copies: dict[int, list[Block]] = {}
        self._lru: deque[Run | Gap] = deque()
        self._lru_size = 0
        """Free blocks in the LRU (live spans and gaps)."""
        self._queued = 0
        """Span entries in the LRU, stale ones included."""
        self._compact_at = max(4 * num_blocks, 1024)
        self._spare: list[Block] = []
        """Evicted shareable blocks, for reuse."""
        self.listener: KvListener | None = None
        self.tier_hook: KvListener | None = None
        """Told ("stored", key) / ("removed", key) as a key enters and leaves the pool (a host
        tier's eviction order, `engine.cache.host`); kept apart from `listener` (the router's)."""
        self.evicted_due = 0.0
        """The latest `due` (copy to a host tier in flight, `Run.due`) of the blocks evicted
        since the caller last reset it (0: none)."""

    # -- queries ----------------------------------------------------------------------------

    @property
    def free_blocks(self) -> int:
        """Blocks an allocation could use: anonymous plus evictable."""
        return self.anonymous_blocks + self._lru_size

    def fingerprint(self) -> tuple:
        """The pool's state as a value: counts, cached keys and the free blocks in LRU order."""
        lru: list[object] = []
        for entry in self._lru:
            if type(entry) is Gap:
                lru.append(("gap", entry.count))
                continue
            assert isinstance(entry, Run)
            for span in entry.spans[entry.start:]:  # keys one by one: however spans are cut
                if span.run is entry and span.keys is not None:
                    lru.extend(span.keys)
                elif span.run is entry:
                    lru.append(("private", len(span.blocks)))
        return self.anonymous_blocks, self.active_blocks, tuple(self._index), tuple(lru)

    def lookup(self, key: int) -> Block | None:
        return self._index.get(key)

    def prefix_hits(self, keys: list[int], limit: int) -> list[Block]:
        """Oldest resident copies of the leading keys, at most `limit` blocks."""
        if not self.caching:
            return []
        if not self._copies:
            return self._span_hits(keys, limit)
        found: Iterator[Block | None] = map(self._index.get, keys if len(keys) <= limit else islice(keys, limit))
        return cast(list[Block], list(takewhile(_is_block, found)))

    def _span_hits(self, keys: list[int], limit: int) -> list[Block]:
        """`prefix_hits` while every resident key has one copy: a key found at the start of a
        span vouches for the span's blocks whose keys go on as `keys` does (they are the only
        copies of those keys), so the index is asked once per span."""
        index = self._index
        hits: list[Block] = []
        i, n = 0, min(len(keys), limit)
        while i < n:
            block = index.get(keys[i])
            if block is None:
                break
            span = block.span
            members = span.blocks
            m = len(members) if len(members) < n - i else n - i
            if m > 1 and members[0] is block:
                assert span.keys is not None
                m = common_length(span.keys, keys, i, m) or 1
                hits += members[:m]
                i += m
            else:
                hits.append(block)
                i += 1
        return hits

    def held_count(self, blocks: list[Block]) -> int:
        """How many of `blocks` some request holds (a whole span at a time where `blocks` has one)."""
        held = i = 0
        n = len(blocks)
        while i < n:
            block = blocks[i]
            span = block.span
            members = span.blocks
            k = len(members)
            if members[0] is not block or blocks[i:i + k] != members:
                k = 1
            if span.refs > 0:
                held += k
            i += k
        return held

    # -- mutations --------------------------------------------------------------------------

    def pin_all(self, blocks: list[Block]) -> None:
        """Take a reference to each of `blocks`, all resident (reviving free ones from the LRU)."""
        i, n = 0, len(blocks)
        while i < n:
            span = blocks[i].span
            members = span.blocks
            k = len(members)
            if members[0] is not blocks[i] or blocks[i:i + k] != members:
                span = self._carve(blocks, i)
                k = len(span.blocks)
            if not span.refs:
                span.run = None
                self._lru_size -= k
                self.active_blocks += k
            span.refs += 1
            i += k

    def allocate(self, count: int) -> bool:
        """Reserve `count` private blocks; False (and nothing changes) if they do not fit."""
        anonymous = self.anonymous_blocks
        if count > anonymous + self._lru_size:
            return False
        self.active_blocks += count
        if count <= anonymous:
            self.anonymous_blocks = anonymous - count
        else:
            self.anonymous_blocks = 0
            self._evict(count - anonymous)
        return True

    def _evict(self, need: int) -> None:
        """Drop the `need` least recently released free blocks."""
        lru = self._lru
        self._lru_size -= need
        while need:
            entry = lru[0]
            if type(entry) is Gap:
                if entry.due > self.evicted_due:
                    self.evicted_due = entry.due
                if entry.count > need:
                    entry.count -= need
                    return
                need -= entry.count
                lru.popleft()
                continue
            assert isinstance(entry, Run)
            need = self._evict_from(entry, need)

    def _evict_from(self, run: Run, need: int) -> int:
        """Evict up to `need` blocks from the head run; returns how many are still needed."""
        spans = run.spans
        start = i = run.start
        stop = len(spans)
        while i < stop and need:
            span = spans[i]
            if span.run is not run:
                i += 1
                continue
            members, keys = span.blocks, span.keys
            k = len(members)
            if run.due > self.evicted_due:
                self.evicted_due = run.due
            if k > need:  # the span's last blocks go first
                cut = k - need
                self._drop(members[cut:], keys[cut:] if keys is not None else None)
                del members[cut:]
                if keys is not None:
                    del keys[cut:]
                need = 0
                break
            span.run = None
            self._drop(members, keys)
            span.blocks = []
            need -= k
            i += 1
        self._queued -= i - start
        if i == stop:
            self._lru.popleft()
        else:
            run.start = i
        return need

    def _drop(self, blocks: list[Block], keys: list[int] | None) -> None:
        """Take evicted blocks' content (blocks of one span, and their keys) out of the cache."""
        if keys is None:
            for block in blocks:
                block.span = EVICTED
            return
        if self._copies or self.listener is not None or self.tier_hook is not None:
            for block, key in zip(blocks, keys, strict=True):
                self._forget(block, key)
            return
        index = self._index
        for key in keys:
            del index[key]
        spare = self._spare
        spare += blocks
        if len(spare) > self.num_blocks:
            del spare[self.num_blocks:]

    def _new_span(self, keys: list[int]) -> Span:
        """A span holding `keys` (a list it keeps), held once; evicted blocks are reused (no
        one holds an evicted shareable block)."""
        span = Span([], keys, 1)
        spare = self._spare
        reuse = len(spare) - min(len(keys), len(spare))
        blocks = spare[reuse:]
        del spare[reuse:]
        if len(blocks) < len(keys):  # new blocks, made without calling `Block.__init__`
            blocks += map(_bare_block, repeat(Block, len(keys) - len(blocks)))
        for block in blocks:
            block.span = span
        span.blocks = blocks
        return span

    def store(self, key: int) -> Block:
        """Turn one private block of the caller into a cached block holding `key`."""
        block = self._new_span([key]).blocks[0]
        if key in self._index:
            self._copies.setdefault(key, []).append(block)
        else:
            self._index[key] = block
            if self.listener is not None:
                self.listener("stored", key)
            if self.tier_hook is not None:
                self.tier_hook("stored", key)
        return block

    def store_completed(self, keys: list[int], lease: list[Block | None], first: int, stop: int) -> None:
        """`store` each private block of ``lease[first:stop]`` under its key in `keys`."""
        if self.listener is None and self.tier_hook is None and lease[first:stop].count(None) == stop - first:
            fresh = keys[first:stop]
            blocks = self._new_span(fresh).blocks
            lease[first:stop] = blocks
            placed = list(map(self._index.setdefault, fresh, blocks))
            if placed != blocks:  # keys already resident (or repeated in the chain): copies
                for key, block, found in zip(fresh, blocks, placed, strict=True):
                    if found is not block:
                        self._copies.setdefault(key, []).append(block)
            return
        for b in range(first, stop):
            if lease[b] is None:
                lease[b] = self.store(keys[b])

    def release(self, lease: list[Block | None], complete: int, *, keep_private: bool = False,
                private_from: int = 0, due: float = 0.0) -> list[Block]:
        """Drop a request's hold on its lease, last block first.

        Entries below index `complete` are full blocks; a None entry there is private cached
        content, which goes to the LRU — as a keyless `Block` the owner may reuse when
        `keep_private` (a preempted request), else as anonymous LRU capacity. Returns the owner's
        private blocks (in block order) when `keep_private`. `private_from` is where the lease
        is likely all None from (it is checked), so those entries are counted, not visited.
        `due`: when the latest copy of the lease's blocks to a host KV tier completes (marks the
        LRU entries this release adds, see `evicted_due`).
        """
        held = len(lease)
        caching = self.caching
        split = held
        gap = freed = anonymous = 0
        if not keep_private:
            split = private_from if private_from < held else held
            if split < held and (lease[split:] if split else lease).count(None) != held - split:
                split = held
            freed = held - split
            top = complete if complete < held else held
            gap = top - split if caching and top > split else 0
            anonymous = freed - gap
        run = Run(due)
        queued = 0
        own: list[list[Block]] = []
        merge = self.join_spans and caching and not self._copies and self.listener is None and self.tier_hook is None
        after = -1  # where the span last added to `run` starts in the lease
        i = split - 1
        while i >= 0:
            block = lease[i]
            if block is None:  # a stretch of private blocks
                j = i - 1
                while j >= 0 and lease[j] is None:
                    j -= 1
                count = i - j
                kept = min(i + 1, complete) - j - 1 if caching else 0
                kept = kept if kept > 0 else 0
                freed += count
                anonymous += count - kept
                i = j
                if not kept:
                    continue
                if not keep_private:
                    gap += kept
                    continue
                span = Span([], None, 0)
                span.blocks = [Block(span) for _ in range(kept)]
                own.append(span.blocks)
            else:
                span = self._held_span(lease, i)
                members = span.blocks
                k = len(members)
                i -= k
                span.refs -= 1
                if span.refs:
                    continue
                freed += k
                if span.keys is None:
                    if not keep_private:
                        gap += k
                        continue
                    own.append(members)
                elif not caching:
                    for member, key in zip(members, span.keys, strict=True):
                        self._forget(member, key)
                    anonymous += k
                    continue
            if gap:
                queued += self._push(run, gap)
                run = Run(due)
                gap = 0
            if merge and after == i + 1 + len(span.blocks) and span.keys is not None:
                later = run.spans[-1]
                if later.keys is not None:
                    run.spans[-1] = span = _joined(span, later)
                    span.run = run
                    after = i + 1
                    continue
            after = i + 1
            span.run = run
            run.spans.append(span)
        queued += self._push(run, gap)
        self._lru_size += queued
        self.anonymous_blocks += anonymous
        self.active_blocks -= freed
        if self._queued > self._compact_at:
            self._compact()
        own.reverse()
        return [block for blocks in own for block in blocks]

    def _forget(self, block: Block, key: int) -> None:
        """Remove an evicted or uncached copy of `key` from the index."""
        if self._index.get(key) is block:
            copies = self._copies.get(key)
            if copies:
                self._index[key] = copies.pop(0)
                if not copies:
                    del self._copies[key]
            else:
                del self._index[key]
                if self.listener is not None:
                    self.listener("removed", key)
                if self.tier_hook is not None:
                    self.tier_hook("removed", key)
        else:
            copies = self._copies[key]
            copies.remove(block)
            if not copies:
                del self._copies[key]

    def check(self) -> None:
        """Assert the conservation invariants (for tests)."""
        in_lru = queued = 0
        live: set[int] = set()
        for entry in self._lru:
            if type(entry) is Gap:
                in_lru += entry.count
                continue
            assert isinstance(entry, Run) and entry.start < len(entry.spans)
            queued += len(entry.spans) - entry.start
            for span in entry.spans[entry.start:]:
                if span.run is entry:
                    assert span.refs == 0 and span.blocks and id(span) not in live, "one live entry per free span"
                    live.add(id(span))
                    in_lru += len(span.blocks)
        assert in_lru == self._lru_size, (in_lru, self._lru_size)
        assert queued == self._queued, (queued, self._queued)
        resident = list(self._index.items()) + [(k, b) for k, c in self._copies.items() for b in c]
        position: dict[int, int] = {}  # id(block) -> its place in its span
        for key, block in resident:
            span = block.span
            if id(block) not in position:
                assert span.keys is not None and len(span.keys) == len(span.blocks)
                assert all(member.span is span for member in span.blocks)
                position.update((id(member), i) for i, member in enumerate(span.blocks))
            assert span.keys is not None and span.keys[position[id(block)]] == key
            assert (span.refs > 0 and span.run is None) or (span.refs == 0 and id(span) in live)
        assert self.anonymous_blocks >= 0 and self.active_blocks >= 0
        assert self.anonymous_blocks + self._lru_size + self.active_blocks == self.num_blocks, (
            self.anonymous_blocks, self._lru_size, self.active_blocks, self.num_blocks)


def _joined(first: Span, second: Span) -> Span:
    """One span of two free cached spans of consecutive positions released together (`first`
    before `second`): the larger takes in the smaller's blocks, so a long session's history
    stays one span instead of one per turn. Eviction order is unchanged (a span, like the run
    of spans a release makes, is evicted from its last block down)."""
    assert first.keys is not None and second.keys is not None and not first.refs and not second.refs
    if len(first.blocks) >= len(second.blocks):
        first.blocks += second.blocks
        first.keys += second.keys
        moved, span = second.blocks, first
    else:
        second.blocks[:0] = first.blocks
        second.keys[:0] = first.keys
        moved, span = first.blocks, second
    for block in moved:
        block.span = span
    return span

