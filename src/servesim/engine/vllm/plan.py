"""The plan of one vLLM-core pass while it is being made: what replaces per-pass scratch state."""

from __future__ import annotations

from dataclasses import dataclass

from servesim.engine.pass_time import MixedPassTiming
from servesim.engine.rank import RankPass
from servesim.engine.request import EngineRequest


@dataclass(slots=True, init=False, eq=False, repr=False)
class PassPlan:
    """The token budget left, what each explicitly scheduled request computes, and the record
    of the pass."""

    budget: int
    result: RankPass
    batch: dict[EngineRequest, tuple[int, int, int]]
    """request → (tokens scheduled, prompt end of its chunk or −1 when it has no prompt tokens,
    prompt tokens computed before the chunk)."""
    chunks: int
    """Scheduled requests with prompt tokens (prompt chunks)."""
    chunk_ends: int
    """Σ prompt end of the prompt chunks."""
    chunk_starts: int
    """Σ prompt tokens computed before the prompt chunks."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.result = RankPass()
        self.batch = {}
        self.chunks = self.chunk_ends = self.chunk_starts = 0

    def schedule(self, request: EngineRequest, before: int, tokens: int) -> None:
        """`request` computes `tokens` tokens from position `before` in this pass."""
        prompt_len = request.prompt_len
        prompt_before = before if before < prompt_len else prompt_len
        after = before + tokens
        prompt_tokens = (after if after < prompt_len else prompt_len) - prompt_before
        self.budget -= tokens
        self.result.scheduled_tokens += tokens
        if prompt_tokens > 0:
            isl = prompt_before + prompt_tokens
            self.chunks += 1
            self.chunk_ends += isl
            self.chunk_starts += prompt_before
        else:
            isl = -1
        self.batch[request] = (tokens, isl, prompt_before)

    def schedule_cohort(self, members: int) -> None:
        """The decode cohort's `members` tokens (one each) are in this pass."""
        self.budget -= members
        self.result.scheduled_tokens += members

    def unschedule(self, request: EngineRequest) -> None:
        """`request` was preempted: its tokens go back to the budget."""
        scheduled = self.batch.pop(request, None)
        if scheduled is not None:
            tokens, isl, prompt_before = scheduled
            self.budget += tokens
            self.result.scheduled_tokens -= tokens
            if isl >= 0:
                self.chunks -= 1
                self.chunk_ends -= isl
                self.chunk_starts -= prompt_before
        self.result.preemptions += 1

    def prefill_batch(self) -> tuple[int, int, int]:
        """(chunks with prompt tokens, floor mean of their prompt ends, floor mean of their
        cached prompt tokens); (0, 0, 0) without prompt work."""
        count = self.chunks
        if count == 0:
            return 0, 0, 0
        return count, self.chunk_ends // count, self.chunk_starts // count

    def fused_ms(self, timing: MixedPassTiming, ready: list[EngineRequest], steady: tuple[int, int],
                 total_kv_tokens: int) -> float:
        """The pass as one forward pass (`timing.mixed_pass: fused`) over its prompt chunks and
        its decode tokens: those of the steady decoders (`steady`: members, Σ length) and of the
        `ready` requests that computed no prompt token in it — a request whose prompt ends in
        this pass samples its first token from the prefill forward."""
        n, total = steady
        batch = self.batch
        for request in ready:
            scheduled = batch.get(request)
            if scheduled is None or scheduled[1] < 0:
                n += 1
                total += request.prompt_len + request.generated
        if n == 0:
            return self.result.prefill_ms
        count, mean_isl, mean_prefix = self.prefill_batch()
        return timing.mixed(count, mean_isl, mean_prefix, n, total, total // n, total_kv_tokens)
