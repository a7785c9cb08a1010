"""The SGLang KV store of one rank: a page pool and a radix tree over token content.

Pages hold `page` tokens each; the pool has `total_pages` of them. A page is in exactly one of
four states: free, in the tree and unlocked (*evictable*), in the tree and locked by a request
(*protected*), or held by a request outside the tree (*private*: its uncached tail). The tree
only ever holds whole pages.

Token content is never expanded into per-token objects. A request's tokens are a `TokenSeq`: its
runs (`engine.cache.token_seq`; ``(v, c > 0)`` = c copies of v, ``(v, -c)`` = v, v+1, …)
with cumulative start offsets. A tree edge is a short list of *segments* ``(seq, start, end)``
naming token ranges of the sequences that inserted them, so an edge of 10 000 tokens is one
tuple. Edges are compared run by run (`TokenSeq.common`), which is O(runs), not O(tokens).

Tree semantics (the reference's radix cache, as observable through scheduling):

* children are found by their first page; a match walks page by page, splitting an edge on a
  partial match (the split-off prefix becomes a new parent node, the original node keeps the
  suffix, its lock count and its access time);
* a locking match touches every fully matched node and locks the deepest node (lock counts are
  kept along the whole path to the root);
* an insert from a request's locked node first touches that node's path, then extends a leaf in
  place when it is unlocked (or is the request's own node, locked only by it), otherwise
  descends through fully matching children, splits on a partial match and adds a child for the
  rest; pages that were already in the tree are duplicates and go back to the pool;
* eviction repeatedly takes the unlocked leaf with the oldest access time (ties by node id);
  when only part of it is needed it cuts just the newest pages off its end, otherwise it removes
  the node, and a parent that becomes an unlocked leaf is indexed with its own older time.

Access times come from a per-cache logical clock (one tick per match, per insert and per new
child), which orders events exactly as the reference's monotonic host clock does.

**KV events.** With a `listener` (the KV router's indexer), the cache reports every page that
enters the tree (``("stored", key)``) and every page it evicts (``("removed", key)``), at page
granularity. A page's key is the chained block key (`servesim.engine.cache.blocks`) of the tree path
up to and including it, which is the inserting sequence's own key for that page — a node's
tokens sit at the same depth as they do in the sequence that inserted them — so the keys are
exactly those the router computes for a request's blocks. Pages beyond a sequence's
`shared_pages` (content no other request can have) are never reported. Without a listener no
key is computed.
"""

from __future__ import annotations

import heapq

from servesim.engine.cache.kv import KvListener
from servesim.engine.cache.token_seq import Segment, TokenSeq, segs_common, segs_split


def _append_tokens(node: Node, seq: TokenSeq, start: int, end: int) -> None:
    """Add tokens [start, end) of `seq` at the end of `node`, merging with its last segment
    when that one ends where they start."""
    s, a, b = node.segs[-1]
    if s is seq and b == start:
        node.segs[-1] = (s, a, end)
    else:
        node.segs.append((seq, start, end))
    node.length += end - start


class Node:
    """A radix-tree node: the edge from its parent (token segments), lock count, access time."""

    __slots__ = ("parent", "children", "segs", "length", "lock", "time", "nid", "indexed")

    def __init__(self, parent: Node | None, segs: list[Segment], length: int, time: int, nid: int) -> None:
        self.parent = parent
        self.children: dict[int, list[Node]] = {}
        """Children by the first token of their edge (siblings may share it when page > 1)."""
        self.segs = segs
        self.length = length
        self.lock = 0
        self.time = time
        self.nid = nid
        self.indexed = 0
        """Non-zero while this node is an indexed evictable leaf (the id of its heap entry)."""

    def first_token(self) -> int:
        s, a, _ = self.segs[0]
        return s.token_at(a)


