"""Worker lifecycle of one pool: starting → active → draining → removed.

Scaling up adds workers with the next unused ids; they are *starting* until their startup delay
has passed (then *active*: the router may place on them). Scaling down picks the highest ids
first: a starting worker is cancelled at once, an active one starts *draining* — it gets no new
requests, finishes the ones it has, and is removed when it holds none. Every worker that is not
removed is provisioned and counts for worker-seconds and GPU-hours.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from servesim.engine.worker import Worker
from servesim.placement.base import Router



class WorkerState(StrEnum):
    """Where a worker is in its lifecycle."""

    STARTING = "starting"
    ACTIVE = "active"
    DRAINING = "draining"
    REMOVED = "removed"


STARTING, ACTIVE, DRAINING, REMOVED = (WorkerState.STARTING, WorkerState.ACTIVE, WorkerState.DRAINING,
                                      WorkerState.REMOVED)


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Transition:
    """One worker changing state."""

    at_ms: float
    pool: str
    worker_id: int
    state: WorkerState
    reason: str


class Fleet:
    """The workers of one pool and their states."""

    def __init__(self, name: str, workers: list[Worker], provisioned: list[Worker], router: Router,
                 make_worker: Callable[[int], Worker], startup_ms: float) -> None:
        self.name = name
        self.router = router
        self.startup_ms = startup_ms
        self._make_worker = make_worker
        self.provisioned = provisioned
        """The runtime's list of provisioned workers (worker-seconds are integrated over it)."""
        self.by_id: dict[int, Worker] = {w.worker_id: w for w in workers}
        self.state: dict[int, WorkerState] = {w.worker_id: ACTIVE for w in workers}
        self.ready_at: dict[int, float] = {}
        self.activated_at: dict[int, float] = {w.worker_id: 0.0 for w in workers}
        self._next_id = len(workers)

    # -- views --------------------------------------------------------------------------------

    def release(self) -> None:
        """At the end of a run: drop the worker factory (it closes over the cluster, a reference
        cycle), so the run's objects are freed with their last reference."""
        self._make_worker = _no_more_workers

    def ids(self, state: WorkerState) -> list[int]:
        return sorted(w for w, s in self.state.items() if s == state)

    @property
    def non_draining(self) -> int:
        return len(self.ids(ACTIVE)) + len(self.ids(STARTING))

    def next_ready(self) -> float:
        return min(self.ready_at.values(), default=float("inf"))

    # -- changes ------------------------------------------------------------------------------

    def scale_to(self, target: int, now: float, reason: str) -> list[Transition]:
        """Move toward `target` non-draining workers."""
        current = self.non_draining
        if target > current:
            return [t for _ in range(target - current) for t in self._add(now, reason)]
        victims = sorted(self.ids(STARTING) + self.ids(ACTIVE), reverse=True)[: current - target]
        return [t for worker_id in victims for t in self._retire(worker_id, now, reason)]

    def _add(self, now: float, reason: str) -> list[Transition]:
        worker = self._make_worker(self._next_id)
        self._next_id += 1
        self.by_id[worker.worker_id] = worker
        self.provisioned.append(worker)
        if self.startup_ms > 0:
            self.state[worker.worker_id] = STARTING
            self.ready_at[worker.worker_id] = now + self.startup_ms
            return [Transition(now, self.name, worker.worker_id, STARTING, reason)]
        return self._activate(worker.worker_id, now, reason)

    def _activate(self, worker_id: int, now: float, reason: str) -> list[Transition]:
        self.state[worker_id] = ACTIVE
        self.activated_at[worker_id] = now
        self.router.worker_added(worker_id)
        return [Transition(now, self.name, worker_id, ACTIVE, reason)]

    def _retire(self, worker_id: int, now: float, reason: str) -> list[Transition]:
        if self.state[worker_id] == STARTING:
            del self.ready_at[worker_id]
            return self._remove(worker_id, now, "startup_cancelled")
        self.state[worker_id] = DRAINING
        self.router.worker_draining(worker_id)
        out = [Transition(now, self.name, worker_id, DRAINING, reason)]
        if self._idle(worker_id):
            out += self._remove(worker_id, now, "drained")
        return out

    def _remove(self, worker_id: int, now: float, reason: str) -> list[Transition]:
        self.state[worker_id] = REMOVED
        self.provisioned.remove(self.by_id[worker_id])
        self.router.worker_removed(worker_id)
        return [Transition(now, self.name, worker_id, REMOVED, reason)]

    def _idle(self, worker_id: int) -> bool:
        worker = self.by_id[worker_id]
        return not worker.busy and not worker.holds_requests()

    def ready(self, now: float) -> list[Transition]:
        """Workers whose startup ends now become active."""
        due = [w for w, at in self.ready_at.items() if at == now]
        out = []
        for worker_id in sorted(due):
            del self.ready_at[worker_id]
            out += self._activate(worker_id, now, "worker_ready")
        return out

    def settle_drained(self, now: float) -> list[Transition]:
        """Remove draining workers that finished their last request."""
        return [t for w in self.ids(DRAINING) if self._idle(w) for t in self._remove(w, now, "drained")]


def _no_more_workers(worker_id: int) -> Worker:
    raise RuntimeError("the run has ended: its fleet makes no more workers")
