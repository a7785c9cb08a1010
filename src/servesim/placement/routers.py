"""Routing policies: which (worker, DP rank) serves each arriving request.

All follow `servesim.placement.base.Router`.

* `RoundRobin` (in `round_robin.py`) — the reference's default.
* `RandomRouter` — uniform over the active workers, then their ranks.
* `LeastLoaded` — the (worker, rank) with the fewest requests in flight.
* `KvRouter` — Dynamo's KV-aware router: prefix overlap from an index of every rank's cached
  blocks, its own ledger of active blocks and prefill load, and the cost
  ``s · max(0, prefill_blocks − (c · overlap + h · host + d · disk)) + potential_decode_blocks
  + w · active_requests``, where `host` and `disk` are the prefix blocks a rank holds in its host
  tier right after its GPU overlap and on disk right after those (Dynamo's host- and disk-tier
  hit weights, with `kv_cache.host_offload` / `g3_offload`).

`SessionAffinity` wraps any policy so that a session's later turns follow its first turn.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from servesim.placement.base import Placement, RouteRequest, Router, Slot, StateFreeRouter

class RandomRouter(StateFreeRouter):
    """Uniformly random (worker, rank)."""

    def _choose(self, request: RouteRequest, now: float) -> tuple[Slot, int]:
        return self.rng.choice(self.slots()), 0

    @property
    def places_in_bulk(self) -> bool:
        return self.ranks == 1 and bool(self.workers)

    def place_many(self, count: int) -> list[int]:
        choice, slots = self.rng.choice, self.slots()
        return [choice(slots)[0] for _ in range(count)]


class LeastLoaded(Router):
    """The (worker, rank) with the fewest requests in flight; ties at random."""

    def _choose(self, request: RouteRequest, now: float) -> tuple[Slot, int]:
        slots = self.slots()
        fewest = min(self.in_flight[s] for s in slots)
        return self.rng.choice([s for s in slots if self.in_flight[s] == fewest]), 0


@dataclass
class KvRouterSettings:
    """The KV router's knobs (Dynamo's `KvRouterConfig` names in the comments)."""

    block_size: int
    overlap_credit: float = 1.0          # overlap_score_credit
    prefill_scale: float = 1.0           # prefill_load_scale
    temperature: float = 0.0             # router_temperature
    credit_decay: float = 0.0            # overlap_score_credit_decay
    request_weight: float = 0.0          # decode_active_request_weight
    host_weight: float = 0.75            # host_cache_hit_weight
    disk_weight: float = 0.25            # disk_cache_hit_weight
    track_prefill: bool = True           # router_track_prefill_tokens
    track_blocks: bool = True            # router_track_active_blocks
    assume_reuse: bool = True            # router_assume_kv_reuse
    prefill_duration: Callable[[int, int], float] | None = None
    """With the 'ais' prefill load model: expected prefill ms for (prompt, cached tokens)."""


@dataclass(slots=True)
class _Prefill:
    tokens: int
    start: float
    duration: float | None


@dataclass(slots=True)
class _SlotLoad:
    """The router's own ledger of one rank's load."""

    blocks: dict[int, int] = field(default_factory=dict)
    """Shareable active blocks by key, reference-counted across requests."""
    private_blocks: int = 0
    """Active blocks no other request can share (counted, never de-duplicated)."""
    prefills: dict[int, _Prefill] = field(default_factory=dict)
    requests: int = 0

    def prefill_tokens(self, now: float) -> float:
        """Prefill tokens still charged at `now` (linearly aged when durations are known)."""
        entries = list(self.prefills.values())
        if not entries:
            return 0.0
        if any(e.duration is None for e in entries):
            return float(sum(e.tokens for e in entries))
        total = 0.0
        elapsed = now - min(e.start for e in entries)
        for entry in entries:  # oldest first: elapsed time past one entry ages the next
            duration = entry.duration
            assert duration is not None
            left = max(0.0, 1 - elapsed / duration) if duration > 0 else 0.0
            total += entry.tokens * left
            elapsed = max(0.0, elapsed - duration)
        return total


@dataclass(slots=True)
class _Tracked:
    slot: Slot
    keys: list[int]
    private_blocks: int


class KvRouter(Router):
    """Dynamo's KV-aware router."""

    wants_kv_events = True

    def __init__(self, ranks_per_worker: int, settings: KvRouterSettings, seed: int = 0) -> None:
        super().__init__(ranks_per_worker, seed)
        self.settings = settings
        self.cached: dict[int, set[Slot]] = {}
        """Indexer: block key → the ranks holding it, as the engines' KV events said."""
        self.tiers: dict[str, dict[int, set[Slot]]] = {"host": {}, "disk": {}}
        """The same for the ranks' host tiers and their workers' disks (`host_…`/`disk_…` events)."""
        self.load: dict[Slot, _SlotLoad] = {}
        self._tracked: dict[int, _Tracked] = {}

    def worker_added(self, worker_id: int) -> None:
        super().worker_added(worker_id)
        for r in range(self.ranks):
            self.load[(worker_id, r)] = _SlotLoad()

    def worker_removed(self, worker_id: int) -> None:
        super().worker_removed(worker_id)
        for index in (self.cached, *self.tiers.values()):
            for key in list(index):
                holders = index[key]
                holders.difference_update((worker_id, r) for r in range(self.ranks))
                if not holders:
                    del index[key]

    # -- overlap and cost ------------------------------------------------------------------

    def overlaps(self, keys: list[int]) -> dict[Slot, int]:
        """Leading blocks of `keys` each rank holds (absent = 0); cost ∝ the request's blocks."""
        scores: dict[Slot, int] = {}
        if not keys:
            return scores
        survivors = set(self.cached.get(keys[0], ()))
        depth = 0
        for key in keys:
            holders = self.cached.get(key)
            if holders is None:
                break
            dropped = survivors - holders
            for slot in dropped:
                scores[slot] = depth
            survivors -= dropped
            if not survivors:
                break
            depth += 1
        for slot in survivors:
            scores[slot] = depth
        return scores

    def costs(self, request: RouteRequest, now: float) -> dict[Slot, tuple[float, int]]:
        """Cost and overlap (blocks) of every active rank for this request."""
        s = self.settings
        bs = s.block_size
        overlaps = self.overlaps(request.block_keys)
        isl = request.prompt_len
        loads = {slot: self.load[slot] for slot in self.slots()}
        prefill = {slot: load.prefill_tokens(now) if s.track_prefill else 0.0 for slot, load in loads.items()}
        least_prefill = min(prefill.values()) if prefill else 0.0
        request_blocks = max(1, -(-isl // bs))
        out = {}
        tiered = bool(self.tiers["host"] or self.tiers["disk"]) and (s.host_weight or s.disk_weight)
        for slot, load in loads.items():
            overlap = overlaps.get(slot, 0)
            raw = (prefill[slot] + isl) / bs if s.track_prefill else 0.0
            decay = 1.0
            if s.credit_decay and s.track_prefill:
                decay = 1 / (1 + s.credit_decay * ((prefill[slot] - least_prefill) / bs) / request_blocks)
            credit = s.overlap_credit * overlap
            if tiered:
                credit += self._tier_credit(slot, request.block_keys, overlap)
            adjusted = max(0.0, raw - decay * credit)
            cost = s.prefill_scale * adjusted + self._decode_blocks(load, request) + s.request_weight * load.requests
            out[slot] = (cost, overlap)
        return out

    def _tier_credit(self, slot: Slot, keys: list[int], start: int) -> float:
        """h · the blocks from `start` on the rank's host tier holds + d · those after them its
        worker's disk holds."""
        s = self.settings
        host = _run_length(self.tiers["host"], slot, keys, start)
        disk = _run_length(self.tiers["disk"], slot, keys, start + host)
        return s.host_weight * host + s.disk_weight * disk

    def _decode_blocks(self, load: _SlotLoad, request: RouteRequest) -> int:
        """Active blocks on the rank once this request's prompt blocks join them."""
        if not self.settings.track_blocks:
            return 0
        active = len(load.blocks) + load.private_blocks
        if self.settings.assume_reuse:
            added = sum(1 for k in request.block_keys if k not in load.blocks)
        else:
            added = len(request.block_keys)
        return active + added + request.private_blocks

    def _choose(self, request: RouteRequest, now: float) -> tuple[Slot, int]:
        costs = self.costs(request, now)
        slot = self._select(costs)
        return slot, costs[slot][1] * self.settings.block_size

    def _select(self, costs: dict[Slot, tuple[float, int]]) -> Slot:
        """Argmin with uniformly random ties (T = 0), else softmax over normalised costs."""
        slots = list(costs)
        values = [costs[s][0] for s in slots]
        low, high = min(values), max(values)
        if self.settings.temperature <= 0:
            return self.rng.choice([s for s, v in zip(slots, values, strict=True) if v == low])
        if high == low:
            return self.rng.choice(slots)
        weights = [math.exp(-(v - low) / ((high - low) * self.settings.temperature)) for v in values]
        return self.rng.choices(slots, weights)[0]

    # -- the ledger --------------------------------------------------------------------------

    def _commit(self, slot: Slot, request: RouteRequest, overlap: int, now: float) -> None:
        super()._commit(slot, request, overlap, now)
        s = self.settings
        load = self.load[slot]
        load.requests += 1
        keys = request.block_keys if s.track_blocks and s.assume_reuse else []
        private = request.private_blocks + (len(request.block_keys) if s.track_blocks and not s.assume_reuse else 0)
        if s.track_blocks:
            for key in keys:
                load.blocks[key] = load.blocks.get(key, 0) + 1
            load.private_blocks += private
        if s.track_prefill:
            tokens = request.prompt_len - min(overlap, request.prompt_len)
            if tokens > 0:
                duration = s.prefill_duration(request.prompt_len, overlap) if s.prefill_duration else None
                load.prefills[request.rid] = _Prefill(tokens, now, duration)
        self._tracked[request.rid] = _Tracked(slot, keys, private if s.track_blocks else 0)

    def on_first_token(self, rid: int, now: float) -> None:
        tracked = self._tracked.get(rid)
        if tracked is not None and tracked.slot in self.load:
            self.load[tracked.slot].prefills.pop(rid, None)

    def on_terminal(self, rid: int, now: float) -> None:
        super().on_terminal(rid, now)
        tracked = self._tracked.pop(rid, None)
        if tracked is None or tracked.slot not in self.load:
            return
        load = self.load[tracked.slot]
        load.requests -= 1
        load.prefills.pop(rid, None)
        load.private_blocks -= tracked.private_blocks
        for key in tracked.keys:
            left = load.blocks[key] - 1
            if left:
                load.blocks[key] = left
            else:
                del load.blocks[key]

    def on_kv_events(self, slot: Slot, events: list[tuple[str, int]], now: float) -> None:
        for kind, key in events:
            cached = self.cached
            if kind[0] in "hd":  # host_stored, host_removed, disk_stored, disk_removed
                tier, kind = kind.split("_")
                cached = self.tiers[tier]
            if kind == "stored":
                cached.setdefault(key, set()).add(slot)
            else:
                holders = cached.get(key)
                if holders is not None:
                    holders.discard(slot)
                    if not holders:
                        del cached[key]


def _run_length(index: dict[int, set[Slot]], slot: Slot, keys: list[int], start: int) -> int:
    """How many of ``keys[start:]`` `index` says `slot` holds, from `start` up to the first miss."""
    n = 0
    for key in keys[start:]:
        holders = index.get(key)
        if holders is None or slot not in holders:
            break
        n += 1
    return n


class SessionAffinity(Router):
    """Sends a session's later turns to the rank that served its first turn, while it serves;
    everything else is the wrapped policy's."""

    def __init__(self, inner: Router) -> None:
        super().__init__(inner.ranks)
        self.inner = inner
        self.workers = inner.workers
        self.in_flight = inner.in_flight
        self.wants_kv_events = inner.wants_kv_events
        self.state_free = inner.state_free
        """A session's worker depends only on its first turn's placement (and the fleet)."""
        self._bound: dict[str, Slot] = {}

    def place(self, request: RouteRequest, now: float) -> Placement:
        slot = self._bound.get(request.session_id)
        if slot is None or slot[0] not in self.inner.workers:
            placement = self.inner.place(request, now)
            self._bound[request.session_id] = (placement.worker, placement.rank)
            return placement
        overlap = 0
        if isinstance(self.inner, KvRouter):
            overlap = self.inner.overlaps(request.block_keys).get(slot, 0) * self.inner.settings.block_size
        self.inner._commit(slot, request, overlap, now)
        return Placement(slot[0], slot[1], overlap)

    def worker_added(self, worker_id: int) -> None:
        self.inner.worker_added(worker_id)

    def worker_draining(self, worker_id: int) -> None:
        self.inner.worker_draining(worker_id)

    def worker_removed(self, worker_id: int) -> None:
        self.inner.worker_removed(worker_id)

    def on_first_token(self, rid: int, now: float) -> None:
        self.inner.on_first_token(rid, now)

    def on_terminal(self, rid: int, now: float) -> None:
        self.inner.on_terminal(rid, now)

    def on_kv_events(self, slot: Slot, events: list[tuple[str, int]], now: float) -> None:
        self.inner.on_kv_events(slot, events, now)
