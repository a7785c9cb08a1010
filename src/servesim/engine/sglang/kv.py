"""SGLang requests and their KV leases on a rank's radix cache.

A lease is the pages a request holds: its cached prefix (tree pages, under one locked node)
followed by private pages for its uncached tail. `PageLeases` is every way a lease changes —
allocation for a prefill chunk, caching the full pages, the move into the tree when a request
finishes, release on retraction or rejection — with the page accounting they need.
"""

from __future__ import annotations

from servesim.engine.handoff import RankHandoff
from servesim.engine.cache.radix import Node, RadixCache
from servesim.engine.request import EngineRequest
from servesim.engine.cache.token_seq import TokenSeq
from servesim.traffic.workload import output_runs


class SgRequest:
    """A request inside an SGLang rank: its content and KV lease."""

    __slots__ = ("req", "seq", "length", "materialized", "pages", "cached", "node", "lpm_key")

    def __init__(self, req: EngineRequest) -> None:
        self.req = req
        self.length = req.prompt_len + req.generated
        """Known tokens: the prompt and the tokens generated so far."""
        runs = req.prompt_runs + output_runs(req.output_base, req.max_output, req.output_ids)
        self.seq = TokenSeq(runs, req.shared_blocks)
        """Prompt and every token it may generate (the known length grows over time)."""
        self.materialized = 0
        """Tokens with KV (page-rounded up in `pages`)."""
        self.pages = 0
        """Pages of the lease: the cached prefix's tree pages, then private ones."""
        self.cached = 0
        """Leading tokens of the lease that are in the tree, under the locked `node`."""
        self.node: Node | None = None
        self.lpm_key: tuple[int, ...] | None = None
        """LPM: the request's first 32 tokens (rounded up to whole pages), once computed."""

    def remaining_output(self) -> int:
        """Tokens it may still generate."""
        return self.req.max_output - self.req.generated

    def private_pages(self, page: int) -> int:
        """Pages of the lease outside the tree."""
        return self.pages - self.cached // page


class PageLeases:
    """The lease operations of one rank (page conservation: free + evictable + protected +
    private == total; `check` asserts it)."""

    def __init__(self, cache: RadixCache, handoff: RankHandoff) -> None:
        self.cache = cache
        self.page = cache.page
        self.handoff = handoff
        """Duplicate pages given back are capacity: they bump the generation."""

    def allocate(self, r: SgRequest, chunk_end: int) -> int | None:
        """Give `r` pages up to `chunk_end`; returns the tokens it did not have to compute (None:
        no room). A first chunk matches the tree on the chunk's own full pages and reuses them."""
        page, cache = self.page, self.cache
        pages_needed = -(-chunk_end // page)
        if r.materialized == 0:
            matched, node = cache.match_lock(r.seq, chunk_end - chunk_end % page)
            fresh = pages_needed - matched // page
            if not cache.reserve(fresh):
                cache.dec_lock(node)
                return None
            r.node, r.cached, r.pages = node, matched, pages_needed
            reused = matched
        else:
            if not cache.reserve(pages_needed - r.pages):
                return None
            r.pages = pages_needed
            reused = r.materialized
        r.materialized = chunk_end
        r.req.computed = chunk_end
        return reused

    def reserve_prompt(self, r: SgRequest) -> bool:
        """Decode role: the page-rounded prompt of a destination, reusing its resident full
        pages; False (nothing held) when it does not fit."""
        page, cache = self.page, self.cache
        prompt = r.req.prompt_len
        matched, node = cache.match_lock(r.seq, prompt - prompt % page)
        pages = -(-prompt // page)
        if not cache.reserve(pages - matched // page):
            cache.dec_lock(node)
            return False
        r.node, r.cached, r.pages = node, matched, pages
        return True

    def cache_prefix(self, r: SgRequest) -> None:
        """Insert the request's full pages into the tree; its lock moves to the new end."""
        cache = self.cache
        if not cache.caching:
            return
        end = r.materialized - r.materialized % self.page
        if end <= r.cached:
            return
        assert r.node is not None, "a request with KV holds a lock"
        node, new = cache.insert(r.node, r.seq, r.cached, end)
        if node is not r.node:
            cache.inc_lock(node)
            cache.dec_lock(r.node)
        duplicates = (end - r.cached - new) // self.page
        if duplicates:
            cache.give_back(duplicates)
            self.handoff.capacity_changed()
        r.node, r.cached = node, end

    def grow(self, r: SgRequest) -> None:
        """After a decode step: cache the full pages the request's tokens now fill."""
        length = r.length
        end = length - length % self.page
        if end > r.cached:
            assert r.node is not None, "a running request holds a lock"
            if self.cache.grow_own_leaf(r.node, r.seq, r.cached, end):
                r.cached = end
            else:
                self.cache_prefix(r)

    def finish(self, r: SgRequest) -> None:
        """Move a completed request's full pages into the tree, free the rest, unlock."""
        cache, page = self.cache, self.page
        if cache.caching:
            assert r.node is not None, "a request with KV holds a lock"
            end = r.materialized - r.materialized % page
            cache.give_back(r.pages - end // page)
            node, new = cache.insert(r.node, r.seq, r.cached, end)
            cache.give_back((end - r.cached - new) // page)
            cache.dec_lock(r.node)
        else:
            cache.give_back(r.pages)
        self._clear(r)

    def release(self, r: SgRequest) -> None:
        """Retraction or rejection: free private pages, unlock the cached prefix."""
        if r.node is None:
            return
        self.cache.give_back(r.private_pages(self.page))
        self.cache.dec_lock(r.node)
        self._clear(r)

    @staticmethod
    def _clear(r: SgRequest) -> None:
        """Forget a released lease."""
        r.node = None
        r.pages = r.cached = r.materialized = 0
        r.req.computed = 0

    def check(self, holders: list[SgRequest], reserved: list[SgRequest]) -> None:
        """Assert page conservation over the requests holding leases (and reserved destinations)."""
        evictable, protected = self.cache.check()
        page = self.page
        private = 0
        for r in holders:
            private += r.private_pages(page)
            assert r.pages == -(-r.materialized // page) and r.cached <= r.materialized
            assert (r.node is None) == (r.materialized == 0)
        private += sum(r.private_pages(page) for r in reserved)
        total = self.cache.free_pages + (evictable + protected) // page + private
        assert total == self.cache.total_pages, (total, self.cache.total_pages)
