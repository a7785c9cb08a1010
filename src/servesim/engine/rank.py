"""What every scheduler rank shares: its settings and the record of one pass.

A rank is one attention-DP rank of a worker: a scheduler with its own queues and KV pool. The
cores (vLLM with TRT-LLM's policy in `engine.vllm.core`, SGLang in `engine.sglang.core`) offer the
interface in `engine.interface`; `engine.factory.make_rank` builds one.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import accumulate
from typing import TYPE_CHECKING, Protocol

from servesim.engine.cache.host import HostOffloadSettings
from servesim.engine.metrics import ForwardPassMetrics
from servesim.engine.request import EngineRequest

if TYPE_CHECKING:
    import numpy as np

    RunningSums = list[float] | np.ndarray

LPM_PREFIX = 32
"""SGLang LPM's in-queue prefix de-duplication threshold (tokens)."""


def lpm_span(page: int) -> int:
    """Leading tokens SGLang's LPM order compares between waiting requests (32, in whole pages)."""
    return -(-LPM_PREFIX // page) * page


@dataclass(slots=True, frozen=True)
class SglangSettings:
    """SGLang scheduler knobs (the reference's defaults; not in its YAML)."""

    schedule_policy: str = "fifo"
    max_prefill_tokens: int = 16384
    chunked_prefill_size: int = 8192
    clip_max_new_tokens: int = 4096
    schedule_conservativeness: float = 1.0


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class SpeculativeSettings:
    """Speculative decoding: draft tokens per step and their conditional acceptance rates."""

    nextn: int
    acceptance_rates: tuple[float, ...]
    seed: int = 42


@dataclass(slots=True, eq=False, repr=False)
class RankConfig:
    """The settings of one scheduler rank."""

    block_size: int
    num_blocks: int
    max_batched_tokens: int = 8192
    max_sequences: int = 256
    prefix_caching: bool = True
    state_blocks: int = 0
    """vLLM, upstream 0.13 `kv_cache.state_cache`: pool blocks each running request holds for its
    hybrid-model state, on top of its token blocks (prefix caching is then off)."""
    max_model_len: int | None = None
    backend: str = "vllm"
    role: str = "aggregated"
    """"aggregated", or in disaggregated serving "prefill" (prompts only, then held for the
    transfer) or "decode" (receives prebuilt requests, never charges prefill time)."""
    sglang: SglangSettings = field(default_factory=SglangSettings)
    speculative: SpeculativeSettings | None = None
    preempt_first: bool = False
    """vLLM FIFO preemption: the victim is the first running request instead of the last."""
    prefill_schedule_interval: int = 1
    """vLLM, attention DP > 1 (upstream 0.13): a request routed to a rank that holds requests
    reaches the rank's queue only at every N-th pass of its worker since the worker was last
    idle (`engine.worker`)."""
    prefill_decode_interval: int = 0
    """SGLang (upstream 0.13): after each pass that extends (prefills), this many passes neither
    admit nor continue a chunked prompt while requests are decoding (`engine.sglang.core`)."""
    prefill_emits_first_token: bool = False
    """Upstream 0.13's pass convention (`compat: upstream-0.13`; aggregated and prefill roles): a
    request whose prompt completes in a pass gets its first token from that pass's prefill and
    is not timed in its decode phase — vLLM times the decode phase over the requests that already
    had a token (none: the pass is its prefill), SGLang runs a pass that extends as a round of
    its own (a prefill worker's passes then take no decode time)."""
    record_metrics: bool = False
    """Build forward-pass metrics every pass (for scaling policies)."""
    reject_unservable: bool = True
    """Reject a request that can never fit the KV pool (with a reason) instead of stalling the
    worker until the run fails, which is what the reference does."""
    stop_livelocks: bool = True
    """Fail the run when a rank provably evicts and readmits its requests for ever (the
    reference spins); off under a time cap, which ends the reference's spin too."""
    host: HostOffloadSettings | None = None
    """The rank's host-memory KV tier (upstream 0.13 `kv_cache.host_offload`), if any."""

    @property
    def prompt_content_limit(self) -> int:
        """Prompt tokens beyond which a rank never reads a prompt's content: a longer prompt is
        refused at admission (the context length, a pool it cannot fit) or — SGLang admitting it
        chunk by chunk — never holds more KV than the pool. SGLang's LPM order also compares the
        first tokens of every waiting prompt, however long (`lpm_span`)."""
        limit = self.num_blocks * self.block_size + 1
        if self.backend == "sglang" and self.sglang.schedule_policy == "lpm":
            limit = max(limit, lpm_span(self.block_size))
        return limit if self.max_model_len is None else min(limit, self.max_model_len)


class RankPass:
    """What one rank did in one pass.

    The per-pass records here are plain slotted classes rather than dataclasses: one is made per
    pass, and building a dataclass costs ~2-3 M instructions at every start-up.

    - `admitted`: (request, reused prompt tokens) per admission, in admission order;
    - `finished`: requests that completed in this pass, in signal order;
    - `rejected`: requests dropped in this pass (`EngineRequest.reject_reason` may say why);
    - `first_tokens`: requests that emitted their first token in this pass (their prompt is done);
    - `held`: prefill role, requests whose prompt is done, holding their KV until it is transferred;
    - `metrics`: forward-pass metrics, when the rank records them.
    """

    __slots__ = ("prefill_ms", "decode_ms", "admitted", "finished", "rejected", "first_tokens", "held",
                 "preemptions", "scheduled_tokens", "emitted", "metrics", "host_tokens", "ready_ms")

    def __init__(self, prefill_ms: float = 0.0, decode_ms: float = 0.0, *,
                 finished: list[EngineRequest] | None = None, scheduled_tokens: int = 0, emitted: int = 0,
                 metrics: ForwardPassMetrics | None = None) -> None:
        self.prefill_ms = prefill_ms
        self.decode_ms = decode_ms
        self.admitted: list[tuple[EngineRequest, int]] = []
        self.finished = [] if finished is None else finished
        self.rejected: list[EngineRequest] = []
        self.first_tokens: list[EngineRequest] = []
        self.held: list[EngineRequest] = []
        self.preemptions = 0
        self.scheduled_tokens = scheduled_tokens
        self.emitted = emitted
        self.metrics = metrics
        self.host_tokens: list[int] | None = None
        """With a host tier: the reused prompt tokens loaded from host memory, per admission."""
        self.ready_ms = 0.0
        """With a host tier: when the pass can run, if later than its start — it waits for the
        copies to host memory of GPU blocks it reuses (0.13 does not reuse a block whose copy is
        in flight)."""

    @property
    def has_effect(self) -> bool:
        return bool(self.admitted or self.finished or self.rejected or self.held
                    or self.preemptions or self.scheduled_tokens or self.emitted)


class DecodePass:
    """What a decode-only pass did: cheaper to make than a `RankPass`."""

    __slots__ = ("duration_ms", "emitted", "finished", "metrics")

    def __init__(self, duration_ms: float, emitted: int, finished: list[EngineRequest],
                 metrics: ForwardPassMetrics | None = None) -> None:
        self.duration_ms = duration_ms
        self.emitted = emitted
        self.finished = finished
        self.metrics = metrics

    def as_rank_pass(self) -> RankPass:
        return RankPass(decode_ms=self.duration_ms, finished=self.finished, scheduled_tokens=self.emitted,
                        emitted=self.emitted, metrics=self.metrics)


LONG_SUMS = 128
"""Series at least this long are summed with numpy: a call costs as much as summing about a
hundred floats in Python."""


def running_sums(start: float, terms: Sequence[float]) -> RunningSums:
    """``[start, start + terms[0], (start + terms[0]) + terms[1], ...]``: the running sum, added
    left to right (numpy's `accumulate` adds element by element too). Long `terms` are best an
    array of type 'd' (numpy copies its buffer instead of converting each float)."""
    if len(terms) < LONG_SUMS:
        return list(accumulate(terms, initial=start))
    import numpy as np

    sums = np.empty(len(terms) + 1)
    sums[0] = start
    sums[1:] = terms
    return np.add.accumulate(sums)


class DecodeRun:
    """Decode-only passes run back to back (`Rank.decode_passes`): the `last` pass (its finishes
    are the run's finishes) and, `early`, the requests finished by the earlier passes with those
    passes' ends."""

    __slots__ = ("last_start_ms", "end_ms", "last", "early")

    def __init__(self, last_start_ms: float, end_ms: float) -> None:
        self.last_start_ms = last_start_ms
        self.end_ms = end_ms
        self.last: DecodePass | None = None
        self.early: list[tuple[float, list[EngineRequest]]] = []

    def add(self, step: DecodePass, ends: array) -> None:
        """One more pass, after the last."""
        self._settle_last()
        self.last_start_ms = self.end_ms
        self.end_ms += step.duration_ms
        ends.append(self.end_ms)
        self.last = step

    def add_many(self, sums: RunningSums, count: int, last: DecodePass, ends: array) -> None:
        """`count` more passes ending at ``sums[1 : count + 1]`` (``sums[0]`` is the run's end);
        the last of them did `last`."""
        self._settle_last()
        if isinstance(sums, list):
            ends.fromlist(sums[1:count + 1])  # twice as fast as extend from a list
        else:
            ends.frombytes(sums[1:count + 1].tobytes())
        self.last_start_ms = float(sums[count - 1])
        self.end_ms = float(sums[count])
        self.last = last

    def _settle_last(self) -> None:
        """Another pass follows the last one: its finishes become early ones."""
        if self.last is not None and self.last.finished:
            self.early.append((self.end_ms, self.last.finished))


class DecodesOnePass(Protocol):
    """A rank that runs decode-only passes one at a time."""

    def can_run_ahead(self, pass_index: int) -> bool: ...

    def decode_pass(self, pass_index: int) -> DecodePass: ...


def decode_one_by_one(rank: DecodesOnePass, pass_index: int, start_ms: float, horizon_ms: float,
                      through_finishes: bool, ends: array) -> DecodeRun:
    """`Rank.decode_passes` one `decode_pass` at a time."""
    run = DecodeRun(start_ms, start_ms)
    while True:
        run.add(rank.decode_pass(pass_index), ends)
        pass_index += 1
        if run.last is not None and run.last.finished and not through_finishes:
            return run
        if run.end_ms >= horizon_ms or not rank.can_run_ahead(pass_index):
            return run


__all__ = ["DecodePass", "DecodeRun", "DecodesOnePass", "decode_one_by_one", "ForwardPassMetrics", "RankConfig", "RankPass", "SglangSettings", "SpeculativeSettings"]
