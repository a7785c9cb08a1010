"""Replay of workers that cannot affect each other, one worker at a time.

When every request's arrival time and worker are known before the run — open-loop single-turn
arrivals, a placement that never looks at worker state, no scaling, no handler timers — a
worker's timeline depends only on the requests routed to it. This replay then runs each worker
on its own clock: at each of its instants it applies its finished pass, hands it the requests
arriving then and starts its next passes, with the same order and run-ahead horizon as
`ReplayLoop`. As every worker passes a window's end, it derives the instants the shared clock
would have visited by then (every arrival and every pass end, up to the time cap) to integrate
worker-seconds identically, so the report is byte-identical to `ReplayLoop`'s.

Requests are routed ahead a window at a time (`ROUTE_WINDOW`, whole instants): every worker
runs up to the next request not routed yet, then the next window is routed. Memory thus holds
one window's requests besides those in flight, however long the run.
"""

from __future__ import annotations

from array import array
from collections import deque
from collections.abc import Callable, Sequence
from enum import IntEnum
from operator import itemgetter
from typing import Any, Generic, Protocol, TypeVar

import numpy as np

from servesim.limits import MAX_MS
from servesim.runtime.replay import INF, O, O_contra, OutcomeT_co, Pool, Worker, clock_overflow, dead_end_error


class IsolatedWorker(Worker[OutcomeT_co], Protocol[OutcomeT_co]):
    """A worker that keeps its pass ends and takes requests routed ahead of the run."""

    @property
    def pass_ends(self) -> array[float]:
        """End time of every pass the worker started."""
        ...

    def enqueue(self, rank: int, request: Any) -> None:
        """Hand a request to one of the worker's ranks."""
        ...

    def start_pass(self, now: float, horizon: float = 0.0, through_finishes: bool = False,
                   run_on: bool = False) -> OutcomeT_co:
        """Start a pass; with `through_finishes` a run-ahead continues past completions, with
        `run_on` a full pass may open one."""
        ...


IW = TypeVar("IW", bound=IsolatedWorker[Any])


class IsolatedHandler(Protocol[IW, O_contra]):
    """What the per-worker replay needs of the handler."""

    def route_ahead(self, until: float, limit: int) -> tuple[list[tuple[float, IW, int, Any]], float]:
        """Register and route the next requests arriving by `until`, in arrival order, whole
        instants at a time until at least `limit` are routed: ([(arrival time, worker, rank,
        request)], the arrival time of the next request not routed, inf if none by `until`)."""
        ...

    def finish_pass(self, worker: IW, outcome: O_contra, now: float, inline: bool) -> bool:
        """Apply a finished pass (see `servesim.runtime.replay.Handler`)."""
        ...

    def finish_early(self, worker: IW, outcome: O_contra, until: float) -> None:
        """Apply the completions of the passes of a run ahead that end by `until` (the time cap
        falls in its last pass)."""
        ...

    def in_flight(self) -> int:
        """Requests registered and not yet terminal."""
        ...


class Ending(IntEnum):
    """How one worker's timeline ended."""

    DONE = 0
    """Nothing left to do."""
    CAPPED = 1
    """The time cap came first."""
    STUCK = 2
    """It holds requests but can never run again (a dead end, unless another worker was capped)."""


ROUTE_WINDOW = 8192
"""Requests routed ahead at a time (at least; an instant is never split)."""


class _Lane(Generic[IW, O]):
    """One worker's timeline between windows: its routed requests not handed over yet (next
    first), its pass in flight and, once over, how it ended."""

    __slots__ = ("worker", "deliveries", "pending", "ending")

    def __init__(self, worker: IW) -> None:
        self.worker = worker
        self.deliveries: deque[tuple[float, IW, int, Any]] = deque()
        self.pending: O | None = None
        self.ending: Ending | None = None


