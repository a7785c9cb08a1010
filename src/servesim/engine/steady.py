"""A vLLM-core rank serving plain requests, replayed as counts per pass instead of objects.

When every request a rank gets has the same prompt and output length, no prefix can be shared
and neither the KV pool nor the context length can ever bind, a pass is fully described by two
numbers: how many waiting requests it admits (FCFS, up to the free sequence slots) and how many
running ones it finishes (those admitted `output - 1` passes before). Every running request
gets one token per pass, so a request's token timeline is the passes [admission, admission +
output), and the batch a pass shows the timing model follows from the counts: its new prompts,
and its decoders' total length, Σ (prompt + passes since admission). `SteadyLane` computes the
pass ends and the admission count of each pass with the same arithmetic (integer sums, float
additions) as `servesim.engine.vllm.VllmRank` and `servesim.engine.worker.Worker`.

What cannot be ruled out before the run — a pass whose admissions do not fit the token budget
(a prompt would be chunked), a pass of no duration, a clock beyond `MAX_MS` — raises
`NotSteady` when it happens; the caller then replays the run with the general engine.
"""

from __future__ import annotations

from array import array
from bisect import bisect_right
from typing import NamedTuple

import numpy as np

from servesim.engine.pass_time import TimingModel, constant_phases
from servesim.engine.policy import VllmPolicy
from servesim.engine.vllm import VllmRank
from servesim.limits import MAX_MS


class NotSteady(Exception):
    """A pass of the steady replay would leave the class it replays exactly."""


class SteadyShape:
    """What a steady rank's passes depend on."""

    __slots__ = ("prompt", "output", "timing", "kv_tokens", "fixed", "budget", "max_sequences")

    def __init__(self, prompt: int, output: int, timing: TimingModel, kv_tokens: int, budget: int,
                 max_sequences: int) -> None:
        self.prompt = prompt
        self.output = output
        self.timing = timing
        self.kv_tokens = kv_tokens
        """The rank's KV pool in tokens (what the timing model is told)."""
        self.fixed = constant_phases(timing)
        """(prefill, decode) phase durations when they are constant (fixed timing)."""
        self.budget = budget
        """Tokens a pass may schedule."""
        self.max_sequences = max_sequences


