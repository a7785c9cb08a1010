"""KV block pool with prefix caching (vLLM / TRT-LLM style), per scheduler rank.

Capacity is `num_blocks`. A block is one of:

* anonymous free capacity (never used, or a released private block) — only counted;
* a private block held by a request (a partial last block, or any block without caching) —
  only counted, in `Lease.private`;
* a cached block (`Block`): a full block with a content key and a reference count. With
  refcount 0 it is *free cached*: evictable, in LRU order (least recently released first).

Allocation takes anonymous capacity first, then evicts the LRU head. Releases go tail-first,
so a finished request's last blocks are evicted before its first ones. Several physical copies
of one key may exist; lookups use the oldest one.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable


class Block:
    """A cached full block."""

    __slots__ = ("key", "refs")

    def __init__(self, key: int) -> None:
        self.key = key
        self.refs = 1


KvListener = Callable[[str, int], None]
"""Called with ("stored", key) when a key becomes resident and ("removed", key) when it leaves."""


class BlockPool:
    """The blocks of one rank and the prefix-cache index over them."""

    def __init__(self, num_blocks: int, caching: bool = True) -> None:
        self.num_blocks = num_blocks
        self.caching = caching
        self.anonymous = num_blocks
        self.active = 0
        """Blocks referenced by some request (private or cached with refs > 0)."""
        self._index: dict[int, Block] = {}
        self._copies: dict[int, list[Block]] = {}
        self._lru: OrderedDict[Block, None] = OrderedDict()
        self.listener: KvListener | None = None

    # -- queries ----------------------------------------------------------------------------

    @property
    def free(self) -> int:
        """Blocks an allocation could use: anonymous plus evictable."""
        return self.anonymous + len(self._lru)

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
            self.active += 1
        block.refs += 1

    def allocate(self, count: int) -> bool:
        """Reserve `count` private blocks; False (and nothing changes) if they do not fit."""
        if count > self.anonymous + len(self._lru):
            return False
        take = count if count <= self.anonymous else self.anonymous
        self.anonymous -= take
        for _ in range(count - take):
            block, _ = self._lru.popitem(last=False)
            self._forget(block)
        self.active += count
        return True

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

    def release(self, blocks: list[Block | None]) -> None:
        """Drop one reference per entry, last entry first (None = a private block)."""
        lru = self._lru
        freed_private = 0
        for block in reversed(blocks):
            if block is None:
                freed_private += 1
                continue
            block.refs -= 1
            if block.refs == 0:
                self.active -= 1
                if self.caching:
                    lru[block] = None
                else:
                    self._forget(block)
                    self.anonymous += 1
        self.anonymous += freed_private
        self.active -= freed_private

    def _forget(self, block: Block) -> None:
        """Remove an evicted or uncached copy from the index."""
        key = block.key
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
        resident = {id(b): b for b in self._index.values()}
        for copies in self._copies.values():
            for b in copies:
                resident[id(b)] = b
        free_cached = sum(1 for b in resident.values() if b.refs == 0)
        assert free_cached == len(self._lru), (free_cached, len(self._lru))
        assert self.anonymous >= 0 and self.active >= 0
        assert self.anonymous + len(self._lru) + self.active == self.num_blocks, (
            self.anonymous, len(self._lru), self.active, self.num_blocks)
