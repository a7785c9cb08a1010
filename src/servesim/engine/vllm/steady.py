"""A vLLM-core rank serving plain requests, replayed as counts per pass instead of objects.

When every request a rank gets has the same prompt and output length, no prefix can be shared
and neither the KV pool nor the context length can ever bind, a pass is fully described by a
few numbers: how many waiting requests it admits (FCFS, up to the free sequence slots and the
token budget, the last one possibly with part of its prompt), how far the prompt cut in an
earlier pass gets, how many requests get their first token and how many finish (those whose
first token came `output - 1` passes before). Every decoder gets one token per pass, so a
request's token timeline is the passes [first token, first token + output), and the batch a
pass shows the timing model follows from the counts: its prompt chunks, and its decoders' total
length, Σ (prompt + passes since the first token). `SteadyLane` computes the pass ends and the
first tokens of each pass with the same arithmetic (integer sums and floor means, float
additions) as `servesim.engine.vllm.core.VllmRank` and `servesim.engine.worker.Worker`.

What cannot be ruled out before the run — a pass of no duration, a clock beyond `MAX_MS` —
raises `NotSteady` when it happens; the caller then replays the run with the general engine.
"""

from __future__ import annotations

from array import array
from bisect import bisect_right
from typing import NamedTuple

import numpy as np

from servesim.engine.pass_time import TimingModel, constant_phases
from servesim.engine.vllm.policy import VllmPolicy
from servesim.engine.vllm.core import VllmRank
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


def steady_shape(rank: object, prompt: int, output: int) -> SteadyShape:
    """The shape of `rank` serving only requests of `prompt` → `output` tokens that share no
    prefix, on a run whose paths allow the steady lane (`servesim.runtime.paths` checks that
    its passes are that simple: `steady_pool_refusal`)."""
    assert type(rank) is VllmRank and type(rank.policy) is VllmPolicy and rank.mixed is None
    config = rank.config
    return SteadyShape(prompt, output, rank.timing, rank.total_kv_tokens, config.max_batched_tokens,
                       config.max_sequences)


class Finished(NamedTuple):
    """Requests a lane finished, in admission (= arrival) order: id, send time, when the pass
    that admitted each started, and the pass of its first token."""

    rid: np.ndarray
    sent: np.ndarray
    admitted_at: np.ndarray
    first_pass: np.ndarray


