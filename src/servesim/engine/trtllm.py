"""TensorRT-LLM's GUARANTEED_NO_EVICT policy on the vLLM core.

Same passes, budget, chunking, KV pool and timing as `engine.vllm`, except:

* at enqueue the requested output is clamped to what the pool can ever hold
  (``pool tokens − prompt``, when that leaves room for at least one token);
* a request is admitted only when its whole lifetime footprint (prompt + output) fits next to
  what the running requests have reserved, so it never needs preempting — and never is;
* a request whose footprint exceeds the pool is rejected;
* there is no last-block recompute: a fully cached prompt skips prefill entirely.
"""

from __future__ import annotations

from servesim.engine.kv import Block
from servesim.engine.request import EngineRequest
from servesim.engine.vllm import VllmRank


class TrtllmRank(VllmRank):
    """A vLLM-core rank with TensorRT-LLM's capacity scheduling."""

    def enqueue(self, request: EngineRequest) -> None:
        room = self.total_kv_tokens - request.prompt_len
        if room > 0 and request.max_output > room:
            request.max_output = room
        super().enqueue(request)

    def _footprint(self, request: EngineRequest) -> int:
        """Blocks the request holds once it has generated all its output."""
        return -(-(request.prompt_len + request.max_output) // self.config.block_size)

    def _must_reject(self, request: EngineRequest) -> bool:
        return self._footprint(request) > self.config.num_blocks

    def _cache_limit(self, request: EngineRequest) -> int:
        return request.length // self.config.block_size

    def _fits(self, request: EngineRequest, hits: list[Block]) -> bool:
        active_hits = sum(1 for b in hits if b.refs > 0)
        needed = self._footprint(request) - active_hits
        reserved = sum(self._footprint(r) - len(r.lease) for r in self.running)
        return needed <= self.config.num_blocks - self.pool.active - reserved

    def _victim(self) -> EngineRequest | None:
        return None
