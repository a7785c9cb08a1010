"""Round-robin placement: workers in rotation, and within a worker its DP ranks in rotation."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True, frozen=True)
class Placement:
    """Where a request goes: a worker, one of its DP ranks, and what the router credited."""

    worker: int
    rank: int
    overlap_tokens: int = 0


class RoundRobin:
    """Cycles over the active workers; each worker cycles over its own ranks."""

    def __init__(self, worker_ids: list[int], ranks_per_worker: int) -> None:
        self._active = list(worker_ids)
        self._ranks = ranks_per_worker
        self._next_worker = 0
        self._next_rank = {w: 0 for w in worker_ids}

    def place(self, request: object) -> Placement:
        index = self._next_worker % len(self._active)
        worker = self._active[index]
        self._next_worker = index + 1
        rank = self._next_rank[worker]
        self._next_rank[worker] = (rank + 1) % self._ranks
        return Placement(worker, rank)

    def worker_added(self, worker_id: int) -> None:
        self._active.append(worker_id)
        self._active.sort()
        self._next_rank[worker_id] = 0

    def worker_removed(self, worker_id: int) -> None:
        self._active.remove(worker_id)
        self._next_rank.pop(worker_id, None)


class FlatRoundRobin:
    """Cycles over every (worker, rank) scheduler of a pool, workers in order."""

    def __init__(self, workers: list[tuple[int, int]]) -> None:
        self._schedulers = [(w, r) for w, ranks in workers for r in range(ranks)]
        self._next = 0

    def place(self) -> tuple[int, int]:
        index = self._next % len(self._schedulers)
        self._next = index + 1
        return self._schedulers[index]
