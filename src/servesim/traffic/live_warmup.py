"""The `live_trajectory_v1` warm-up of a continuous profile (AISimulate 0.13's
`agentic_warmup_policy`), as read from 0.13's runs (tests/cases/weka_live).

1. Primers: every lane's primers (the `agentic_snapshots` ones, numbered as in
   `repeated_prefixes`) replay live against one cut instant: primer k of a lane cut at t* is
   sent at T − (t* − its recorded start) / speedup, T the largest such lead (the earliest primer
   at 0), each on its own; one-token answers.
2. Trajectories: when the last primer has ended every lane plays its trajectory — its snapshot
   play's replayed requests, then the corpus' next plays as a profile starts them — with
   one-token answers, every dependency delay and recorded-start hold dropped, at most
   `WARMUP_REQUESTS` requests a lane. These are the plays' own requests (UUIDs, identities),
   listed in `agentic_phases` as phase `warmup`.
3. Barrier and hand-off: when none is in flight the barrier falls and the profile starts; the
   plays go on where they stopped, as if cut there (what the warm-up sent is history): every
   request then ready, or with a parent in history, is held until (recorded start − T0) /
   speedup after the barrier, T0 the earliest recorded start among them, and waits for its
   parents still to come; the others follow their parents as recorded.

The report covers the measured requests: a play's trajectory counts its measured requests only
and starts at the barrier when the play was running then; plays the warm-up ran to their end are
not trajectories (they move the corpus cursor all the same).
"""

from __future__ import annotations

import heapq
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from servesim.traffic.agentic_driver import PREP_BASE
from servesim.traffic.driver import Arrival
from servesim.traffic.profile import ProfileDriver, ProfilePlan
from servesim.traffic.warmup import WARMUP_REQUESTS, PrepRequest

if TYPE_CHECKING:
    from servesim.collect.collector import RequestRecord
    from servesim.traffic.agentic import AgenticGraph
    from servesim.traffic.warmup import Preparation

POLICY = "live_trajectory_v1"


