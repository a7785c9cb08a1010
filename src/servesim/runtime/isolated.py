"""Replay of workers that cannot affect each other, one worker at a time.

When every request's arrival time and worker are known before the run — open-loop single-turn
arrivals, a placement that never looks at worker state, no scaling, no handler timers — a
worker's timeline depends only on the requests routed to it. This replay then runs each worker
on its own clock: at each of its instants it applies its finished pass, hands it the requests
arriving then and starts its next passes, with the same order and run-ahead horizon as
`ReplayLoop`. Afterwards it derives the instants the shared clock would have visited (every
arrival and every pass end, up to the time cap) to integrate worker-seconds identically, so the
report is byte-identical to `ReplayLoop`'s.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Sequence
from enum import IntEnum
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

    def start_pass(self, now: float, horizon: float = 0.0, through_finishes: bool = False) -> OutcomeT_co:
        """Start a pass; with `through_finishes` a run-ahead continues past completions."""
        ...


IW = TypeVar("IW", bound=IsolatedWorker[Any])


class IsolatedHandler(Protocol[IW, O_contra]):
    """What the per-worker replay needs of the handler."""

    def route_ahead(self, until: float) -> list[tuple[float, IW, int, Any]]:
        """Register and route every request arriving by `until`, in arrival order:
        (arrival time, worker, rank, request)."""
        ...

    def finish_pass(self, worker: IW, outcome: O_contra, now: float, inline: bool) -> bool:
        """Apply a finished pass (see `servesim.runtime.replay.Handler`)."""
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


class IsolatedReplay(Generic[IW, O]):
    """Run every worker's timeline separately; same results as `ReplayLoop`."""

    def __init__(self, pools: Sequence[Pool[IW]], handler: IsolatedHandler[IW, O], time_cap_ms: float | None = None,
                 progress: Callable[[float | None], None] | None = None) -> None:
        self.pools = list(pools)
        self.handler = handler
        self.time_cap_ms = time_cap_ms
        self.now = 0.0
        self._progress = progress

    def run(self) -> float:
        """Run to the end (or the time cap); returns the last instant the shared clock visits."""
        cap = INF if self.time_cap_ms is None else self.time_cap_ms
        deliveries = self.handler.route_ahead(cap)
        instants = [np.fromiter((d[0] for d in deliveries), float, len(deliveries))]
        by_worker: dict[int, list[tuple[float, IW, int, Any]]] = {}
        for delivery in deliveries:
            by_worker.setdefault(id(delivery[1]), []).append(delivery)
        del deliveries  # each worker's list is consumed as it runs, so finished requests are freed
        workers = [w for pool in self.pools for w in pool.workers]
        endings = [self._run_worker(w, by_worker.pop(id(w), []), cap) for w in workers]
        if Ending.CAPPED not in endings and Ending.STUCK in endings:
            raise dead_end_error(self.handler.in_flight(), any(w.holds_requests() for w in workers))
        instants += [np.frombuffer(w.pass_ends, float) if len(w.pass_ends) else np.empty(0) for w in workers]
        self._integrate(np.unique(np.concatenate(instants)), cap)
        return self.now

    def _run_worker(self, worker: IW, deliveries: list[tuple[float, IW, int, Any]], cap: float) -> Ending:
        """Replay one worker's instants, handing over (and dropping) its deliveries; returns how
        its timeline ended."""
        finish = self.handler.finish_pass
        progress = self._progress
        deliveries.reverse()  # the next one last
        pending: O | None = None
        steps = 0
        while True:
            arrival = deliveries[-1][0] if deliveries else INF
            end = pending.end_ms if pending is not None else INF
            now = end if end < arrival else arrival
            if now == INF:
                return Ending.STUCK if worker.holds_requests() else Ending.DONE
            if now > cap:
                return Ending.CAPPED
            if now > MAX_MS:
                raise clock_overflow(now)
            if end == now:
                assert pending is not None
                finish(worker, pending, now, False)
                pending = None
            while deliveries and deliveries[-1][0] == now:
                _, _, rank, request = deliveries.pop()
                worker.enqueue(rank, request)
            if pending is None:
                horizon = deliveries[-1][0] if deliveries else INF
                pending = self._start_passes(worker, now, horizon if horizon < cap else cap)
            steps += 1
            if progress is not None and not steps & 0x3FF:
                progress(None)  # each worker has its own clock: no single simulated time

    def _start_passes(self, worker: IW, now: float, horizon: float) -> O | None:
        """Start passes on `worker` at `now` (zero-duration ones complete at once, as in
        `ReplayLoop`); returns the pass left in flight."""
        while worker.runnable():
            outcome = worker.start_pass(now, horizon, through_finishes=True)
            if outcome.end_ms > now:
                return outcome
            effect = self.handler.finish_pass(worker, outcome, now, True)
            if not (outcome.has_effect or effect):
                worker.parked = True
        return None

    def _integrate(self, instants: np.ndarray, cap: float) -> None:
        """Worker-seconds over the shared clock's instants, summed in the same order."""
        instants = instants[instants <= cap]
        if not len(instants):
            return
        steps = np.diff(instants, prepend=0.0)
        for pool in self.pools:
            terms = (steps * len(pool.workers)) / 1000
            pool.worker_seconds = float(np.add.accumulate(terms)[-1])
        self.now = float(instants[-1])
