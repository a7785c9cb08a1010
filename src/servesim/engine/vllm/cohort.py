"""The decode cohort of a vLLM-core rank: steady decoders advanced implicitly.

A running request that only needs its one dangling token per pass gains exactly one token per
pass, so its progress is a function of the pass index: a member's counters (`computed`,
`generated`, its token spans) are stored as of its *anchor* pass, and at the start of pass *p*
it has gained ``p − anchor`` tokens (`progress` reads the true values). Only three things can
happen to a member, each at a pass computable when it joins, kept in per-pass event tables:
it needs a new KV block (every `block_size` tokens), it completes a block that becomes
cache-visible (block events), or it emits its last token. A pass thus costs O(1 + events), not
O(members); and until a member's last token only block events happen, so the passes up to it
have durations that are a function of the pass index alone (`next_finish`).

The rank keeps the cohort ahead of every other running request in running order and dissolves
it (every member back to an explicit request) before a pass it cannot advance whole.
"""

from __future__ import annotations

from heapq import heappop, heappush

from servesim.engine.cache.kv import BlockPool
from servesim.engine.rank import RankConfig
from servesim.engine.request import EngineRequest


def cohort_refusal(config: RankConfig) -> str | None:
    """Why ranks of `config` keep no decode cohort (None: they keep one): a burst of drafts or a
    FIFO victim could touch a member; SGLang's core has none."""
    if config.backend == "sglang":
        return "SGLang's core has no decode cohort"
    if config.speculative is not None:
        return "speculative decoding (a burst could touch a cohort member)"
    if config.state_blocks:
        return "a state cache (each lease also holds the request's state blocks)"
    if config.preempt_first:
        return "FIFO preemption (a victim could be a cohort member)"
    return None


ALLOC = 0
"""Block event: the member needs a new KV block for its token."""
CACHE = 1
"""Block event: the block the member's token fills becomes cache-visible."""
NEVER = 1 << 62


