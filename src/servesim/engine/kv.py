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

    `refs` counts the requests holding it; -1 marks a private block that was evicted. While the
    block is free (``refs == 0``), `stamp` names the release whose LRU run holds its place; it
    is 0 while the block is held, so the block's entries in older runs are stale.
    """

    __slots__ = ("key", "refs", "stamp")

    def __init__(self, key: int | None, refs: int = 1) -> None:
        self.key = key
        self.refs = refs
        self.stamp = 0


class Gap:
    """A run of free blocks whose content nobody can reuse, in the LRU."""

    __slots__ = ("count",)

    def __init__(self, count: int) -> None:
        self.count = count


class Run:
    """Free blocks released together, in eviction order, in the LRU; `start` is the next one.

    An entry is live while its block is free and still carries the run's `stamp`.
    """

    __slots__ = ("blocks", "start", "stamp")

    def __init__(self, blocks: list[Block], stamp: int) -> None:
        self.blocks = blocks
        self.start = 0
        self.stamp = stamp


KvListener = Callable[[str, int], None]
"""Called with ("stored", key) when a key becomes resident and ("removed", key) when it leaves."""


class BlockPool:
    """The blocks of one rank and the prefix-cache index over them.

    Free cached blocks wait in a queue of runs and gaps in LRU order (head first); each release
    appends its blocks as one run. Reviving a block does not take it out of its run: the entry
    goes stale and is skipped when it reaches the head (or dropped when the queue is compacted).
    """

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
        """Free blocks in the LRU (live run entries and gaps)."""
        self._queued = 0
        """Run entries in the LRU, stale ones included."""
        self._stamp = 0
        """The last release's stamp."""
        self._compact_at = max(4 * num_blocks, 1024)
        self._spare: list[Block] = []
        """Evicted shareable blocks, for reuse."""
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

    def pin_all(self, blocks: list[Block]) -> None:
        """Take a reference to each of `blocks`, all resident (reviving free ones from the LRU)."""
        revived = 0
        for block in blocks:
            if block.refs == 0:
                revived += 1
                block.stamp = 0
            block.refs += 1
        self._lru_size -= revived
        self.active_blocks += revived

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
                if entry.count > need:
                    entry.count -= need
                    return
                need -= entry.count
                lru.popleft()
                continue
            assert isinstance(entry, Run)
            need = self._evict_from(entry, need)

    def _evict_from(self, run: Run, need: int) -> int:
        """Evict up to `need` live blocks from the head run; returns how many are still needed."""
        blocks, start, stamp = run.blocks, run.start, run.stamp
        stop = start + need
        gone = blocks[start:stop]
        for block in gone:
            if block.stamp != stamp:
                gone = [b for b in blocks[start:] if b.stamp == stamp][:need]
                stop = blocks.index(gone[-1], start) + 1 if gone else len(blocks)
                break
        else:
            stop = min(stop, len(blocks))
        self._queued -= stop - start
        if stop == len(blocks):
            self._lru.popleft()
        else:
            run.start = stop
        self._drop(gone)
        return need - len(gone)

    def _drop(self, blocks: list[Block]) -> None:
        """Take evicted blocks' content out of the cache."""
        index = self._index
        if self._copies or self.listener is not None:
            for block in blocks:
                self._forget(block)
            return
        spare = self._spare
        for block in blocks:
            key = block.key
            if key is None:
                block.refs = -1
            else:
                del index[key]
                spare.append(block)
        if len(spare) > self.num_blocks:
            del spare[self.num_blocks:]

    def _new_blocks(self, keys: list[int]) -> list[Block]:
        """Blocks holding `keys`, each held once (evicted ones are reused; no one else holds
        an evicted shareable block)."""
        spare = self._spare
        reuse = len(spare) - min(len(keys), len(spare))
        blocks = spare[reuse:]
        del spare[reuse:]
        for block, key in zip(blocks, keys, strict=False):
            block.key = key
            block.refs = 1
            block.stamp = 0
        if len(blocks) < len(keys):
            blocks += [Block(key) for key in keys[len(blocks):]]
        return blocks

    def store(self, key: int) -> Block:
        """Turn one private block of the caller into a cached block holding `key`."""
        block = self._new_blocks([key])[0]
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
        fresh = keys[first:stop]
        if (self.listener is None and lease[first:stop].count(None) == stop - first
                and index.keys().isdisjoint(fresh)):
            size = len(index)
            blocks = self._new_blocks(fresh)
            index.update(zip(fresh, blocks, strict=True))
            if len(index) == size + len(fresh):
                lease[first:stop] = blocks
                return
            for key in fresh:  # a key repeats within the chain: store one by one
                index.pop(key, None)
            self._spare += blocks
        for b in range(first, stop):
            if lease[b] is None:
                lease[b] = self.store(keys[b])

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
        self._stamp += 1
        stamp = self._stamp
        run: list[Block] = []
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
                queued += self._push(run, stamp, gap)
                run = []
                gap = 0
            block.stamp = stamp
            run.append(block)
        queued += self._push(run, stamp, gap)
        self._lru_size += queued
        self.anonymous_blocks += anonymous
        self.active_blocks -= freed
        if self._queued > self._compact_at:
            self._compact()
        own.reverse()
        return own

    def _push(self, run: list[Block], stamp: int, gap: int) -> int:
        """Append a run of blocks, then a gap of `gap` anonymous blocks, at the LRU's tail;
        returns how many free blocks that adds."""
        lru = self._lru
        if run:
            lru.append(Run(run, stamp))
            self._queued += len(run)
        if gap:
            last = lru[-1] if lru else None
            if type(last) is Gap:
                last.count += gap
            else:
                lru.append(Gap(gap))
        return len(run) + gap

    def _compact(self) -> None:
        """Drop the queue's stale entries (keeping its order)."""
        live: deque[Run | Gap] = deque()
        queued = 0
        for entry in self._lru:
            if type(entry) is Run:
                stamp = entry.stamp
                blocks = [b for b in entry.blocks[entry.start:] if b.stamp == stamp]
                if not blocks:
                    continue
                queued += len(blocks)
                entry = Run(blocks, stamp)
            last = live[-1] if live else None
            if type(entry) is Gap and type(last) is Gap:
                last.count += entry.count
            else:
                live.append(entry)
        self._lru = live
        self._queued = queued

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
        in_lru = queued = 0
        live: set[int] = set()
        for entry in self._lru:
            if type(entry) is Gap:
                in_lru += entry.count
                continue
            assert isinstance(entry, Run) and entry.start < len(entry.blocks)
            queued += len(entry.blocks) - entry.start
            for block in entry.blocks[entry.start:]:
                if block.stamp == entry.stamp:
                    assert block.refs == 0 and id(block) not in live, "one live entry per free block"
                    live.add(id(block))
        in_lru += len(live)
        assert in_lru == self._lru_size, (in_lru, self._lru_size)
        assert queued == self._queued, (queued, self._queued)
        resident = list(self._index.values()) + [b for c in self._copies.values() for b in c]
        assert all(b.refs > 0 or (b.refs == 0 and id(b) in live) for b in resident)
        assert all(b.stamp == 0 for b in resident if b.refs > 0)
        assert self.anonymous_blocks >= 0 and self.active_blocks >= 0
        assert self.anonymous_blocks + self._lru_size + self.active_blocks == self.num_blocks, (
            self.anonymous_blocks, self._lru_size, self.active_blocks, self.num_blocks)