class LiveProfileDriver(ProfileDriver):
    """A `ProfileDriver` whose warm-up is `live_trajectory_v1` (see the module docstring)."""

    def __init__(self, graph: AgenticGraph, plan: ProfilePlan, frontend_ms: float = 0.0,
                 preparation: Preparation | None = None) -> None:
        super().__init__(graph, plan, frontend_ms=frontend_ms, preparation=preparation)
        assert preparation is not None
        preparation.policy = POLICY
        self._phase = "primers"
        self._ready = primer_schedule(graph, preparation, plan.speedup)
        heapq.heapify(self._ready)
        self._sent_by_lane = [0] * plan.lanes
        self._deferred: list[int] = []
        """Trajectory requests ready once their lane had sent its share: sent after the barrier."""
        self._warm: dict[int, PrepRequest] = {}
        """The trajectory requests the warm-up sent, by node."""
        self._measured_plays: list[int] = []
        self._plays_at_barrier: int | None = None

    # -- the warm-up's phases -------------------------------------------------------------------

    def _prepared(self, k: int, now: float) -> None:
        """A primer ended; after the last one the lanes play their trajectories from `now`."""
        prep = self.preparation
        assert prep is not None
        prep.ended += 1
        if prep.failed is None and prep.ended == len(prep.requests):
            self._phase = "trajectory"
            for _, i in self._held:
                self._ready_at[i] = now
                heapq.heappush(self._ready, (now, i))
            self._held = []

    def next_ready_time(self) -> float:
        return float("inf") if self._phase == "aborted" else super().next_ready_time()

    def drained(self) -> bool:
        return self._phase == "aborted" or super().drained()

    def release(self, now: float) -> list[Arrival]:
        if self._phase == "aborted":
            return []
        if self._phase != "trajectory":
            return super().release(now)
        out: list[Arrival] = []
        ready = self._ready
        while self._drop_aborted() and ready[0][0] <= now:
            batch = []
            while ready and ready[0][0] <= now:
                batch.append(heapq.heappop(ready))
            # requests due together go lane after lane (as in 0.13), in node order within a lane
            for t, i in sorted(batch, key=lambda e: (e[0], self._lane[self._play[e[1]]], e[1])):
                if self._play[i] in self._aborted_by:
                    continue
                lane = self._lane[self._play[i]]
                if self._sent_by_lane[lane] >= WARMUP_REQUESTS:
                    self._deferred.append(i)
                    continue
                self._sent_by_lane[lane] += 1
                self._check_idle(i, t)
                self._fire(i, t, "dispatch")
                out.append(self._emit(i, t))
        return out

    def on_terminal(self, arrival: Arrival, now: float, emitted: int, *, ends_session: bool = False,
                    completed: bool = True) -> None:
        i = arrival.session_index
        if self._phase == "trajectory" and i in self._warm and (not completed or ends_session):
            self._abort(i)  # a trajectory request that does not complete aborts the preparation
        super().on_terminal(arrival, now, emitted, ends_session=ends_session, completed=completed)
        if self._phase == "trajectory" and not self._in_flight and not self._sendable():
            self._barrier(now)

    def _abort(self, i: int) -> None:
        """Trajectory request `i` ended without completing: nothing more is sent, no barrier."""
        prep = self.preparation
        assert prep is not None
        if prep.failed is None:
            prep.failed = prep.requests.index(self._warm[i])
        self._phase = "aborted"
        self._ready = []
        self._deferred = []

    def _sendable(self) -> bool:
        """Whether a lane with requests left to send has one ready."""
        return any(i < PREP_BASE and self._sent_by_lane[self._lane[self._play[i]]] < WARMUP_REQUESTS
                   for _, i in self._ready)

    def _fire(self, i: int, at: float, trigger: str) -> None:
        if self._phase != "trajectory":
            super()._fire(i, at, trigger)
            return
        for child, dep in self.graph.children[i]:  # no delays during the warm-up
            if dep.trigger != trigger:
                continue
            self._waiting[child] -= 1
            if not self._waiting[child]:
                self._ready_at[child] = at
                heapq.heappush(self._ready, (at, child))

    def _instantiate(self, lane: int, now: float) -> None:
        if self._phase == "aborted":
            return
        base = len(self.graph.nodes)
        super()._instantiate(lane, now)
        if self._phase == "trajectory":  # its requests go as soon as their parents ended
            self._ready = [(now if i >= base and i < PREP_BASE else t, i) for t, i in self._ready]
            heapq.heapify(self._ready)
            for i in range(base, len(self.graph.nodes)):
                self._ready_at[i] = now

    def _emit(self, i: int, t: float) -> Arrival:
        if self._phase != "trajectory" or i >= PREP_BASE:
            return super()._emit(i, t)
        arrival = super()._emit(i, t)
        self._warm[i] = self._warm_entry(i)
        return replace(arrival, max_output_tokens=1)

    def _warm_entry(self, i: int) -> PrepRequest:
        """The `agentic_phases` entry of trajectory request `i`."""
        assert self.preparation is not None
        node = self.graph.nodes[i]
        play = node.play_id
        identity = self._identities()[play, node.request_id]
        numbers = self.graph.uuid_numbers
        number = numbers[i] if numbers is not None else i + 1
        text = f"{number:032x}"
        entry = PrepRequest(self._lane[self._play[i]], "warmup", identity["request_id"], node, identity,
                            f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}")
        self.preparation.requests.append(entry)
        return entry

    def _identities(self) -> dict[tuple[str, str], dict[str, str]]:
        """(play, source request id) → the request's identity, from the `agentic_snapshots` entries."""
        entries = self.graph.summary_fields.get("agentic_snapshots")
        out: dict[tuple[str, str], dict[str, str]] = {}
        for entry in entries if isinstance(entries, list) else []:
            for q in entry["requests"]:
                out[entry["play_id"], q["source_request_id"]] = q["identity"]
        return out

    def _barrier(self, now: float) -> None:
        """Nothing of the warm-up is in flight: the profile starts and the plays go on."""
        prep = self.preparation
        assert prep is not None
        self._phase = "measured"
        prep.barrier_ms = now
        if prep.on_barrier is not None:
            prep.on_barrier(now)
        self._start(now)
        self.first_request_ms = None
        self.successes = 0
        self.last_success_ms = None
        starts = self._recorded_starts()
        ready = self._deferred + [i for _, i in self._ready if i < PREP_BASE]
        self._deferred = []
        self._measured_plays = [p for p in range(len(self.graph.play_ids)) if self._size[p] > self._ended[p]]
        # a cut at the barrier: what the warm-up sent is history; a request that is ready, or
        # lost a parent to history, is held to its recorded start (counted from the earliest)
        held = list(ready) + [i for p in self._measured_plays for i in self._members[p]
                              if self._waiting[i] and not self._released[i]
                              and any(j in self._warm for j, _ in self.graph.parents[i])]
        origin = min((starts[self.graph.nodes[i].play_id, self.graph.nodes[i].request_id] for i in held),
                     default=0.0)
        for i in held:
            node = self.graph.nodes[i]
            self._ready_at[i] = now + (starts[node.play_id, node.request_id] - origin) / self.plan.speedup
        self._ready = [(self._ready_at[i], i) for i in ready]
        heapq.heapify(self._ready)
        self._plays_at_barrier = len(self.graph.play_ids)
        if self.graph.play_starts is not None:
            for p in self._measured_plays:
                self.graph.play_starts[self.graph.play_ids[p]] = 0.0

    def _recorded_starts(self) -> dict[tuple[str, str], float]:
        """(play, source request id) → its recorded start in its play (from the play's first request)."""
        entries = self.graph.summary_fields.get("agentic_snapshots")
        return {(entry["play_id"], q["source_request_id"]): q["recorded_start_ms"]
                for entry in (entries if isinstance(entries, list) else []) for q in entry["requests"]}

    # -- the report -----------------------------------------------------------------------------

    def settle(self, records: list[RequestRecord]) -> list[RequestRecord]:
        """The warm-up's trajectory requests go to `agentic_phases`; the plays' measured sizes
        are set for the trajectory statistics."""
        out = []
        for record in super().settle(records):
            entry = self._warm.get(record.node)
            if entry is None:
                out.append(record)
            else:
                entry.record = record
        if self._plays_at_barrier is None:  # aborted: no trajectory was measured (as 0.13)
            self.graph.measured_sizes = {}
            return out
        warm = [0] * len(self.graph.play_ids)
        for i in self._warm:
            warm[self._play[i]] += 1
        self.graph.measured_sizes = {self.graph.play_ids[p]: self._size[p] - warm[p] for p in self._reported_plays()}
        return out

    def _reported_plays(self) -> list[int]:
        """The plays running at the barrier, then those started after it (none before it)."""
        if self._plays_at_barrier is None:
            return []
        return self._measured_plays + list(range(self._plays_at_barrier, len(self.graph.play_ids)))

    def report(self) -> dict[str, Any]:
        block = super().report()
        if self._aborted() or self.preparation is None or self.preparation.barrier_ms is None:
            block["plays_started"] = 0  # the warm-up's plays are no profile plays (as 0.13)
            return block
        plays = self._reported_plays()
        warm = len(self._warm)
        sent = sum(self._sent[p] for p in plays)
        block["issued_requests"] = sum(self._sent) - warm
        block["never_issued_requests"] = sum(self._size[p] for p in plays) - sent
        block["plays_started"] = block["retired_plays"] = len(plays)
        block["server_quiescent_plays"] = len(plays) - len(self.grace.canceled_plays)
        block["client_completed_plays"] = sum(
            1 for p in plays if self._ended[p] == self._size[p]
            and (p not in self._aborted_by or p in self._canceled_plays))
        return block


def primer_schedule(graph: AgenticGraph, preparation: Preparation, speedup: float) -> list[tuple[float, int]]:
    """(send time, PREP_BASE + k) of every primer: against one cut instant (module docstring)."""
    entries = graph.summary_fields.get("agentic_snapshots")
    cuts = {e["play_id"]: e for e in (entries if isinstance(entries, list) else [])}
    leads = []
    for r in preparation.requests:
        entry = cuts[r.identity["play_id"]]
        start = next(q["recorded_start_ms"] for q in entry["requests"] if q["source_request_id"] == r.source.request_id)
        leads.append((entry["t_star_ms"] - start) / speedup)
    top = max(leads, default=0.0)
    return [(top - lead, PREP_BASE + k) for k, lead in enumerate(leads)]