class DecodeCohort:
    """The members (in running order), Σ and Σ² of their lengths, and their events: block
    events and last tokens, each by pass index."""

    def __init__(self, pool: BlockPool, config: RankConfig) -> None:
        self.pool = pool
        self.block_size = config.block_size
        self.caching = config.prefix_caching
        self.max_model_len = config.max_model_len
        self.members: dict[EngineRequest, None] = {}
        self.length_sum = 0
        """Σ sequence length of the members at the start of the next pass."""
        self.length_sq_sum = 0
        """Σ squared sequence length of the members at the start of the next pass."""
        self._blocks: dict[int, list[tuple[int, EngineRequest, int]]] = {}
        """Block events by pass index: (ALLOC or CACHE, request, epoch); stale epochs are skipped."""
        self._block_passes: list[int] = []
        """Heap of the pass indices in `_blocks` (and of some already consumed)."""
        self._finishes: dict[int, list[tuple[EngineRequest, int]]] = {}
        """Last tokens by pass index: (request, epoch)."""
        self._finish_passes: list[int] = []
        """Heap of the pass indices in `_finishes` (and of some already consumed)."""

    def __len__(self) -> int:
        return len(self.members)

    def __contains__(self, request: EngineRequest) -> bool:
        return request in self.members

    def progress(self, request: EngineRequest, pass_index: int) -> tuple[int, int]:
        """A request's true (computed, generated) at the start of pass `pass_index`."""
        steps = pass_index - request.anchor if request in self.members else 0
        return request.computed + steps, request.generated + steps

    def next_finish(self, pass_index: int) -> int:
        """The first pass from `pass_index` on where a member may emit its last token (the
        cohort's size is constant before it); `NEVER` when there is none."""
        heap, finishes = self._finish_passes, self._finishes
        while heap:
            first = heap[0]
            if first >= pass_index and first in finishes:
                return first
            heappop(heap)
        return NEVER

    # -- one pass ---------------------------------------------------------------------------

    def fits(self, pass_index: int, token_budget: int) -> bool:
        """Whether every member gets its token and block in pass `pass_index`."""
        if len(self.members) > token_budget:
            return False
        events = self._blocks.get(pass_index)
        if not events:
            return True
        free = self.pool.free_blocks
        if len(events) <= free:
            return True
        allocs = sum(1 for kind, r, epoch in events if kind == ALLOC and r.epoch == epoch)
        return allocs <= free

    def apply_block_events(self, pass_index: int) -> None:
        """The members' block work in pass `pass_index`: new blocks, and blocks completed."""
        events = self._blocks.pop(pass_index, None)
        if not events:
            return
        bs = self.block_size
        pool = self.pool
        allocs: list[EngineRequest] = []
        caches: list[EngineRequest] = []
        for kind, r, epoch in events:
            if r.epoch == epoch:
                (allocs if kind == ALLOC else caches).append(r)
        if allocs:
            pool.allocate(len(allocs))
            caching = self.caching
            for r in allocs:
                lease = r.lease
                lease.append(None)
                if caching and len(lease) <= r.shared_blocks:
                    self._schedule_block(r, pass_index + bs - 1, CACHE)
                else:
                    self._schedule_block(r, pass_index + bs, ALLOC)
        for r in caches:
            steps = pass_index - r.anchor
            block = (r.computed + steps + 1) // bs - 1
            key = r.full_block_keys(block + 1, bs, r.generated + steps)[block]
            r.lease[block] = pool.store(key)
            self._schedule_block(r, pass_index + 1, ALLOC)

    def block_events_until(self, first: int, stop: int, token_budget: int) -> int:
        """The block work of passes [first, stop), which no member finishes in, pass by pass
        while each `fits`; returns the first pass that does not (else `stop`)."""
        heap, blocks = self._block_passes, self._blocks
        while heap and heap[0] < stop:
            at = heappop(heap)
            if at < first:
                blocks.pop(at, None)  # left behind by members that left
                continue
            if at not in blocks:
                continue
            if not self.fits(at, token_budget):
                heappush(heap, at)
                return at
            self.apply_block_events(at)
        return stop

    def advance(self, passes: int = 1) -> None:
        """Every member gained a token in each of `passes` passes: update the length sums."""
        n = len(self.members)
        self.length_sq_sum += passes * (2 * self.length_sum + n * passes)
        self.length_sum += n * passes

    def finish(self, pass_index: int) -> list[EngineRequest]:
        """Members whose last token is this pass's, in running order; they leave the cohort."""
        events = self._finishes.pop(pass_index, None)
        if not events:
            return []
        finishing = [r for r, epoch in events if r.epoch == epoch]
        if len(finishing) > 1:
            finishing.sort(key=_running_order)
        for r in finishing:
            self.leave(r, pass_index + 1)
        return finishing

    # -- membership -------------------------------------------------------------------------

    def join(self, r: EngineRequest, anchor: int) -> None:
        """Make a request that just emitted a token (and needs more) a member from pass `anchor`."""
        r.anchor = anchor
        r.epoch += 1
        self.members[r] = None
        length = r.prompt_len + r.generated
        self.length_sum += length
        self.length_sq_sum += length * length
        bs = self.block_size
        c = r.computed
        last = anchor + self._steps_left(r)
        finishes = self._finishes.get(last - 1)
        if finishes is None:
            self._finishes[last - 1] = [(r, r.epoch)]
            heappush(self._finish_passes, last - 1)
        else:
            finishes.append((r, r.epoch))
        alloc_at = anchor + (-c) % bs
        cache_at = anchor + (-(c + 1)) % bs
        if cache_at < alloc_at and c // bs < r.shared_blocks and self.caching:
            self._schedule_block(r, cache_at, CACHE, last)
        else:
            self._schedule_block(r, alloc_at, ALLOC, last)

    def leave(self, r: EngineRequest, pass_index: int) -> None:
        """Bring a member's counters to the start of pass `pass_index` and drop it."""
        steps = pass_index - r.anchor
        r.computed += steps
        r.generated += steps
        if steps:
            spans = r.token_spans
            if spans and spans[-1] == r.anchor:
                spans[-1] = pass_index
            else:
                spans.append(r.anchor)
                spans.append(pass_index)
        r.epoch += 1
        del self.members[r]
        length = r.prompt_len + r.generated
        self.length_sum -= length
        self.length_sq_sum -= length * length

    def dissolve(self, pass_index: int) -> None:
        """Every member leaves at the start of pass `pass_index`."""
        for r in list(self.members):
            self.leave(r, pass_index)
        self._blocks.clear()
        self._block_passes.clear()
        self._finishes.clear()
        self._finish_passes.clear()
        self.length_sum = self.length_sq_sum = 0

    def _schedule_block(self, r: EngineRequest, at: int, kind: int, last: int = -1) -> None:
        """Queue a block event unless it falls after the request's last token (from its anchor
        pass on the request emits tokens in passes before `last`; -1: work it out)."""
        if last < 0:
            last = r.anchor + self._steps_left(r)
        if at >= last:
            return
        events = self._blocks.get(at)
        if events is None:
            self._blocks[at] = [(kind, r, r.epoch)]
            heappush(self._block_passes, at)
        else:
            events.append((kind, r, r.epoch))

    def _steps_left(self, r: EngineRequest) -> int:
        """Tokens the request will still emit from its anchor pass on (≥ 1)."""
        left = r.max_output - r.generated
        limit = self.max_model_len
        if limit is not None:
            room = limit - r.prompt_len - r.generated
            if room < left:
                return room
        return left


def _running_order(request: EngineRequest) -> int:
    return request.order
