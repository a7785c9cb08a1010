"""The replay loop: a logical clock in milliseconds, a heap of pass completions, and the
settling of each instant to a fixed point.

The loop knows nothing about requests, routers or schedulers. It sees three roles:

* a *source* that says when the next request becomes ready;
* *workers* that run one pass at a time and report when it ends;
* a *handler* that releases and places requests, applies finished passes, and may keep timers
  (e.g. KV transfers) and a queue of follow-up actions of its own.

Order within one instant, repeated until nothing changes:

1. pass completions due now, in the order the passes started;
2. the handler's timers due now;
3. requests ready now, released and placed;
4. the handler's queued actions, driven until none is left;
5. new passes on idle workers, in pool then worker order. A pass of zero duration is applied at
   once (without waking deferred work) and its worker may pass again at the same instant; a
   zero-duration pass that changed nothing parks the worker until work reaches it again;
6. once nothing else changes, the handler's control tick (autoscaling) due now.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Generic, Protocol, TypeVar

from servesim.errors import SimulationError
from servesim.limits import MAX_MS

INF = math.inf


class Source(Protocol):
    """Says when the next request becomes ready."""

    def next_ready_time(self) -> float: ...


class PassOutcome(Protocol):
    """What a started pass tells the loop."""

    @property
    def end_ms(self) -> float:
        """When the pass (the last of a run-ahead) ends."""
        ...

    @property
    def has_effect(self) -> bool:
        """Whether the pass changed anything (a zero-duration pass without effect parks)."""
        ...

    @property
    def skipped_ends(self) -> Sequence[float]:
        """Ends of the earlier passes of a run-ahead (empty for a single pass)."""
        ...


OutcomeT_co = TypeVar("OutcomeT_co", bound=PassOutcome, covariant=True)


class Worker(Protocol[OutcomeT_co]):
    """A worker: it runs one pass at a time."""

    parked: bool
    """Set by the loop after a zero-duration pass without effect; cleared when work arrives."""

    @property
    def order(self) -> tuple[int, int]:
        """Pass-start order within one instant: (pool index, worker id)."""
        ...

    def runnable(self) -> bool:
        """Idle, not parked, and holding requests."""
        ...

    def start_pass(self, now: float, horizon: float = 0.0) -> OutcomeT_co:
        """Start a pass at `now` (see `servesim.engine.worker.Worker.start_pass`)."""
        ...

    def holds_requests(self) -> bool:
        """Whether any request waits or runs on the worker."""
        ...


W = TypeVar("W", bound=Worker[Any])
"""The workers' type."""
O = TypeVar("O", bound=PassOutcome)
"""What their passes return."""
O_contra = TypeVar("O_contra", bound=PassOutcome, contravariant=True)


class Handler(Protocol[W, O_contra]):
    def release_arrivals(self, now: float) -> Iterable[W]:
        """Register and place every request ready at `now`; returns the workers given work."""

    def finish_pass(self, worker: W, outcome: O_contra, now: float, inline: bool) -> bool:
        """Apply a completed pass; True if completing it had an effect beyond the pass itself.

        `inline` marks a zero-duration pass completed within its own start.
        """

    def next_timer(self) -> float:
        """Time of the handler's earliest pending timer (inf if none)."""

    def fire_timers(self, now: float) -> bool:
        """Run the timers due at `now`; True if any ran."""

    def drive(self, now: float) -> Iterable[W]:
        """Apply queued follow-up actions until none is left; returns the workers touched."""

    def next_control(self) -> float:
        """Time of the next control tick (scaling), inf if none."""

    def control(self, now: float) -> Iterable[W]:
        """Run the control tick due at `now` (after all else); returns the workers touched."""

    def in_flight(self) -> int:
        """Requests registered and not yet terminal."""

    def done(self) -> bool:
        """True when the workload is drained and nothing is in flight."""


class Pool(Generic[W]):
    """A group of workers whose provisioned time is integrated into worker-seconds."""

    def __init__(self, name: str, workers: Sequence[W]) -> None:
        self.name = name
        self.workers = list(workers)
        self.worker_seconds = 0.0