class IsolatedReplay(Generic[IW, O]):
    """Run every worker's timeline separately; same results as `ReplayLoop`."""

    def __init__(self, pools: Sequence[Pool[IW]], handler: IsolatedHandler[IW, O], time_cap_ms: float | None = None,
                 progress: Callable[[float | None], None] | None = None, *, run_ahead: bool = False,
                 run_on: bool = False) -> None:
        """`run_ahead`: a lone decode-only rank may run passes ahead to its next arrival;
        `run_on`: a full pass may open such a run (nobody watches passes one by one, and no time
        cap can fall inside the run, which would cut the full pass's admissions off with it).
        `runtime.paths` decides both."""
        self.pools = list(pools)
        self._run_ahead = run_ahead
        self._run_on = run_on
        self.handler = handler
        self.time_cap_ms = time_cap_ms
        self.now = 0.0
        self._progress = progress

    def run(self) -> float:
        """Run to the end (or the time cap); returns the last instant the shared clock visits."""
        cap = INF if self.time_cap_ms is None else self.time_cap_ms
        workers = [w for pool in self.pools for w in pool.workers]
        lanes: list[_Lane[IW, O]] = [_Lane(w) for w in workers]
        lane_of = {id(lane.worker): lane for lane in lanes}
        clock = SharedClock(self.pools, workers, cap)
        bound = 0.0
        while bound != INF:
            deliveries, bound = self.handler.route_ahead(cap, ROUTE_WINDOW)
            arrivals = np.fromiter(map(itemgetter(0), deliveries), float, len(deliveries))
            for delivery in deliveries:
                lane_of[id(delivery[1])].deliveries.append(delivery)
            del deliveries  # each lane's queue is consumed as it runs, so finished requests are freed
            for lane in lanes:
                if lane.ending is None:
                    lane.ending = self._run_worker(lane, bound, cap)
            clock.advance(arrivals, bound)
        endings = [lane.ending for lane in lanes]
        if Ending.CAPPED not in endings and Ending.STUCK in endings:
            raise dead_end_error(self.handler.in_flight(), any(w.holds_requests() for w in workers))
        if clock.last is not None:
            self.now = clock.last
        return self.now

    def _run_worker(self, lane: _Lane[IW, O], bound: float, cap: float) -> Ending | None:
        """Replay one worker's instants before `bound` (when a request not routed yet arrives),
        handing over (and dropping) its deliveries; returns how its timeline ended, or None if
        it continues in the next window."""
        finish = self.handler.finish_pass
        progress = self._progress
        worker, deliveries = lane.worker, lane.deliveries
        pending = lane.pending
        steps = 0
        while True:
            arrival = deliveries[0][0] if deliveries else INF
            end = pending.end_ms if pending is not None else INF
            now = end if end < arrival else arrival
            if now >= bound != INF:  # a request not routed yet may reach this worker first
                lane.pending = pending
                return None
            if now == INF:
                return Ending.STUCK if worker.holds_requests() else Ending.DONE
            if now > cap:
                if pending is not None:
                    self.handler.finish_early(worker, pending, cap)
                return Ending.CAPPED
            if now > MAX_MS:
                raise clock_overflow(now)
            if end == now:
                assert pending is not None
                finish(worker, pending, now, False)
                pending = None
            while deliveries and deliveries[0][0] == now:
                _, _, rank, request = deliveries.popleft()
                worker.enqueue(rank, request)
            if pending is None:
                horizon = (deliveries[0][0] if deliveries else bound) if self._run_ahead else now
                pending = self._start_passes(worker, now, horizon if horizon < cap else cap)
            steps += 1
            if progress is not None and not steps & 0x3FF:
                progress(None)  # each worker has its own clock: no single simulated time

    def _start_passes(self, worker: IW, now: float, horizon: float) -> O | None:
        """Start passes on `worker` at `now` (zero-duration ones complete at once, as in
        `ReplayLoop`); returns the pass left in flight."""
        run_on = self._run_on
        while worker.runnable():
            outcome = worker.start_pass(now, horizon, True, run_on)
            if outcome.end_ms > now:
                return outcome
            effect = self.handler.finish_pass(worker, outcome, now, True)
            if not (outcome.has_effect or effect):
                worker.parked = True
        return None


class SharedClock:
    """The instants the shared clock would visit (every arrival and every pass end, up to the
    time cap), taken a window at a time in ascending order, and the worker-seconds integrated
    over them: each step times the pool's worker count, summed left to right as `ReplayLoop`
    sums them (the running sum is carried from window to window, so the additions are the same)."""

    def __init__(self, pools: Sequence[Pool[Any]], workers: Sequence[IsolatedWorker[Any]], cap: float) -> None:
        self._pools = pools
        self._workers = workers
        self._cap = cap
        self._taken = [0] * len(workers)
        """Per worker, how many of its pass ends (ascending) are taken."""
        self.last: float | None = None
        """The latest instant taken."""

    def advance(self, arrivals: np.ndarray, bound: float) -> None:
        """Take the window's arrivals and the pass ends before `bound` (no later window can add
        an instant before it: every worker has run up to it)."""
        parts = [arrivals[arrivals <= self._cap]]  # all before `bound`
        for i, worker in enumerate(self._workers):
            ends = worker.pass_ends
            if len(ends) > self._taken[i]:
                new = np.frombuffer(ends[self._taken[i]:], dtype=np.float64)  # a copy: `ends` grows
                count = int(np.searchsorted(new, bound))
                parts.append(new[:count][new[:count] <= self._cap])
                self._taken[i] += count
        instants = np.concatenate(parts)
        del parts  # a whole run's pass ends can come in one window: hold few copies at once
        instants = _sorted_distinct(instants)
        if not len(instants):
            return
        steps = np.diff(instants, prepend=0.0 if self.last is None else self.last)
        for pool in self._pools:
            terms = steps * len(pool.workers)
            terms /= 1000
            if self.last is not None:  # the carried sum's first addition
                terms[0] = pool.worker_seconds + terms[0]
            pool.worker_seconds = float(np.add.accumulate(terms, out=terms)[-1])
        self.last = float(instants[-1])


def _sorted_distinct(values: np.ndarray) -> np.ndarray:
    """`np.unique(values)` for values without NaN, without `np.unique`'s import of `numpy.ma`
    (~9 ms of every run's start-up). The values are a few sorted runs (each worker's pass ends),
    which the stable sort merges in near-linear time."""
    values = np.sort(values, kind="stable")
    if len(values) < 2:
        return values
    keep = np.empty(len(values), dtype=bool)
    keep[0] = True
    np.not_equal(values[1:], values[:-1], out=keep[1:])
    return values[keep]
