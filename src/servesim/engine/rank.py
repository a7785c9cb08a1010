"""What every scheduler rank shares: its settings, the record of one pass, and construction.

A rank is one attention-DP rank of a worker: a scheduler with its own queues and KV pool. The
cores (vLLM/TRT-LLM in `engine.vllm`, SGLang in `engine.sglang`) all offer the same interface:
``enqueue(request)``, ``has_work()``, ``num_requests()`` and ``run_pass(pass_index) -> RankPass``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from servesim.engine.timing import TimingModel

if TYPE_CHECKING:
    from servesim.engine.request import EngineRequest


@dataclass(slots=True, frozen=True)
class SglangSettings:
    """SGLang scheduler knobs (the reference's defaults; not in its YAML)."""

    schedule_policy: str = "fifo"
    max_prefill_tokens: int = 16384
    chunked_prefill_size: int = 8192
    clip_max_new_tokens: int = 4096
    schedule_conservativeness: float = 1.0


@dataclass(slots=True)
class RankConfig:
    """The settings of one scheduler rank."""

    block_size: int
    num_blocks: int
    max_batched_tokens: int = 8192
    max_sequences: int = 256
    prefix_caching: bool = True
    max_model_len: int | None = None
    backend: str = "vllm"
    sglang: SglangSettings = field(default_factory=SglangSettings)
    reject_unservable: bool = True
    """Reject a request that can never fit the KV pool (with a reason) instead of stalling the
    worker until the run fails, which is what the reference does."""


@dataclass(slots=True)
class RankPass:
    """What one rank did in one pass."""

    prefill_ms: float = 0.0
    decode_ms: float = 0.0
    admitted: list[tuple[EngineRequest, int]] = field(default_factory=list)
    """(request, reused prompt tokens) per admission, in admission order."""
    finished: list[EngineRequest] = field(default_factory=list)
    """Requests that completed in this pass, in signal order."""
    rejected: list[EngineRequest] = field(default_factory=list)
    """Requests dropped in this pass (`EngineRequest.reject_reason` may say why)."""
    preemptions: int = 0
    scheduled_tokens: int = 0
    emitted: int = 0

    @property
    def has_effect(self) -> bool:
        return bool(self.admitted or self.finished or self.rejected or self.preemptions
                    or self.scheduled_tokens or self.emitted)


class Rank(Protocol):
    """A scheduler rank, whatever its core."""

    def enqueue(self, request: EngineRequest) -> None: ...

    def has_work(self) -> bool: ...

    def num_requests(self) -> int: ...

    def run_pass(self, pass_index: int) -> RankPass: ...


def make_rank(config: RankConfig, timing: TimingModel, *, lazy_decode: bool = True) -> Rank:
    """A rank running the scheduling core of `config.backend`."""
    if config.backend == "sglang":
        from servesim.engine.sglang import SglangRank

        return SglangRank(config, timing)
    if config.backend == "trtllm":
        from servesim.engine.trtllm import TrtllmRank

        return TrtllmRank(config, timing, lazy_decode=lazy_decode)
    from servesim.engine.vllm import VllmRank

    return VllmRank(config, timing, lazy_decode=lazy_decode)