class ReplayLoop(Generic[W, O]):
    """Advance the clock from instant to instant until the workload is done."""

    def __init__(self, source: Source, pools: Sequence[Pool[W]], handler: Handler[W, O],
                 time_cap_ms: float | None = None,
                 progress: Callable[[float | None], None] | None = None, *, run_ahead: bool = False) -> None:
        """`run_ahead`: a worker's work can change only through requests the source releases
        (at times known in advance) and the handler's timers and ticks, so a worker may run
        passes ahead up to the next such moment (`Worker.start_pass`; `runtime.paths` decides)."""
        self.source = source
        self.run_ahead = run_ahead
        self.pools = list(pools)
        self.handler = handler
        self.time_cap_ms = time_cap_ms
        self.now = 0.0
        self._heap: list[tuple[float, int, W, O]] = []
        self._seq = 0
        self._skipped: list[float] = []
        """Ends of passes a worker ran ahead through: instants the clock still integrates
        worker-seconds over, exactly as if it had stopped at each (a min-heap)."""
        self._progress = progress

    def run(self) -> float:
        """Run to the end (or the time cap); returns the last processed instant."""
        self._settle()
        handler = self.handler
        progress = self._progress
        instants = 0
        while not handler.done():
            instants += 1
            if progress is not None and not instants & 0x3FF:
                progress(self.now)
            at = self._next_time()
            if at == INF or self._only_ticks_left(at):
                raise self._dead_end()
            if self.time_cap_ms is not None and at > self.time_cap_ms:
                self._advance_through_skipped(self.time_cap_ms)
                break
            if at > MAX_MS:
                raise clock_overflow(at)
            self._advance(at)
            self._settle()
        return self.now

    def start(self) -> None:
        """Settle the first instant (what `run` does first): for a caller that then steps the
        loop with `run_until`."""
        self._settle()

    def run_until(self, until: float) -> float:
        """Process every instant up to `until` (after `start`), then move the clock to `until`;
        unlike `run`, the loop goes on with nothing in flight (requests may still be added to
        the source: a live replay, `servesim serve`). Returns the clock."""
        while True:
            at = self._next_time()
            if at > until:
                break
            if at == INF or self._only_ticks_left(at):
                raise self._dead_end()
            if at > MAX_MS:
                raise clock_overflow(at)
            self._advance(at)
            self._settle()
        if until > self.now and until != INF:
            self._advance(until)
        return self.now

    def next_time(self) -> float:
        """When the next thing happens that the loop knows of (inf if nothing is pending)."""
        return self._next_time()

    # -- clock ------------------------------------------------------------------------------

    def _next_time(self) -> float:
        at = self.source.next_ready_time()
        if self._heap and self._heap[0][0] < at:
            at = self._heap[0][0]
        timer = self.handler.next_timer()
        if timer < at:
            at = timer
        control = self.handler.next_control()
        return control if control < at else at

    def _advance(self, at: float) -> None:
        """Move the clock, integrating provisioned workers over the elapsed interval."""
        self._advance_through_skipped(at)
        self._step_clock(at)

    def _advance_through_skipped(self, limit: float) -> None:
        """Visit the skipped instants before (or at) `limit` for worker-seconds' sake."""
        skipped = self._skipped
        while skipped and skipped[0] <= limit:
            at = heapq.heappop(skipped)
            if at > self.now and (at < limit or self.time_cap_ms == limit):
                self._step_clock(at)

    def _step_clock(self, at: float) -> None:
        dt = at - self.now
        for pool in self.pools:
            pool.worker_seconds += (dt * len(pool.workers)) / 1000
        self.now = at

    # -- one instant ------------------------------------------------------------------------

    def _settle(self) -> None:
        """Apply everything due at `now` until nothing changes (see the module docstring)."""
        now = self.now
        heap = self._heap
        handler = self.handler
        candidates: set[W] = set()
        while True:
            changed = False
            while heap and heap[0][0] == now:
                _, _, worker, outcome = heapq.heappop(heap)
                handler.finish_pass(worker, outcome, now, False)
                candidates.add(worker)
                changed = True
            if handler.fire_timers(now):
                changed = True
            for worker in handler.release_arrivals(now):
                candidates.add(worker)
                changed = True
            for worker in handler.drive(now):
                candidates.add(worker)
                changed = True
            if candidates:
                if self._start_passes(candidates, now):
                    changed = True
                candidates.clear()
            if changed:
                continue
            if handler.next_control() == now and not handler.done():
                candidates.update(handler.control(now))
                continue
            return

    def _horizon(self, now: float) -> float:
        """The earliest moment something outside a worker could change its work."""
        if not self.run_ahead:
            return now
        at = min(self.source.next_ready_time(), self.handler.next_timer(), self.handler.next_control())
        if self.time_cap_ms is not None and self.time_cap_ms < at:
            at = self.time_cap_ms
        return at

    def _start_passes(self, candidates: set[W], now: float) -> bool:
        """Start a pass on every runnable candidate; True if any pass started."""
        started = False
        heap = self._heap
        handler = self.handler
        for worker in sorted(candidates, key=_start_order):
            while worker.runnable():
                started = True
                outcome = worker.start_pass(now, self._horizon(now))
                if outcome.end_ms > now:
                    self._seq += 1
                    heapq.heappush(heap, (outcome.end_ms, self._seq, worker, outcome))
                    for skipped in outcome.skipped_ends:
                        heapq.heappush(self._skipped, skipped)
                    break
                effect = handler.finish_pass(worker, outcome, now, True)
                if not (outcome.has_effect or effect):
                    worker.parked = True
        return started

    def _only_ticks_left(self, at: float) -> bool:
        """Nothing but control ticks can happen and requests are in flight, without a time cap:
        ticks cannot move requests that parked workers hold, so the replay would tick for ever."""
        return (self.time_cap_ms is None and at == self.handler.next_control() and not self._heap
                and self.source.next_ready_time() == INF and self.handler.next_timer() == INF
                and self.handler.in_flight() > 0)

    def _dead_end(self) -> SimulationError:
        holds = any(w.holds_requests() for pool in self.pools for w in pool.workers)
        return dead_end_error(self.handler.in_flight(), holds)


def dead_end_error(remaining: int, workers_hold_requests: bool) -> SimulationError:
    """The reference's error when nothing can happen any more but requests are in flight."""
    if workers_hold_requests:
        what = "detected an effect-free zero-duration pass"
    else:
        what = "reached a dead end"
    return SimulationError(
        f"replay invariant violated: offline replay {what} with {remaining} in-flight requests remaining")


def clock_overflow(at: float) -> SimulationError:
    """Simulated time ran past what servesim can time precisely."""
    return SimulationError(f"simulated time reached {at:g} ms, beyond {MAX_MS:g} ms (31.7 years): "
                           f"a duration, rate or size in the config is out of any realistic range")


def _start_order(worker: Worker[Any]) -> tuple[int, int]:
    return worker.order
