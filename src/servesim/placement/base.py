"""The contract every routing policy follows, and the bookkeeping they share.

A router answers `place(request, now) -> Placement` for each arriving request and hears about
requests' first tokens and terminal states and — if it wants them — the blocks the engines
cache and evict. Workers join (`worker_added`) and leave (`worker_removed`) as the fleet
scales. Random choices come from a generator owned by the router, seeded from the config.
"""

from __future__ import annotations

import bisect
import random
from dataclasses import dataclass
from typing import NamedTuple


class Placement(NamedTuple):
    """Where a request goes: a worker, one of its DP ranks, and the prefix the router credited
    (a named tuple: one is made per request, several times faster than a frozen dataclass)."""

    worker: int
    rank: int
    overlap_tokens: int = 0


Slot = tuple[int, int]
"""(worker id, DP rank)."""


@dataclass(slots=True, eq=False, repr=False)
class RouteRequest:
    """What a router may know about a request when it arrives."""

    rid: int
    session_id: str
    prompt_len: int
    block_keys: list[int]
    """Chained keys of the prompt's full blocks that other requests could share."""
    private_blocks: int
    """Full prompt blocks after those, whose content only this request has."""


class Router:
    """Base of the policies: the active (worker, rank) slots and the requests in flight on each."""

    def __init__(self, ranks_per_worker: int, seed: int = 0) -> None:
        self.ranks = ranks_per_worker
        self.workers: list[int] = []
        self.rng = random.Random(seed)
        self.in_flight: dict[Slot, int] = {}
        self._slot_of: dict[int, Slot] = {}

    def slots(self) -> list[Slot]:
        return [(w, r) for w in self.workers for r in range(self.ranks)]

    def worker_added(self, worker_id: int) -> None:
        """A worker joins; `workers` stays sorted (new workers have the highest ids, so this is
        an append, and adding n workers takes linear time)."""
        if self.workers and worker_id < self.workers[-1]:
            bisect.insort(self.workers, worker_id)
        else:
            self.workers.append(worker_id)
        for r in range(self.ranks):
            self.in_flight[(worker_id, r)] = 0

    def worker_draining(self, worker_id: int) -> None:
        """The worker takes no new requests (it finishes the ones it has)."""
        index = bisect.bisect_left(self.workers, worker_id)
        if index < len(self.workers) and self.workers[index] == worker_id:
            del self.workers[index]

    def worker_removed(self, worker_id: int) -> None:
        """The worker is gone: forget everything about it."""
        self.worker_draining(worker_id)

    def place(self, request: RouteRequest, now: float) -> Placement:
        slot, overlap = self._choose(request, now)
        self._commit(slot, request, overlap, now)
        return Placement(slot[0], slot[1], overlap)

    def _choose(self, request: RouteRequest, now: float) -> tuple[Slot, int]:
        raise NotImplementedError

    def _commit(self, slot: Slot, request: RouteRequest, overlap: int, now: float) -> None:
        self._slot_of[request.rid] = slot
        self.in_flight[slot] = self.in_flight.get(slot, 0) + 1

    def on_first_token(self, rid: int, now: float) -> None:
        """The request's prompt is done."""

    def on_terminal(self, rid: int, now: float) -> None:
        slot = self._slot_of.pop(rid, None)
        if slot is not None and slot in self.in_flight:
            self.in_flight[slot] -= 1

    def on_kv_events(self, slot: Slot, events: list[tuple[str, int]], now: float) -> None:
        """Blocks a rank cached ("stored") or evicted ("removed") in a pass that just ended."""

    wants_kv_events = False
    """Whether the engines should report cached and evicted blocks to this router."""

    state_free = False
    """Whether placements depend only on the order of arrivals (never on what the workers or
    requests in flight are doing), so they can all be made before the run."""


class StateFreeRouter(Router):
    """A policy whose placements depend only on the order of arrivals: it keeps no count of
    the requests in flight, as nothing would read it."""

    state_free = True

    def place(self, request: RouteRequest, now: float) -> Placement:
        slot, overlap = self._choose(request, now)
        return Placement(slot[0], slot[1], overlap)

    def _commit(self, slot: Slot, request: RouteRequest, overlap: int, now: float) -> None:
        """(Nothing to keep: see the class.)"""

    def on_terminal(self, rid: int, now: float) -> None:
        """(Nothing to keep: see the class.)"""

    @property
    def places_in_bulk(self) -> bool:
        """Whether `place_many` can place requests (each worker has one rank and the policy does
        not need to see the requests)."""
        return False

    def place_many(self, count: int) -> list[int]:
        """The workers of the next `count` requests, as `place` would choose them one by one
        (only when `places_in_bulk`)."""
        raise NotImplementedError