def steady_shape(rank: object, prompt: int, output: int) -> SteadyShape | None:
    """The shape of `rank` serving only requests of `prompt` → `output` tokens that share no
    prefix, or None when its passes are not that simple: another core or admission policy,
    speculative decoding, fused mixed-pass timing, forward-pass metrics, a context length or KV
    pool that all running requests together could reach."""
    if type(rank) is not VllmRank or type(rank.policy) is not VllmPolicy or rank.mixed is not None:
        return None
    config = rank.config
    if (config.role != "aggregated" or config.speculative is not None or config.record_metrics
            or prompt < 1 or output < 1 or config.max_sequences > config.max_batched_tokens):
        return None
    if config.max_model_len is not None and prompt + output > config.max_model_len:
        return None  # a request would stop at (or be rejected for) the context length
    blocks = -(-(prompt + output) // config.block_size)
    if config.max_sequences * blocks > config.num_blocks:
        return None  # the KV pool could bind (admission test, allocation, preemption)
    return SteadyShape(prompt, output, rank.timing, rank.total_kv_tokens, config.max_batched_tokens,
                       config.max_sequences)


class Finished(NamedTuple):
    """Requests a lane finished, in admission (= arrival) order: id, send time, the pass that
    admitted each and when that pass started."""

    rid: np.ndarray
    sent: np.ndarray
    admitted_in: np.ndarray
    admitted_at: np.ndarray


class SteadyLane:
    """One steady worker's timeline, fed its arrivals a window at a time.

    The lane keeps the requests not yet handed back, in arrival order (id, send time, and
    `seen`, when the engine sees it), the first of them not admitted (`head`), and per pass its
    end (the worker's `pass_ends`) and admission count.
    """

    __slots__ = ("shape", "ends", "starts", "admits", "seen", "rids", "sent", "head", "running", "started",
                 "next_start", "busy_ms", "handed")

    def __init__(self, shape: SteadyShape, ends: array) -> None:
        self.shape = shape
        self.ends = ends
        self.starts = array("d")
        self.admits = array("q")
        """Start and admissions of each pass from `handed` on."""
        self.seen: list[float] = []
        self.rids: list[int] = []
        self.sent: list[float] = []
        self.head = 0
        self.running = 0
        self.started = 0
        """The sum of the running requests' admission pass indices."""
        self.next_start: float | None = None
        """When the next pass starts; None while the worker idles (it starts at the next arrival)."""
        self.busy_ms = 0.0
        self.handed = 0
        """Passes whose admitted requests were handed back (all finished)."""

    def feed(self, seen: list[float], rids: np.ndarray, sent: np.ndarray) -> None:
        """Requests routed to the worker, in arrival order, after those fed before."""
        self.seen += seen
        self.rids += rids.tolist()
        self.sent += sent.tolist()

    def run(self, bound: float) -> None:
        """Run every pass that starts before `bound` (the arrival of the next request not fed yet)."""
        seen, ends, starts, admits = self.seen, self.ends, self.starts, self.admits
        shape = self.shape
        prompt, budget, slots, last = shape.prompt, shape.budget, shape.max_sequences, shape.output - 1
        fixed, kv_tokens = shape.fixed, shape.kv_tokens
        prefill, decode = shape.timing.prefill, shape.timing.decode
        prefill_ms, decode_ms = fixed if fixed is not None else (0.0, 0.0)
        head, running, started, busy, handed = self.head, self.running, self.started, self.busy_ms, self.handed
        n = len(seen)
        now = self.next_start
        k = len(ends)
        if now is None:  # idle: the next pass starts when a request arrives (once the last pass is over)
            if head == n:
                return
            now = seen[head]
            if k and ends[-1] > now:
                now = ends[-1]
        while now < bound:
            admit = bisect_right(seen, now, head) - head
            if admit > slots - running:
                admit = slots - running
            if admit:
                if running + admit * prompt > budget:
                    raise NotSteady("a pass's admissions would not fit the token budget")
                head += admit
                running += admit
                started += admit * k
            if fixed is None:  # the timing model's answer for this batch, asked as the engine asks
                prefill_ms = prefill(admit, prompt, 0) if admit else 0.0
                active = running * (prompt + k) - started  # Σ prompt + tokens so far, over the batch
                decode_ms = decode(running, active, active // running, kv_tokens)
            end = (now + prefill_ms) + decode_ms if admit else now + decode_ms
            if not now < end <= MAX_MS:
                raise NotSteady("a pass would take no time, or end past the clock's limit")
            ends.append(end)
            starts.append(now)
            admits.append(admit)
            busy += end - now
            if k >= last:  # the requests admitted `output - 1` passes ago finish
                done = admits[k - last - handed]
                running -= done
                started -= done * (k - last)
            k += 1
            if running or (head < n and seen[head] <= end):
                now = end
            elif head < n:
                now = seen[head]
            else:
                self.next_start = None
                break
        else:
            self.next_start = now
        self.head, self.running, self.started, self.busy_ms = head, running, started, busy

    def hand_back(self) -> Finished:
        """The requests finished by the passes run so far and not handed back before; they
        leave the lane."""
        start, stop = self.handed, len(self.ends) - self.shape.output + 1
        if stop <= start:
            return Finished(np.empty(0, dtype=np.int64), np.empty(0), np.empty(0, dtype=np.int64), np.empty(0))
        counts = np.frombuffer(self.admits, dtype=np.int64)[:stop - start]
        admitted_in = np.repeat(np.arange(start, stop, dtype=np.int64), counts)
        admitted_at = np.repeat(np.frombuffer(self.starts, dtype=np.float64)[:stop - start], counts)
        del counts, self.admits[:stop - start], self.starts[:stop - start]
        self.handed = stop
        count = len(admitted_in)
        finished = Finished(np.array(self.rids[:count], dtype=np.int64), np.array(self.sent[:count], dtype=np.float64),
                            admitted_in, admitted_at)
        del self.seen[:count], self.rids[:count], self.sent[:count]
        self.head -= count
        return finished

    def idle(self) -> bool:
        """Whether the lane holds no request."""
        return not self.seen
