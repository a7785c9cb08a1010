"""The decode cohort of a vLLM-core rank: steady decoders advanced implicitly.

A running request that only needs its one dangling token per pass gains exactly one token per
pass, so its progress is a function of the pass index: a member's counters (`computed`,
`generated`, its token spans) are stored as of its *anchor* pass, and at the start of pass *p*
it has gained ``p − anchor`` tokens (`progress` reads the true values). Only three things can
happen to a member, each at a pass computable when it joins, kept in a per-pass event table:
it needs a new KV block (every `block_size` tokens), it completes a block that becomes
cache-visible, or it emits its last token. A pass thus costs O(1 + events), not O(members).

The rank keeps the cohort ahead of every other running request in running order and dissolves
it (every member back to an explicit request) before a pass it cannot advance whole.
"""

from __future__ import annotations

from enum import IntEnum
from heapq import heappop, heappush

from servesim.engine.kv import BlockPool
from servesim.engine.rank import RankConfig
from servesim.engine.request import EngineRequest


class Event(IntEnum):
    """What happens to a member in a given pass."""

    ALLOC = 0
    """It needs a new KV block for its token."""
    CACHE = 1
    """The block its token fills becomes cache-visible."""
    FINISH = 2
    """It emits its last token."""


class DecodeCohort:
    """The members (in running order), Σ and Σ² of their lengths, and their block events."""

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
        self._events: dict[int, list[tuple[Event, EngineRequest, int]]] = {}
        """Member events by pass index: (kind, request, epoch); stale epochs are skipped."""
        self._event_passes: list[int] = []
        """Heap of the pass indices with events (some may have been consumed already)."""

    def __len__(self) -> int:
        return len(self.members)

    def __contains__(self, request: EngineRequest) -> bool:
        return request in self.members

    def progress(self, request: EngineRequest, pass_index: int) -> tuple[int, int]:
        """A request's true (computed, generated) at the start of pass `pass_index`."""
        steps = pass_index - request.anchor if request in self.members else 0
        return request.computed + steps, request.generated + steps

    def next_event(self, pass_index: int) -> int:
        """The first pass from `pass_index` on with a member event (passes before it only
        advance the members); a huge number when there is none."""
        heap, events = self._event_passes, self._events
        while heap:
            first = heap[0]
            if first >= pass_index and first in events:
                return first
            heappop(heap)
        return 1 << 62

    # -- one pass ---------------------------------------------------------------------------

    def fits(self, pass_index: int, token_budget: int) -> bool:
        """Whether every member gets its token and block in pass `pass_index`."""
        if len(self.members) > token_budget:
            return False
        events = self._events.get(pass_index)
        free = self.pool.free_blocks
        if not events or len(events) <= free:
            return True
        allocs = sum(1 for kind, r, epoch in events if kind == Event.ALLOC and r.epoch == epoch)
        return allocs <= free

    def apply_block_events(self, pass_index: int) -> None:
        """The members' block work in pass `pass_index`: new blocks, and blocks completed."""
        events = self._events.get(pass_index)
        if not events:
            return
        bs = self.block_size
        pool = self.pool
        allocs = [r for kind, r, epoch in events if kind == Event.ALLOC and r.epoch == epoch]
        if allocs:
            pool.allocate(len(allocs))
            for r in allocs:
                r.lease.append(None)
                if len(r.lease) <= r.shared_blocks and self.caching:
                    self._schedule(r, pass_index + bs - 1, Event.CACHE)
                else:
                    self._schedule(r, pass_index + bs, Event.ALLOC)
        for kind, r, epoch in events:
            if kind == Event.CACHE and r.epoch == epoch:
                steps = pass_index - r.anchor
                block = (r.computed + steps + 1) // bs - 1
                key = r.full_block_keys(block + 1, bs, r.generated + steps)[block]
                r.lease[block] = pool.store(key)
                self._schedule(r, pass_index + 1, Event.ALLOC)

    def advance(self, passes: int = 1) -> None:
        """Every member gained a token in each of `passes` passes: update the length sums."""
        n = len(self.members)
        self.length_sq_sum += passes * (2 * self.length_sum + n * passes)
        self.length_sum += n * passes

    def finish(self, pass_index: int) -> list[EngineRequest]:
        """Members whose last token is this pass's, in running order; they leave the cohort."""
        events = self._events.pop(pass_index, None)
        if not events:
            return []
        finishing = [r for kind, r, epoch in events if kind == Event.FINISH and r.epoch == epoch]
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
        self._schedule(r, anchor + self._steps_left(r) - 1, Event.FINISH)
        alloc_at = anchor + (-c) % bs
        cache_at = anchor + (-(c + 1)) % bs
        if cache_at < alloc_at and c // bs < r.shared_blocks and self.caching:
            self._schedule(r, cache_at, Event.CACHE)
        else:
            self._schedule(r, alloc_at, Event.ALLOC)

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
        self._events.clear()
        self._event_passes.clear()
        self.length_sum = self.length_sq_sum = 0

    def _schedule(self, r: EngineRequest, at: int, kind: Event) -> None:
        """Queue an event unless it is a block event after the request's last token."""
        if kind != Event.FINISH and at >= r.anchor + self._steps_left(r):
            return
        events = self._events.get(at)
        if events is None:
            self._events[at] = [(kind, r, r.epoch)]
            heappush(self._event_passes, at)
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
