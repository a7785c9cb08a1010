"""TensorRT-LLM's GUARANTEED_NO_EVICT policy on the vLLM core.

Same passes, budget, chunking, KV pool and timing as `engine.vllm.core`, except:

* at enqueue the requested output is clamped to what the pool can ever hold
  (``pool tokens − prompt``, when that leaves room for at least one token);
* a request is admitted only when its whole lifetime footprint (prompt + output) fits next to
  what the running requests have reserved, so it never needs preempting — and never is;
* a request whose footprint exceeds the pool is rejected;
* there is no last-block recompute: a fully cached prompt skips prefill entirely.
"""

from __future__ import annotations

from servesim.engine.cache.kv import Block, BlockPool
from servesim.engine.vllm.policy import VllmPolicy
from servesim.engine.request import EngineRequest


class TrtllmPolicy(VllmPolicy):
    """TensorRT-LLM's capacity scheduling (GUARANTEED_NO_EVICT)."""

    drafts_recompute_a_block = False

    def on_enqueue(self, request: EngineRequest) -> None:
        room = self.config.num_blocks * self.config.block_size - request.prompt_len
        if room > 0 and request.max_output > room:
            request.max_output = room

    def _footprint(self, request: EngineRequest) -> int:
        """Blocks the request holds once it has generated all its output."""
        return -(-(request.prompt_len + request.max_output) // self.config.block_size)

    def must_reject(self, request: EngineRequest) -> bool:
        blocks = self._footprint(request)
        if blocks <= self.config.num_blocks:
            return False
        request.reject_reason = (f"its prompt of {request.prompt_len} tokens and {request.max_output} output "
                                 f"tokens need {blocks} KV blocks, more than the {self.config.num_blocks} of a "
                                 f"rank's pool")
        return True

    def cache_limit(self, request: EngineRequest) -> int:
        return request.length // self.config.block_size

    def fits(self, request: EngineRequest, hits: list[Block], pool: BlockPool,
             running: dict[EngineRequest, None]) -> bool:
        active_hits = pool.held_count(hits)
        needed = self._footprint(request) - active_hits
        reserved = sum(self._footprint(r) - len(r.lease) for r in running)
        return needed <= self.config.num_blocks - pool.active_blocks - reserved

    def victim(self, running: dict[EngineRequest, None]) -> EngineRequest | None:
        return None
