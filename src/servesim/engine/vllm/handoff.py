"""The vLLM core's side of the disaggregated KV handoff (`engine.handoff`): a prefill rank
holds each finished prompt with its KV until the transfer is done; a decode rank reserves KV
for the front pending destination, then activates the transferred prompt."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from servesim.engine.handoff import RankHandoff
from servesim.engine.cache.kv import BlockPool
from servesim.engine.rank import RankConfig, RankPass
from servesim.engine.request import EngineRequest


class VllmHandoff:
    """`HandoffRank`'s part of `engine.vllm.core.VllmRank` (a mixin over the rank's settings, KV
    pool and queues)."""

    config: RankConfig
    pool: BlockPool
    handoff: RankHandoff
    running: dict[EngineRequest, None]
    waiting: deque[EngineRequest]
    explicit: list[EngineRequest]
    _cache_completed: Callable[[EngineRequest, int, int], None]

    def _hold(self, prompts_done: list[EngineRequest], result: RankPass) -> None:
        """Prefill role: requests whose prompt is complete leave running, keeping their KV."""
        if not prompts_done:
            return
        for request in prompts_done:
            self.handoff.hold(request, result)
            del self.running[request]
        done = set(prompts_done)
        self.explicit = [r for r in self.explicit if r not in done]

    def release_held(self, request: EngineRequest) -> None:
        """Prefill role: free a held request's KV once it has been transferred (or dropped)."""
        self.pool.release(request.lease, request.computed // self.config.block_size)
        request.lease = []

    def try_reserve(self) -> tuple[EngineRequest, int] | None:
        """Decode role: one attempt to reserve KV for the front pending destination.

        Returns the reserved request and how many of its prompt tokens must be transferred (its
        blocks not already resident here, in whole blocks), or None.
        """
        handoff = self.handoff
        request = handoff.candidate()
        if request is None:
            return None
        if len(self.running) >= self.config.max_sequences:
            handoff.refuse(request)
            return None
        bs, pool = self.config.block_size, self.pool
        full = min(request.prompt_len // bs, request.shared_blocks)
        hits = pool.prefix_hits(request.full_block_keys(full, bs), full) if full > 0 else []
        fresh = -(-request.prompt_len // bs) - len(hits)
        if fresh > pool.free_blocks - (len(hits) - pool.held_count(hits)):
            handoff.refuse(request)
            return None
        pool.pin_all(hits)
        pool.allocate(fresh)
        request.lease = [*hits, *([None] * fresh)]
        return handoff.reserved(request, fresh * bs)

    def activate(self, request: EngineRequest) -> None:
        """Decode role: the transferred prompt becomes cache-visible and the request waits."""
        bs = self.config.block_size
        if self.config.prefix_caching:
            self._cache_completed(request, 0, request.prompt_len // bs)
        request.computed = request.prompt_len
        request.prebuilt = True
        self.waiting.append(request)