class RadixCache:
    """Page pool plus radix tree of one rank (see the module docstring)."""

    def __init__(self, total_pages: int, page: int, caching: bool = True) -> None:
        self.page = page
        self.total_pages = total_pages
        self.free_pages = total_pages
        """Free pages."""
        self.caching = caching
        self.evictable_tokens = 0
        """Tokens in unlocked tree nodes."""
        self.protected_tokens = 0
        """Tokens in locked tree nodes."""
        self._clock = 0
        self._ids = 0
        self._heap: list[tuple[int, int, int, Node]] = []
        self.root = self._new_node(None, [], 0, 0)
        self.listener: KvListener | None = None
        """Told of every page stored in and evicted from the tree (see the module docstring)."""

    # -- clock, nodes, index -------------------------------------------------------------------

    def tick(self) -> int:
        """The next logical access time."""
        self._clock += 1
        return self._clock

    def _new_node(self, parent: Node | None, segs: list[Segment], length: int, time: int) -> Node:
        self._ids += 1
        return Node(parent, segs, length, time, self._ids)

    def _index(self, node: Node) -> None:
        """Index an unlocked leaf as an eviction candidate."""
        self._ids += 1
        node.indexed = self._ids
        heapq.heappush(self._heap, (node.time, node.nid, self._ids, node))

    def _unindex(self, node: Node) -> bool:
        was = node.indexed != 0
        node.indexed = 0
        return was

    def _touch(self, node: Node, now: int) -> None:
        """Set a node's access time, re-indexing it if it is an eviction candidate."""
        node.time = now
        if node.indexed:
            self._index(node)

    def _announce(self, kind: str, seq: TokenSeq, start: int, end: int) -> None:
        """Report the shareable pages of tokens [start, end) of `seq` (page-aligned; the tree
        depth of a node's tokens equals their position in the sequence that inserted them)."""
        listener = self.listener
        page = self.page
        first, stop = start // page, min(end // page, seq.shared_pages)
        if listener is None or stop <= first:
            return
        keys = seq.page_keys(page, stop)
        for i in range(first, stop):
            listener(kind, keys[i])

    def _announce_removed(self, segs: list[Segment]) -> None:
        for s, a, b in segs:
            self._announce("removed", s, a, b)

    # -- locks ---------------------------------------------------------------------------------

    def inc_lock(self, node: Node) -> None:
        """Lock `node` and its ancestors (one reference each)."""
        while node.parent is not None:
            if node.lock == 0:
                self._unindex(node)
                self.evictable_tokens -= node.length
                self.protected_tokens += node.length
            node.lock += 1
            node = node.parent

    def dec_lock(self, node: Node) -> None:
        """Release one lock reference on `node` and its ancestors."""
        while node.parent is not None:
            node.lock -= 1
            if node.lock == 0:
                self.protected_tokens -= node.length
                self.evictable_tokens += node.length
                if not node.children:
                    self._index(node)
            node = node.parent

    # -- lookups -------------------------------------------------------------------------------

    def _child(self, node: Node, seq: TokenSeq, pos: int, limit: int) -> tuple[Node | None, int]:
        """The child whose first page matches `seq` at `pos`, and the page-aligned match length."""
        candidates = node.children.get(seq.token_at(pos))
        if candidates:
            page = self.page
            for child in candidates:
                c = segs_common(child.segs, seq, pos, min(limit, child.length))
                c -= c % page
                if c:
                    return child, c
        return None, 0

    def match_len(self, seq: TokenSeq, n: int) -> int:
        """Read-only: tokens of `seq[:n]` (n page-aligned) found in the tree."""
        if not self.caching:
            return 0
        node, pos = self.root, 0
        while pos < n:
            child, c = self._child(node, seq, pos, n - pos)
            if child is None:
                break
            pos += c
            if c < child.length:
                break
            node = child
        return pos

    def match_lock(self, seq: TokenSeq, n: int) -> tuple[int, Node]:
        """Match `seq[:n]` (n page-aligned), touch the matched nodes and lock the deepest one."""
        if not self.caching:
            return 0, self.root
        now = self.tick()
        node, pos = self.root, 0
        node.time = now
        pending: Node | None = None
        while pos < n:
            child, c = self._child(node, seq, pos, n - pos)
            if child is None:
                break
            if pending is not None:
                self._touch(pending, now)
                pending = None
            pos += c
            if c < child.length:
                node = self._split(child, c)
                break
            node = pending = child
        if pending is not None:
            self._unindex(pending)
            pending.time = now
        self.inc_lock(node)
        return pos, node

    # -- structure -----------------------------------------------------------------------------

    def _split(self, child: Node, k: int) -> Node:
        """Split `child`'s edge after `k` tokens; the new parent node gets the prefix."""
        parent = child.parent
        assert parent is not None
        head, tail = segs_split(child.segs, k)
        inter = self._new_node(parent, head, k, child.time)
        inter.lock = child.lock
        key = child.first_token()
        siblings = parent.children[key]
        siblings[siblings.index(child)] = inter
        child.segs = tail
        child.length -= k
        child.parent = inter
        inter.children[child.first_token()] = [child]
        return inter

    def _add_child(self, parent: Node, seq: TokenSeq, start: int, end: int) -> Node:
        node = self._new_node(parent, [(seq, start, end)], end - start, self.tick())
        self._unindex(parent)
        parent.children.setdefault(seq.token_at(start), []).append(node)
        self.evictable_tokens += end - start
        self._index(node)
        if self.listener is not None:
            self._announce("stored", seq, start, end)
        return node

    def _extend_leaf(self, node: Node, seq: TokenSeq, start: int, end: int, now: int) -> None:
        _append_tokens(node, seq, start, end)
        if node.lock == 0:
            self.evictable_tokens += end - start
        else:
            self.protected_tokens += end - start
        node.time = now
        if node.indexed:
            self._index(node)
        if self.listener is not None:
            self._announce("stored", seq, start, end)

    def grow_own_leaf(self, node: Node, seq: TokenSeq, start: int, end: int) -> bool:
        """Fast path of `insert` for a leaf locked only by the inserting request (a decoding
        request caching its new pages): extend it in place. False if `node` is not such a leaf."""
        if node.lock != 1 or node.children or node.parent is None:
            return False
        self._clock += 1
        now = self._clock
        n: Node | None = node
        while n is not None:  # a locked node's ancestors are locked, so none is indexed
            n.time = now
            n = n.parent
        _append_tokens(node, seq, start, end)
        self.protected_tokens += end - start
        if self.listener is not None:
            self._announce("stored", seq, start, end)
        return True

    def insert(self, start_node: Node, seq: TokenSeq, start: int, end: int) -> tuple[Node, int]:
        """Insert `seq[start:end]` below `start_node` (the path of `seq[:start]`, locked by the
        inserting request). Returns the node ending at `end` and how many tokens were new."""
        if start >= end:
            return start_node, 0
        self._clock += 1
        now = self._clock
        up: Node | None = start_node
        while up is not None:
            up.time = now
            if up.indexed:
                self._index(up)
            up = up.parent
        if start_node.lock == 1 and not start_node.children and start_node.parent is not None:
            self._extend_leaf(start_node, seq, start, end, now)
            return start_node, end - start
        node, pos = start_node, start
        while pos < end:
            if (node.parent is not None and not node.children
                    and (node.lock == 0 or (node is start_node and node.lock == 1))):
                self._extend_leaf(node, seq, pos, end, now)
                return node, end - pos
            child, c = self._child(node, seq, pos, end - pos)
            if child is None:
                return self._add_child(node, seq, pos, end), end - pos
            pos += c
            if c == child.length:
                node = child
                self._touch(child, now)
                continue
            inter = self._split(child, c)
            if pos < end:
                return self._add_child(inter, seq, pos, end), end - pos
            return inter, 0
        return node, 0

    # -- pages ---------------------------------------------------------------------------------

    def evict(self, tokens: int) -> int:
        """Evict at least `tokens` tokens (whole pages) from unlocked leaves, LRU first."""
        evicted = 0
        page = self.page
        heap = self._heap
        while evicted < tokens and heap:
            _, _, entry, victim = heapq.heappop(heap)
            if victim.indexed != entry:
                continue
            victim.indexed = 0
            pages = -(-(tokens - evicted) // page)
            if pages * page < victim.length:
                cut = pages * page
                s, a, b = victim.segs[-1]
                if cut < b - a:
                    victim.segs[-1] = (s, a, b - cut)
                    if self.listener is not None:
                        self._announce("removed", s, b - cut, b)
                else:
                    victim.segs, gone = segs_split(victim.segs, victim.length - cut)
                    if self.listener is not None:
                        self._announce_removed(gone)
                victim.length -= cut
                self._release(cut)
                evicted += cut
                self._index(victim)
                continue
            parent = victim.parent
            assert parent is not None
            key = victim.first_token()
            siblings = parent.children[key]
            siblings.remove(victim)
            if not siblings:
                del parent.children[key]
            if self.listener is not None:
                self._announce_removed(victim.segs)
            self._release(victim.length)
            evicted += victim.length
            if parent.parent is not None and not parent.children and parent.lock == 0:
                self._index(parent)
        return evicted

    def _release(self, tokens: int) -> None:
        self.evictable_tokens -= tokens
        self.free_pages += tokens // self.page

    def reserve(self, pages: int) -> bool:
        """Take `pages` free pages, evicting unlocked leaves if needed; False if impossible."""
        if pages <= self.free_pages:
            self.free_pages -= pages
            return True
        if pages * self.page > self.free_pages * self.page + self.evictable_tokens:
            return False
        self.evict((pages - self.free_pages) * self.page)
        if pages > self.free_pages:
            return False
        self.free_pages -= pages
        return True

    def give_back(self, pages: int) -> None:
        """Return pages a request held privately to the pool."""
        self.free_pages += pages


    # -- pool counters (what other stages read) ----------------------------------------------

    @property
    def num_blocks(self) -> int:
        """Pages of the pool."""
        return self.total_pages

    @property
    def active_blocks(self) -> int:
        """Pages in use by requests: locked in the tree or held privately."""
        return self.total_pages - self.free_pages - self.evictable_tokens // self.page

    # -- checks --------------------------------------------------------------------------------

    def check(self) -> tuple[int, int]:
        """Recompute the tree's evictable/protected sizes and lock counts from scratch.

        Returns (evictable, protected) tokens; raises AssertionError on any inconsistency.
        """
        evictable = protected = 0
        stack = list(self._children_of(self.root))
        while stack:
            node = stack.pop()
            assert node.length > 0 and node.length % self.page == 0
            assert node.length == sum(b - a for _, a, b in node.segs)
            assert node.lock >= sum(c.lock for c in self._children_of(node)), "locks cover the path"
            if node.lock:
                protected += node.length
            else:
                evictable += node.length
            assert bool(node.indexed) == (node.lock == 0 and not node.children), "leaf index"
            stack.extend(self._children_of(node))
        assert (evictable, protected) == (self.evictable_tokens, self.protected_tokens), "size counters"
        assert 0 <= self.free_pages <= self.total_pages
        return evictable, protected

    def cached_keys(self) -> set[int]:
        """Keys of every shareable page in the tree: what KV events have announced (tests)."""
        keys: set[int] = set()
        page = self.page
        stack = list(self._children_of(self.root))
        while stack:
            node = stack.pop()
            for s, a, b in node.segs:
                stop = min(b // page, s.shared_pages)
                if stop > a // page:
                    keys.update(s.page_keys(page, stop)[a // page:stop])
            stack.extend(self._children_of(node))
        return keys

    def release(self) -> None:
        """Unlink every node from its parent and children (the tree's reference cycles), so the
        tree is freed as soon as the rank is, without waiting for a full garbage collection."""
        stack = [self.root]
        while stack:
            node = stack.pop()
            stack.extend(self._children_of(node))
            node.children = {}
            node.parent = None

    @staticmethod
    def _children_of(node: Node) -> list[Node]:
        return [c for group in node.children.values() for c in group]
