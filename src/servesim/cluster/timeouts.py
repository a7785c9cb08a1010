"""Clients that give up (`traffic.client_timeout_seconds`, servesim extension): the cluster's
bookkeeping.

At a request's deadline (its send time + the timeout) the driver and the router hear that it
ended; its worker drops it at once when idle, else at the end of its running pass (the KV is
freed at that pass boundary). Its record is closed as timed out at the deadline with the tokens
its client received by then (`traffic.timeouts.spans_until`).
"""

from __future__ import annotations

from collections.abc import Callable

from servesim.engine.request import EngineRequest
from servesim.engine.rank import RankPass
from servesim.engine.worker import Worker
from servesim.traffic.timeouts import Deadlines

Place = tuple[Worker, int, EngineRequest]
"""Where a request runs: its worker, its rank on that worker, and the engine's request."""


class ClientTimeouts:
    """The deadline and the place of every request in flight, and the requests given up on
    during each worker's running pass."""

    def __init__(self, timeout_ms: float) -> None:
        self.timeout_ms = timeout_ms
        self._deadlines = Deadlines(timeout_ms)
        self._placed: dict[int, Place] = {}
        self._abandoned: dict[Worker, list[tuple[Place, float]]] = {}

    def watch(self, rid: int, sent_ms: float, now: float, place: Place) -> None:
        """Start the clock of a request sent at `sent_ms` and placed at `now`."""
        self._deadlines.add(rid, sent_ms, now)
        self._placed[rid] = place

    def place(self, rid: int) -> Place | None:
        """Where open request `rid` runs (None if it is not watched)."""
        return self._placed.get(rid)

    def abandoned(self, rid: int) -> bool:
        """Whether request `rid` was given up on and waits for its worker's pass to end."""
        return any(place[2].rid == rid for places in self._abandoned.values() for place, _ in places)

    def forget(self, rid: int) -> None:
        """The request ended: its clock stops."""
        self._placed.pop(rid, None)

    def next_time(self, is_open: Callable[[int], bool]) -> float:
        return self._deadlines.next_time(is_open)

    def due(self, now: float, is_open: Callable[[int], bool]) -> list[Place]:
        """The places of the open requests whose clients give up now, in deadline order."""
        return [self._placed[rid] for rid in self._deadlines.due(now, is_open)]

    def defer(self, place: Place, deadline: float) -> None:
        """Drop a request at the end of its worker's running pass."""
        self._abandoned.setdefault(place[0], []).append((place, deadline))

    def take_abandoned(self, worker: Worker) -> list[tuple[Place, float]]:
        """The requests to drop at this pass boundary of `worker`, with their deadlines."""
        return self._abandoned.pop(worker, []) if self._abandoned else []


def without(results: list[tuple[int, RankPass]], gone: set[int]) -> None:
    """Remove the requests `gone` (by id) from the pass records: their clients left before the
    pass ended, so nobody hears of their first token, completion or rejection."""
    for _rank, result in results:
        result.first_tokens = [r for r in result.first_tokens if r.rid not in gone]
        result.finished = [r for r in result.finished if r.rid not in gone]
        result.rejected = [r for r in result.rejected if r.rid not in gone]
