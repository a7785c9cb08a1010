"""Round-robin placement (the reference's default): deterministic rotations."""

from __future__ import annotations

from servesim.placement.base import Placement, RouteRequest, Slot, StateFreeRouter


class RoundRobin(StateFreeRouter):
    """Cycles over the active workers; each worker cycles over its own DP ranks."""

    def __init__(self, ranks_per_worker: int) -> None:
        super().__init__(ranks_per_worker)
        self._next_worker = 0
        self._next_rank: dict[int, int] = {}

    def worker_added(self, worker_id: int) -> None:
        super().worker_added(worker_id)
        self._next_rank[worker_id] = 0

    def worker_draining(self, worker_id: int) -> None:
        super().worker_draining(worker_id)
        self._next_rank.pop(worker_id, None)

    def _choose(self, request: RouteRequest, now: float) -> tuple[Slot, int]:
        index = self._next_worker % len(self.workers)
        worker = self.workers[index]
        self._next_worker = index + 1
        rank = self._next_rank[worker]
        self._next_rank[worker] = (rank + 1) % self.ranks
        return (worker, rank), 0

    @property
    def places_in_bulk(self) -> bool:
        return self.ranks == 1 and bool(self.workers)

    def place_many(self, count: int) -> list[int]:
        workers = self.workers
        size = len(workers)
        first = self._next_worker % size
        rotation = workers[first:] + workers[:first]
        placed = (rotation * -(-count // size))[:count]
        self._next_worker = (first + count - 1) % size + 1 if count else self._next_worker
        return placed


class FlatRoundRobin(StateFreeRouter):
    """Cycles over every (worker, rank) of the active workers as one flat list."""

    def __init__(self, ranks_per_worker: int) -> None:
        super().__init__(ranks_per_worker)
        self._next = 0

    def _choose(self, request: RouteRequest, now: float) -> tuple[Slot, int]:
        slots = self.slots()
        index = self._next % len(slots)
        self._next = index + 1
        return slots[index], 0


__all__ = ["FlatRoundRobin", "Placement", "RoundRobin"]