class SteadyLane:
    """One steady worker's timeline, fed its arrivals a window at a time.

    The lane keeps the requests not yet handed back, in arrival order (id, send time, `seen`
    — when the engine sees it — and, once admitted, the start of the pass that admitted it), the
    first of them not admitted (`head`), the prompt tokens the last admitted one has still to
    compute (`partial`: its prompt was cut by the token budget), and per pass its end (the
    worker's `pass_ends`) and how many requests got their first token in it (`firsts`).

    Running order is admission order and only the last admitted request can be mid-prompt: a
    pass gives each decoder its token, the rest of the budget to that prompt, then admits
    waiting requests while sequence slots and budget remain, the last one with what is left of
    the budget (so the next pass admits nobody before that prompt is done). With at most
    `max_sequences ≤ budget` running requests no decoder ever waits for budget.
    """

    __slots__ = ("shape", "ends", "firsts", "seen", "rids", "sent", "admitted_at", "head", "partial", "running",
                 "started", "next_start", "busy_ms", "handed")

    def __init__(self, shape: SteadyShape, ends: array) -> None:
        self.shape = shape
        self.ends = ends
        self.firsts = array("q")
        """First tokens of each pass from `handed` on."""
        self.seen: list[float] = []
        self.rids: list[int] = []
        self.sent: list[float] = []
        self.admitted_at: list[float] = []
        self.head = 0
        self.partial = 0
        self.running = 0
        """Admitted and not finished (the decoders and the request mid-prompt, if any)."""
        self.started = 0
        """The sum of the decoders' first-token pass indices."""
        self.next_start: float | None = None
        """When the next pass starts; None while the worker idles (it starts at the next arrival)."""
        self.busy_ms = 0.0
        self.handed = 0
        """Passes whose first-token requests were handed back (all finished)."""

    def feed(self, seen: list[float], rids: np.ndarray, sent: np.ndarray) -> None:
        """Requests routed to the worker, in arrival order, after those fed before."""
        self.seen += seen
        self.rids += rids.tolist()
        self.sent += sent.tolist()

    def run(self, bound: float) -> None:
        """Run every pass that starts before `bound` (the arrival of the next request not fed yet).

        One loop over the passes, with no call per pass but the bisection and the timing model:
        it is the whole replay of the worker's requests."""
        seen, ends, firsts, admitted_at = self.seen, self.ends, self.firsts, self.admitted_at
        shape = self.shape
        prompt, budget, slots, last = shape.prompt, shape.budget, shape.max_sequences, shape.output - 1
        fixed, kv_tokens = shape.fixed, shape.kv_tokens
        prefill, decode = shape.timing.prefill, shape.timing.decode
        head, partial, running, started = self.head, self.partial, self.running, self.started
        busy, handed = self.busy_ms, self.handed
        n, k = len(seen), len(ends)
        now = self._next_start()
        if now is None:
            return
        while now < bound:
            decoders = running - 1 if partial else running
            left = budget - decoders  # the budget after one token per decoder
            chunks = chunk_ends = chunk_starts = first = 0
            if partial:  # the prompt cut in an earlier pass goes on
                take = partial if partial < left else left
                if take:
                    chunks, chunk_starts = 1, prompt - partial
                    chunk_ends = chunk_starts + take
                    left -= take
                    partial -= take
                    first = 0 if partial else 1
            if not partial and left:
                admit = bisect_right(seen, now, head) - head
                if admit > slots - running:
                    admit = slots - running
                if admit:
                    whole = left // prompt
                    rest = 0
                    if whole < admit:  # the budget runs out: the next one computes what is left of it
                        rest = left - whole * prompt
                        admit = whole + 1 if rest else whole
                        partial = prompt - rest if rest else 0
                    else:
                        whole = admit
                    chunks += admit
                    chunk_ends += whole * prompt + rest
                    first += whole
                    admitted_at += [now] * admit
                    head += admit
                    running += admit
            decoders += first
            started += first * k
            if not chunks:
                prefill_ms = 0.0
            elif fixed is not None:
                prefill_ms = fixed[0]
            else:  # the timing model asked as the engine asks it: floor means over the chunks
                prefill_ms = prefill(chunks, chunk_ends // chunks, chunk_starts // chunks)
            if not decoders:
                decode_ms = 0.0
            elif fixed is not None:
                decode_ms = fixed[1]
            else:  # the decoders' lengths: Σ prompt + tokens so far
                active = decoders * (prompt + k) - started
                decode_ms = decode(decoders, active, active // decoders, kv_tokens)
            end = (now + prefill_ms) + decode_ms
            if not now < end <= MAX_MS:
                raise NotSteady("a pass would take no time, or end past the clock's limit")
            ends.append(end)
            firsts.append(first)
            busy += end - now
            if k >= last:  # the requests whose first token came `output - 1` passes ago finish
                done = firsts[k - last - handed]
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
        self.head, self.partial, self.running, self.started = head, partial, running, started
        self.busy_ms = busy

    def _next_start(self) -> float | None:
        """When the next pass starts: where the lane stopped, or, idle, when the next request
        arrives (once the last pass is over); None while no request waits."""
        if self.next_start is not None:
            return self.next_start
        if self.head == len(self.seen):
            return None
        start = self.seen[self.head]
        return self.ends[-1] if self.ends and self.ends[-1] > start else start

    def hand_back(self) -> Finished:
        """The requests finished by the passes run so far and not handed back before; they
        leave the lane."""
        start, stop = self.handed, len(self.ends) - self.shape.output + 1
        if stop <= start:
            return Finished(np.empty(0, dtype=np.int64), np.empty(0), np.empty(0), np.empty(0, dtype=np.int64))
        counts = np.frombuffer(self.firsts, dtype=np.int64)[:stop - start]
        first_pass = np.repeat(np.arange(start, stop, dtype=np.int64), counts)
        del counts, self.firsts[:stop - start]
        self.handed = stop
        count = len(first_pass)
        finished = Finished(np.array(self.rids[:count], dtype=np.int64), np.array(self.sent[:count], dtype=np.float64),
                            np.array(self.admitted_at[:count], dtype=np.float64), first_pass)
        del self.seen[:count], self.rids[:count], self.sent[:count], self.admitted_at[:count]
        self.head -= count
        return finished

    def idle(self) -> bool:
        """Whether the lane holds no request."""
        return not self.seen
