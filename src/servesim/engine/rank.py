"""What every scheduler rank shares: its settings, the record of one pass, and construction.

A rank is one attention-DP rank of a worker: a scheduler with its own queues and KV pool. The
cores (vLLM/TRT-LLM in `engine.vllm`, SGLang in `engine.sglang`) all offer the same interface:
``enqueue(request)``, ``has_work()``, ``num_requests()`` and ``run_pass(pass_index) -> RankPass``.
"""

from __future__ import annotations

from collections import deque
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


@dataclass(slots=True, frozen=True)
class SpeculativeSettings:
    """Speculative decoding: draft tokens per step and their conditional acceptance rates."""

    nextn: int
    acceptance_rates: tuple[float, ...]
    seed: int = 42


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
    role: str = "aggregated"
    """"aggregated", or in disaggregated serving "prefill" (prompts only, then held for the
    transfer) or "decode" (receives prebuilt requests, never charges prefill time)."""
    sglang: SglangSettings = field(default_factory=SglangSettings)
    speculative: SpeculativeSettings | None = None
    preempt_first: bool = False
    """vLLM FIFO preemption: the victim is the first running request instead of the last."""
    record_metrics: bool = False
    """Build forward-pass metrics every pass (for scaling policies)."""
    reject_unservable: bool = True
    """Reject a request that can never fit the KV pool (with a reason) instead of stalling the
    worker until the run fails, which is what the reference does."""
    fused_mixed_pass: bool = False
    """Time a pass holding both prompt chunks and decode tokens as one forward pass
    (`timing.mixed_pass: fused`; the timing model then has a `mixed` method)."""


@dataclass(slots=True)
class ForwardPassMetrics:
    """One rank's forward-pass metrics (FPM) for one pass, as Dynamo's planner consumes them.

    Scheduled prefills are the requests with prompt tokens computed this pass; scheduled
    decodes those with only generated tokens to compute; queued prefills are waiting requests
    that never started; queued decodes are preempted requests waiting to resume. Lengths are
    sequence lengths at scheduling time; variances are population variances.
    """

    num_prefill_requests: int = 0
    sum_prefill_tokens: int = 0
    var_prefill_length: float = 0.0
    sum_prefill_kv_tokens: int = 0
    num_decode_requests: int = 0
    sum_decode_kv_tokens: int = 0
    var_decode_kv_tokens: float = 0.0
    num_queued_prefill: int = 0
    sum_queued_prefill_tokens: int = 0
    var_queued_prefill_length: float = 0.0
    num_queued_decode: int = 0
    sum_queued_decode_kv_tokens: int = 0
    var_queued_decode_kv_tokens: float = 0.0
    wall_time_secs: float = 0.0
    """The worker's pass duration (the DP barrier), filled in by the worker."""


def population_variance(count: int, total: float, total_squares: float) -> float:
    """Variance of `count` values from their sum and sum of squares (0 when count < 2)."""
    if count < 2:
        return 0.0
    mean = total / count
    return max(0.0, total_squares / count - mean * mean)


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
    first_tokens: list[EngineRequest] = field(default_factory=list)
    """Requests that emitted their first token in this pass (their prompt is done)."""
    held: list[EngineRequest] = field(default_factory=list)
    """Prefill role: requests whose prompt is done, holding their KV until it is transferred."""
    preemptions: int = 0
    scheduled_tokens: int = 0
    emitted: int = 0
    metrics: ForwardPassMetrics | None = None
    """Forward-pass metrics, when the rank records them."""

    @property
    def has_effect(self) -> bool:
        return bool(self.admitted or self.finished or self.rejected or self.held
                    or self.preemptions or self.scheduled_tokens or self.emitted)


class Rank(Protocol):
    """A scheduler rank, whatever its core."""

    def enqueue(self, request: EngineRequest) -> None: ...

    def has_work(self) -> bool: ...

    def num_requests(self) -> int: ...

    def run_pass(self, pass_index: int) -> RankPass: ...

    def abort(self, request: EngineRequest, pass_index: int) -> None:
        """Drop a waiting or running request between passes (its client gave up)."""
        ...

    def can_run_ahead(self, pass_index: int) -> bool:
        """True when pass `pass_index` would only advance steady decoders."""
        ...

    def next_decode_ms(self) -> float:
        """Duration of such a pass."""
        ...

    def decode_pass(self, pass_index: int) -> DecodePass:
        """Run pass `pass_index`, which `can_run_ahead` said only advances steady decoders."""
        ...


@dataclass(slots=True)
class DecodePass:
    """What a decode-only pass did: cheaper to make than a `RankPass`."""

    duration_ms: float
    emitted: int
    finished: list[EngineRequest]
    metrics: ForwardPassMetrics | None = None

    def as_rank_pass(self) -> RankPass:
        return RankPass(decode_ms=self.duration_ms, finished=self.finished, scheduled_tokens=self.emitted,
                        emitted=self.emitted, metrics=self.metrics)


class HandoffRank(Rank, Protocol):
    """A rank in disaggregated serving: a prefill rank holds finished prompts until their KV
    has been transferred; a decode rank reserves KV for incoming prompts and activates them."""

    pending: deque[EngineRequest]
    """Decode role: requests waiting for a destination reservation, in arrival order."""

    def release_held(self, request: EngineRequest) -> None:
        """Prefill role: free a held request's KV (its full blocks stay cached)."""
        ...

    def try_reserve(self) -> tuple[EngineRequest, int] | None:
        """Decode role: one reservation attempt for the front pending request; the reserved
        request and the prompt tokens to transfer, or None."""
        ...

    def activate(self, request: EngineRequest) -> None:
        """Decode role: the request's prompt KV has arrived; it waits to be decoded."""
        ...


def make_rank(config: RankConfig, timing: TimingModel, *, lazy_decode: bool = True, sampler_seed: int = 0) -> Rank:
    """A rank running the scheduling core of `config.backend`.

    `sampler_seed` seeds the rank's speculative-decoding acceptance sampler.
    """
    if config.backend == "sglang":
        from servesim.engine.sglang import SglangRank

        return SglangRank(config, timing, sampler_seed=sampler_seed)
    if config.backend == "trtllm":
        from servesim.engine.trtllm import TrtllmRank

        return TrtllmRank(config, timing, lazy_decode=lazy_decode, sampler_seed=sampler_seed)
    from servesim.engine.vllm import VllmRank

    return VllmRank(config, timing, lazy_decode=lazy_decode, sampler_seed=sampler_seed)
