"""vLLM's admission rules on the vLLM core: rejection gates, cache-hit limits, the fit test
and the preemption victim. `engine.vllm.trtllm` swaps in TensorRT-LLM's rules."""

from __future__ import annotations

from servesim.engine.cache.kv import Block, BlockPool
from servesim.engine.rank import RankConfig
from servesim.engine.request import EngineRequest
from servesim.errors import RunError


class VllmPolicy:
    """vLLM: admit what fits now, preempt the last running request (the first with FIFO
    preemption) when KV runs out, recompute the last cached block."""

    drafts_recompute_a_block = True
    """With speculative decoding a prefix hit gives back one more block (vLLM's EAGLE/MTP rule)."""

    def __init__(self, config: RankConfig) -> None:
        self.config = config

    def on_enqueue(self, request: EngineRequest) -> None:
        """Adjust a request routed to the rank (vLLM: nothing)."""

    def must_reject(self, request: EngineRequest) -> bool:
        """Context-limit and (fresh requests only) pool-limit rejection.

        A preempted request whose prompt and generated tokens outgrew the whole pool can never
        be readmitted: the reference then stalls the worker until the run fails; servesim
        rejects it with a reason (unless `reject_unservable` is off). With speculative decoding
        the same holds as soon as its tokens plus the room for one burst outgrow the pool (the
        reference then preempts and readmits it for ever; without `reject_unservable` the run
        fails).
        """
        config = self.config
        limit = config.max_model_len
        if limit is not None and request.prompt_len >= limit:
            request.reject_reason = f"its prompt of {request.prompt_len} tokens reaches the context length ({limit})"
            return True
        if request.prebuilt:
            return False
        bs = config.block_size
        blocks = -(-request.length // bs) + config.state_blocks
        if not request.preempted:
            if blocks <= config.num_blocks:
                return False
            request.reject_reason = (f"its prompt of {request.prompt_len} tokens needs {blocks} KV blocks, "
                                     f"more than the {config.num_blocks} of a rank's pool")
            return True
        tokens = request.length
        if config.speculative is not None:
            tokens += min(config.speculative.nextn + 1, request.tokens_left(limit))
        blocks = -(-tokens // bs) + config.state_blocks
        if blocks <= config.num_blocks:
            return False
        reason = (f"its {tokens} tokens{' (with room for a speculative burst)' if tokens > request.length else ''} "
                  f"need {blocks} KV blocks, more than the {config.num_blocks} a rank has")
        if config.reject_unservable:
            request.reject_reason = reason
            return True
        if tokens > request.length:
            raise RunError(f"a request can never complete: {reason}; the reference preempts and "
                           f"readmits it for ever")
        return False

    def cache_limit(self, request: EngineRequest) -> int:
        """How many leading full blocks a cache hit may cover: while the request still has
        tokens to generate, its last token must be computed (to sample from), so a fully cached
        sequence recomputes its last block."""
        bs = self.config.block_size
        if request.generated < request.max_output:
            return (request.length - 1) // bs
        return request.length // bs

    def fits(self, request: EngineRequest, hits: list[Block], pool: BlockPool,
             running: dict[EngineRequest, None]) -> bool:
        """Whether the whole known sequence fits next to the active blocks."""
        active_hits = pool.held_count(hits) if hits else 0
        needed = -(-request.length // self.config.block_size) + self.config.state_blocks - active_hits
        return needed <= self.config.num_blocks - pool.active_blocks

    def victim(self, running: dict[EngineRequest, None]) -> EngineRequest | None:
        """The request to preempt when an allocation fails (None: the allocation waits)."""
        if not running:
            return None
        return next(iter(running)) if self.config.preempt_first else next(reversed(running))

