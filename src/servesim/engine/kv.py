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

from collections import OrderedDict
from collections.abc import Callable


class Block:
    """A block holding cached content; `key` is None for content private to one request.

    `refs` counts the requests holding it; -1 marks a private block that was evicted.
    """

    __slots__ = ("key", "refs")

    def __init__(self, key: int | None, refs: int = 1) -> None:
        self.key = key
        self.refs = refs


class Gap:
    """A run of free blocks whose content nobody can reuse, in the LRU."""

    __slots__ = ("count",)

    def __init__(self, count: int) -> None:
        self.count = count


KvListener = Callable[[str, int], None]
"""Called with ("stored", key) when a key becomes resident and ("removed", key) when it leaves."""


class BlockPool:
    """The blocks of one rank and the prefix-cache index over them."""

    def __init__(self, num_blocks: int, caching: bool = True) -> None:
        self.num_blocks = num_blocks
        self.caching = caching
        self.anonymous_blocks = num_blocks
        self.active_blocks = 0
        """Blocks held by some request (private, or cached with refs > 0)."""
        self._index: dict[int, Block] = {}
        self._copies: dict[int, list[Block]] = {}
        self._lru: OrderedDict[Block | Gap, None] = OrderedDict()
        self._lru_size = 0
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
        index = self._index
        for key in keys[:limit]:
            block = index.get(key)
            if block is None:
                break
            hits.append(block)
        return hits

    # -- mutations --------------------------------------------------------------------------

    def pin(self, block: Block) -> None:
        """Take a reference to a resident block (reviving it from the LRU if free)."""
        if block.refs == 0:
            del self._lru[block]
            self._lru_size -= 1
            self.active_blocks += 1
        block.refs += 1

    def allocate(self, count: int) -> bool:
        """Reserve `count` private blocks; False (and nothing changes) if they do not fit."""
        if count > self.anonymous_blocks + self._lru_size:
            return False
        take = count if count <= self.anonymous_blocks else self.anonymous_blocks
        self.anonymous_blocks -= take
        self.active_blocks += count
        need = count - take
        if need:
            self._evict(need)
        return True

    def _evict(self, need: int) -> None:
        lru = self._lru
        self._lru_size -= need
        while need:
            entry = next(iter(lru))
            if isinstance(entry, Gap):
                if entry.count > need:
                    entry.count -= need
                    return
                need -= entry.count
                lru.popitem(last=False)
            else:
                lru.popitem(last=False)
                self._forget(entry)
                need -= 1

    def store(self, key: int) -> Block:
        """Turn one private block of the caller into a cached block holding `key`."""
        block = Block(key)
        first = self._index.get(key)
        if first is None:
            self._index[key] = block
            if self.listener is not None:
                self.listener("stored", key)
        else:
            self._copies.setdefault(key, []).append(block)
        return block

    def release(self, lease: list[Block | None], complete: int, *, keep_private: bool = False) -> list[Block]:
        """Drop a request's hold on its lease, last block first.

        Entries below index `complete` are full blocks; a None entry there is private cached
        content, which goes to the LRU — as a keyless `Block` the owner may reuse when
        `keep_private` (a preempted request), else as anonymous LRU capacity. Returns the owner's
        private blocks (in block order) when `keep_private`.
        """
        if not keep_private and lease.count(None) == len(lease):
            return self._release_private(len(lease), complete)
        lru = self._lru
        caching = self.caching
        own: list[Block] = []
        gap = 0
        freed = 0
        for index in range(len(lease) - 1, -1, -1):
            block = lease[index]
            if block is None:
                freed += 1
                if index >= complete or not caching:
                    self.anonymous_blocks += 1
                elif keep_private:
                    gap = self._push_gap(gap)
                    block = Block(None, 0)
                    lru[block] = None
                    self._lru_size += 1
                    own.append(block)
                else:
                    gap += 1
                continue
            block.refs -= 1
            if block.refs:
                continue
            freed += 1
            if block.key is None:
                if keep_private:
                    gap = self._push_gap(gap)
                    lru[block] = None
                    self._lru_size += 1
                    own.append(block)
                else:
                    gap += 1
            elif caching:
                gap = self._push_gap(gap)
                lru[block] = None
                self._lru_size += 1
            else:
                self._forget(block)
                self.anonymous_blocks += 1
        self._push_gap(gap)
        self.active_blocks -= freed
        own.reverse()
        return own

    def _release_private(self, held: int, complete: int) -> list[Block]:
        """`release` of a lease of private blocks only: the full ones become anonymous LRU
        capacity (evicted before the cached blocks released after them), the rest free capacity."""
        full = min(held, complete) if self.caching else 0
        self.anonymous_blocks += held - full
        self._push_gap(full)
        self.active_blocks -= held
        return []

    def _push_gap(self, count: int) -> int:
        """Append `count` anonymous LRU blocks at the tail; returns 0."""
        if count:
            lru = self._lru
            last = next(reversed(lru)) if lru else None
            if type(last) is Gap:
                last.count += count
            else:
                lru[Gap(count)] = None
            self._lru_size += count
        return 0

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
        in_lru = sum(e.count if isinstance(e, Gap) else 1 for e in self._lru)
        assert in_lru == self._lru_size, (in_lru, self._lru_size)
        assert all(isinstance(e, Gap) or e.refs == 0 for e in self._lru)
        resident = list(self._index.values()) + [b for c in self._copies.values() for b in c]
        assert all(b.refs > 0 or b in self._lru for b in resident)
        assert self.anonymous_blocks >= 0 and self.active_blocks >= 0
        assert self.anonymous_blocks + self._lru_size + self.active_blocks == self.num_blocks, (
            self.anonymous_blocks, self._lru_size, self.active_blocks, self.num_blocks)
