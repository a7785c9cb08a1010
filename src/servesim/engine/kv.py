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
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable


class Block:
    """A block holding cached content; `key` is None for content private to one request.

    `refs` counts the requests holding it; -1 marks a private block that was evicted. `queued`
    counts its entries in the pool's LRU queue (the last one is its place; earlier ones are
    stale, as is the last one while `refs` > 0).
    """

    __slots__ = ("key", "refs", "queued")

    def __init__(self, key: int | None, refs: int = 1) -> None:
        self.key = key
        self.refs = refs
        self.queued = 0


class Gap:
    """A run of free blocks whose content nobody can reuse, in the LRU."""

    __slots__ = ("count",)

    def __init__(self, count: int) -> None:
        self.count = count


KvListener = Callable[[str, int], None]
"""Called with ("stored", key) when a key becomes resident and ("removed", key) when it leaves."""


class BlockPool:
    """The blocks of one rank and the prefix-cache index over them.

    Free cached blocks wait in a queue in LRU order (head first). Reviving a block does not
    take it out of the queue: its entry goes stale and is skipped when it reaches the head (or
    dropped when the queue is compacted).
    """

    def __init__(self, num_blocks: int, caching: bool = True) -> None:
        self.num_blocks = num_blocks
        self.caching = caching
        self.anonymous_blocks = num_blocks
        self.active_blocks = 0
        """Blocks held by some request (private, or cached with refs > 0)."""
        self._index: dict[int, Block] = {}
        self._copies: dict[int, list[Block]] = {}
        self._lru: deque[Block | Gap] = deque()
        self._lru_size = 0
        """Free blocks in the LRU (cached blocks and gaps)."""
        self._compact_at = max(4 * num_blocks, 1024)
        self.listener: KvListener | None = None

    # -- queries ----------------------------------------------------------------------------

    @property
    def free_blocks(self) -> int:
        """Blocks an allocation could use: anonymous plus evictable."""
        return self.anonymous_blocks + self._lru_size

    def lookup(self, key: int) -> Block | None:
        return self._index.get(key)

    def prefix_hits(self, keys: list[int], limit: int) -> list[Block]:
        """Oldest resident copies of the leading keys, at most `limit` blocks."""
        hits: list[Block] = []
        if not self.caching:
            return hits
        get = self._index.get
        for key in keys[:limit]:
            block = get(key)
            if block is None:
                break
            hits.append(block)
        return hits

    # -- mutations --------------------------------------------------------------------------

    def pin(self, block: Block) -> None:
        """Take a reference to a resident block (reviving it from the LRU if free)."""
        if block.refs == 0:
            self._lru_size -= 1
            self.active_blocks += 1
        block.refs += 1

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
        lru = self._lru
        index = self._index
        self._lru_size -= need
        while need:
            entry = lru[0]
            if isinstance(entry, Gap):
                if entry.count > need:
                    entry.count -= need
                    return
                need -= entry.count
                lru.popleft()
                continue
            lru.popleft()
            entry.queued -= 1
            if entry.queued or entry.refs:
                continue  # a stale entry
            need -= 1
            key = entry.key
            if key is None:
                entry.refs = -1
            elif index.get(key) is entry and key not in self._copies:
                del index[key]
                if self.listener is not None:
                    self.listener("removed", key)
            else:
                self._forget(entry)

    def store(self, key: int) -> Block:
        """Turn one private block of the caller into a cached block holding `key`."""
        block = Block(key)
        if key in self._index:
            self._copies.setdefault(key, []).append(block)
        else:
            self._index[key] = block
            if self.listener is not None:
                self.listener("stored", key)
        return block

    def store_completed(self, keys: list[int], lease: list[Block | None], first: int, stop: int) -> None:
        """`store` each private block of ``lease[first:stop]`` under its key in `keys`."""
        index = self._index
        for b in range(first, stop):
            if lease[b] is None:
                key = keys[b]
                if key in index or self.listener is not None:
                    lease[b] = self.store(key)
                else:
                    lease[b] = index[key] = Block(key)

    def release(self, lease: list[Block | None], complete: int, *, keep_private: bool = False,
                private_from: int = 0) -> list[Block]:
        """Drop a request's hold on its lease, last block first.

        Entries below index `complete` are full blocks; a None entry there is private cached
        content, which goes to the LRU — as a keyless `Block` the owner may reuse when
        `keep_private` (a preempted request), else as anonymous LRU capacity. Returns the owner's
        private blocks (in block order) when `keep_private`. `private_from` is where the lease
        is likely all None from (it is checked), so those entries are counted, not visited.
        """
        held = len(lease)
        caching = self.caching
        split = held
        gap = queued = freed = anonymous = 0
        if not keep_private:
            split = private_from if private_from < held else held
            if split < held and (lease[split:] if split else lease).count(None) != held - split:
                split = held
            freed = held - split
            top = complete if complete < held else held
            gap = top - split if caching and top > split else 0
            anonymous = freed - gap
        lru = self._lru
        own: list[Block] = []
        for index in range(split - 1, -1, -1):
            block = lease[index]
            if block is None:
                freed += 1
                if index >= complete or not caching:
                    anonymous += 1
                    continue
                if not keep_private:
                    gap += 1
                    continue
                block = Block(None, 0)
                own.append(block)
            else:
                refs = block.refs - 1
                block.refs = refs
                if refs:
                    continue
                freed += 1
                if block.key is None:
                    if not keep_private:
                        gap += 1
                        continue
                    own.append(block)
                elif not caching:
                    self._forget(block)
                    anonymous += 1
                    continue
            if gap:
                self._push_gap(gap)
                queued += gap
                gap = 0
            block.queued += 1
            lru.append(block)
            queued += 1
        if gap:
            self._push_gap(gap)
            queued += gap
        self._lru_size += queued
        self.anonymous_blocks += anonymous
        self.active_blocks -= freed
        if len(lru) > self._compact_at:
            self._compact()
        own.reverse()
        return own

    def _push_gap(self, count: int) -> None:
        """Append `count` anonymous LRU blocks at the tail (the caller counts them)."""
        lru = self._lru
        last = lru[-1] if lru else None
        if type(last) is Gap:
            last.count += count
        else:
            lru.append(Gap(count))

    def _compact(self) -> None:
        """Drop the queue's stale entries (keeping its order)."""
        live: deque[Block | Gap] = deque()
        for entry in self._lru:
            if isinstance(entry, Gap):
                last = live[-1] if live else None
                if type(last) is Gap:
                    last.count += entry.count
                else:
                    live.append(entry)
                continue
            entry.queued -= 1
            if not entry.queued and not entry.refs:
                entry.queued = 1
                live.append(entry)
        self._lru = live

    def _forget(self, block: Block) -> None:
        """Remove an evicted or uncached copy from the index."""
        key = block.key
        if key is None:
            block.refs = -1
            return
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
        else:
            copies = self._copies[key]
            copies.remove(block)
            if not copies:
                del self._copies[key]

    def check(self) -> None:
        """Assert the conservation invariants (for tests)."""
        seen: dict[int, int] = {}
        in_lru = 0
        for entry in self._lru:
            if type(entry) is Gap:
                in_lru += entry.count
                continue
            assert isinstance(entry, Block)
            seen[id(entry)] = seen.get(id(entry), 0) + 1
            if seen[id(entry)] == entry.queued and entry.refs == 0:
                in_lru += 1
        assert in_lru == self._lru_size, (in_lru, self._lru_size)
        resident = list(self._index.values()) + [b for c in self._copies.values() for b in c]
        assert all(b.refs > 0 or (b.refs == 0 and b.queued > 0) for b in resident)
        assert self.anonymous_blocks >= 0 and self.active_blocks >= 0
        assert self.anonymous_blocks + self._lru_size + self.active_blocks == self.num_blocks, (
            self.anonymous_blocks, self._lru_size, self.active_blocks, self.num_blocks)
