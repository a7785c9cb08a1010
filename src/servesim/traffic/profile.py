"""Continuous agentic profiles (AISimulate 0.13's `agentic_profile`) over a snapshot replay.

Every lane starts with its snapshot play; whenever a lane's play is over (every request it
released ended and it can release no more) the lane starts, at that instant, the next play of
the corpus (`corpus_cursor`, then one more each time, modulo the number of plays), from its
first request: play `agentic-v1:<graph digest>:<seed>:<lane>:<ordinal>` with the lane's next
ordinal, its own KV-cache scope (its prompts share blocks with no other play), its requests'
UUIDs numbered `(ordinal · lanes + lane) · (node count + 1) + source index + 1`. Admission closes
`duration_seconds` after the start: no request is sent at or after the cutoff, no play starts
after it; the requests in flight finish. Incomplete plays are counted but left out of the
trajectory latencies.

The summary's duration is the observation window (first request sent to last successful
response), which the throughputs divide by; worker seconds run to the end (the cutoff, or the
last response after it). The `agentic_profile` block reports the window and its counts as 0.13
does.

Idle caps, as 0.13: when no request is in flight for `global_idle_cap_seconds` (or none of a
play's own for `tree_idle_cap_seconds`) and the next timer concerned (a ready request, or a
waiting one held to a later time) is later still, all those timers move earlier so that the next
fires at the cap; each move is listed in `idle_shifts`. Requests still running at the
response-grace deadline are canceled there (`servesim.traffic.grace`).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any


from servesim.traffic.agentic import AgenticGraph
from servesim.traffic.agentic_driver import PREP_BASE, AgenticDriver
from servesim.traffic.driver import Arrival
from servesim.traffic.grace import GraceDeadline
from servesim.traffic.hash_ids import unique_positions
from servesim.traffic.snapshot import _entry, scoped_hash_ids

if TYPE_CHECKING:
    from servesim.collect.collector import RequestRecord
    from servesim.traffic.warmup import Preparation

SCHEMA = "aisimulate.agentic.profile.v1"
INF = float("inf")


@dataclass(slots=True)
class ProfilePlan:
    """What a continuous profile needs besides the snapshot graph."""

    source: AgenticGraph
    """The trace read at speedup 1 (its plays are the corpus)."""
    corpus: list[str]
    lanes: int
    seed: int
    speedup: float
    cursor: int
    options: dict[str, float]
    """duration, response grace, cancel drain, tree and global idle caps, in seconds."""
    members: dict[str, list[int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for i, node in enumerate(self.source.nodes):
            self.members.setdefault(node.play_id, []).append(i)


class ProfileDriver(AgenticDriver):
    """An `AgenticDriver` whose lanes go on with the corpus' next plays until the cutoff."""

    def __init__(self, graph: AgenticGraph, plan: ProfilePlan, frontend_ms: float = 0.0,
                 preparation: Preparation | None = None) -> None:
        super().__init__(graph, frontend_ms=frontend_ms, preparation=preparation)
        self.plan = plan
        self.start_ms = 0.0
        """When the profile starts: 0, or the warm-up's barrier."""
        self.cutoff_ms = plan.options["duration_seconds"] * 1000.0 if preparation is None else float("inf")
        lane_of = {lane.play_id: lane.lane for lane in graph.snapshot_lanes or []}
        self._lane = [lane_of[p] for p in graph.play_ids]
        self._size = [0] * len(graph.play_ids)
        for p in self._play:
            self._size[p] += 1
        self._sent = [0] * len(graph.play_ids)
        self._ended = [0] * len(graph.play_ids)
        self._ordinal = [0] * plan.lanes
        self._busy = [0] * len(graph.play_ids)
        """Requests of each play in flight."""
        self._idle_since = [0.0] * len(graph.play_ids)
        self._in_flight = 0
        self._server_idle_since = 0.0
        self.first_request_ms: float | None = None
        self.idle_shifts: list[dict[str, Any]] = []
        self._active = {p for p in range(len(graph.play_ids)) if self._size[p]}
        """Plays with requests not sent yet (the only ones an idle cap can move)."""
        self._members: list[list[int]] = [[] for _ in graph.play_ids]
        for i, p in enumerate(self._play):
            self._members[p].append(i)
        self.last_success_ms: float | None = None
        self.successes = 0
        self._canceled_plays: set[int] = set()
        """Plays whose first request to end without completing was canceled at the grace deadline."""
        self.grace = GraceDeadline(at_ms=self.cutoff_ms + plan.options["response_grace_seconds"] * 1000.0)

    # -- the runtime's questions ----------------------------------------------------------------

    def next_ready_time(self) -> float:
        self._drop_aborted()
        shift = self._shift_idle(-INF)
        grace = self.grace.at_ms if self._in_flight and not self.grace.reached else INF
        return min(self._ready[0][0] + self.frontend_ms if self._open() else INF, shift, grace)

    def drained(self) -> bool:
        self._drop_aborted()
        return not self._open() and self._shift_idle(-INF) == INF

    def release(self, now: float) -> list[Arrival]:
        """Like `AgenticDriver.release`, but nothing dispatched at or after the cutoff."""
        self._shift_idle(now)
        if self._in_flight and not self.grace.reached and now >= self.grace.at_ms:
            self.grace.reach()
        out: list[Arrival] = []
        ready, lag = self._ready, self.frontend_ms
        while self._drop_aborted() and self._open() and ready[0][0] + lag <= now:
            t, i = heapq.heappop(ready)
            if i < PREP_BASE:
                self._check_idle(i, t)
                self._fire(i, t, "dispatch")
            out.append(self._emit(i, t))
        return out

    def on_terminal(self, arrival: Arrival, now: float, emitted: int, *, ends_session: bool = False,
                    completed: bool = True) -> None:
        if now > self.grace.at_ms and arrival.session_index < PREP_BASE:  # canceled at the deadline (`settle`)
            completed = False
            play = self._play[arrival.session_index]
            if play not in self._aborted_by:
                self._canceled_plays.add(play)
        super().on_terminal(arrival, now, emitted, ends_session=ends_session, completed=completed)
        if arrival.session_index >= PREP_BASE:  # a warm-up request
            if self.preparation is not None and self.preparation.barrier_ms is not None:
                self._start(self.preparation.barrier_ms)
            return
        play = self._play[arrival.session_index]
        self._ended[play] += 1
        self._busy[play] -= 1
        self._in_flight -= 1
        if not self._busy[play]:
            self._idle_since[play] = now
        if not self._in_flight:
            self._server_idle_since = now
        if completed and not ends_session:
            self.successes += 1
            self.last_success_ms = now if self.last_success_ms is None else max(self.last_success_ms, now)
        if play in self._aborted_by:
            self._active.discard(play)
        over = self._ended[play] == self._sent[play] and (
            self._sent[play] == self._size[play] or play in self._aborted_by)
        if over and now < self.cutoff_ms:
            self._instantiate(self._lane[play], now)

    # -- inside ---------------------------------------------------------------------------------

    def _start(self, at: float) -> None:
        """The warm-up's barrier fell at `at`: the profile starts and its clock with it."""
        self.start_ms = at
        self.cutoff_ms = at + self.plan.options["duration_seconds"] * 1000.0
        self.grace.at_ms = self.cutoff_ms + self.plan.options["response_grace_seconds"] * 1000.0
        self._server_idle_since = at
        self._idle_since = [at] * len(self._idle_since)

    def _open(self) -> bool:
        """Whether a request is ready to be sent before the cutoff."""
        return bool(self._ready) and self._ready[0][0] < self.cutoff_ms

    def _timers(self, play: int | None, since: float) -> list[int]:
        """The unreleased nodes (of `play`, or of every play) with a timer running at `since`:
        those ready, and those still waiting on a parent but held to a later time (a recorded
        deadline, or the delay after a parent that has ended)."""
        out = [i for _, i in self._ready if i < PREP_BASE and (play is None or self._play[i] == play)]
        for p in sorted(self._active) if play is None else (play,):
            out += [i for i in self._members[p] if self._waiting[i] and not self._released[i]
                    and self._ready_at[i] > since]
        return out

    def _shift_idle(self, now: float) -> float:
        """0.13's idle caps: when the server (no request in flight) or a play (none of its own)
        has idled for its cap and its next timer is later still, every timer concerned moves
        earlier to fire at the cap (listed in `idle_shifts`). Shifts are applied in time order:
        a server's at once (nothing can happen before it), a play's once the clock (`now`)
        reaches it; the time of the next pending play shift is returned (inf: none)."""
        if self.preparation is not None and self.preparation.barrier_ms is None:
            return INF
        caps = self.plan.options
        while True:
            best: tuple[float, int | None, float, list[int]] | None = None
            if not self._in_flight:
                at = self._server_idle_since + caps["global_idle_cap_seconds"] * 1000.0
                timers = self._timers(None, at)
                if timers:
                    head = min(self._ready_at[i] for i in timers)
                    if head > at and at < self.cutoff_ms:
                        best = (at, None, head - at, timers)
            for p in sorted(self._active):
                if self._busy[p]:
                    continue
                at = self._idle_since[p] + caps["tree_idle_cap_seconds"] * 1000.0
                timers = self._timers(p, at)
                if not timers:
                    continue
                head = min(self._ready_at[i] for i in timers)
                if head > at and at < self.cutoff_ms and (best is None or at < best[0]):
                    best = (at, p, head - at, timers)
            if best is None:
                return INF
            at, which, by, timers = best
            if which is not None and at > now:
                return at
            moved = set(timers)
            for i in moved:
                self._ready_at[i] -= by
            self._ready = [(self._ready_at[i], i) if i in moved else (t, i) for t, i in self._ready]
            heapq.heapify(self._ready)
            self.idle_shifts.append({"at_ms": at, "play_id": None if which is None else self.graph.play_ids[which],
                                     "shifted_by_ms": by, "timer_count": len(timers)})

    def _check_idle(self, i: int, t: float) -> None:
        """Count request `i`, sent at `t`."""
        play = self._play[i]
        if self.first_request_ms is None:
            self.first_request_ms = t
        self._sent[play] += 1
        if self._sent[play] == self._size[play]:
            self._active.discard(play)
        self._busy[play] += 1
        self._in_flight += 1

    def _instantiate(self, lane: int, now: float) -> None:
        """Start the corpus' next play on `lane` at `now`, with its own ids and cache scope."""
        plan, graph = self.plan, self.graph
        source_play = plan.corpus[plan.cursor % len(plan.corpus)]
        plan.cursor += 1
        self._ordinal[lane] += 1
        ordinal = self._ordinal[lane]
        play = f"agentic-v1:{graph.digest}:{plan.seed}:{lane}:{ordinal}"
        scope = ordinal * plan.lanes + lane
        idx = plan.members[source_play]
        src = [plan.source.nodes[j] for j in idx]
        origin = min(n.not_before_ms for n in src)
        base = len(graph.nodes)
        local = {n.request_id: base + k for k, n in enumerate(src)}
        p = len(graph.play_ids)
        graph.play_ids.append(play)
        if graph.play_starts is not None:
            graph.play_starts[play] = now - self.start_ms  # the report counts from the profile's start
        for k, n in enumerate(src):
            deps = [d._replace(delay_ms=d.delay_ms / plan.speedup) for d in n.dependencies]
            offset = (n.not_before_ms - origin) / plan.speedup if not deps else 0.0  # a child waits on its parents only
            node = replace(n, play_id=play, session_id=f"{play}:conversation:{n.session_id}",
                           not_before_ms=now + offset, dependencies=deps, hash_ids=scoped_hash_ids(n.hash_ids, scope))
            graph.nodes.append(node)
            graph.parents.append([(local[d.parent], d) for d in deps])
            graph.children.append([])
            for d in deps:
                graph.children[local[d.parent]].append((base + k, d))
            self._waiting.append(len(deps))
            self._ready_at.append(node.not_before_ms)
            self._released.append(0)
            self._play.append(p)
            if graph.uuid_numbers is not None:
                graph.uuid_numbers.append(scope * (len(plan.source.nodes) + 1) + idx[k] + 1)
        mine = graph.nodes[base:]
        self._unique_from.extend(unique_positions([n.hash_ids for n in mine], [n.input_length for n in mine],
                                                  graph.block_size))
        for k in range(len(src)):
            if not self._waiting[base + k]:
                heapq.heappush(self._ready, (self._ready_at[base + k], base + k))
        self._lane.append(lane)
        self._members.append(list(range(base, base + len(src))))
        self._active.add(p)
        self._size.append(len(src))
        self._sent.append(0)
        self._ended.append(0)
        self._busy.append(0)
        self._idle_since.append(now)
        self._add_entry(source_play, idx, play, lane, ordinal)

    def _add_entry(self, source_play: str, idx: list[int], play: str, lane: int, ordinal: int) -> None:
        """The play's `agentic_snapshots` entry (every request replayed, cut at its start)."""
        source = self.plan.source
        origin = min(source.nodes[i].not_before_ms for i in idx)
        start = {source.nodes[i].request_id: source.nodes[i].not_before_ms - origin for i in idx}
        entries = self.graph.summary_fields.get("agentic_snapshots")
        if isinstance(entries, list):
            entries.append(_entry(source, idx, start, set(start), play, lane, source_play, 0.0, self.plan.seed,
                                  self.graph.report_block(), ordinal))

    # -- the report -----------------------------------------------------------------------------

    def profile_end_ms(self) -> float:
        """When the profile ends: the cutoff, or the last response after it, or the grace
        deadline when it canceled requests."""
        if self.grace.canceled:
            return self.grace.at_ms
        if self._aborted():
            return 0.0  # nothing measured
        return max(self.cutoff_ms, self.last_success_ms or 0.0)

    def _aborted(self) -> bool:
        """Whether the warm-up was aborted (the profile never started)."""
        return self.preparation is not None and self.preparation.failed is not None

    def attach(self, cluster: Any) -> None:
        super().attach(cluster)
        self.grace.cluster = cluster

    def settle(self, records: list[RequestRecord]) -> list[RequestRecord]:
        """The requests still running at the grace deadline canceled there (`servesim.traffic.grace`)."""
        return self.grace.settle(super().settle(records))

    def report(self) -> dict[str, Any]:
        """The `agentic_profile` block."""
        opts = self.plan.options
        if self._aborted():
            return self._aborted_report()
        first = self.first_request_ms if self.first_request_ms is not None else 0.0
        last = self.last_success_ms if self.last_success_ms is not None else first
        window = last - first
        plays = len(self.graph.play_ids)
        complete = sum(1 for p in range(plays) if self._ended[p] == self._size[p]  # a cancel leaves the client done
                       and (p not in self._aborted_by or p in self._canceled_plays))
        grace = self.grace.at_ms
        canceled = self.grace.canceled
        issued = sum(self._sent)
        return {
            "admission_closed": True, "admission_cutoff_ms": self.cutoff_ms,
            "cancel_drain_deadline_ms": grace + opts["cancel_drain_seconds"] * 1000.0,
            "cancel_drain_timed_out": False, "canceled_requests": canceled, "client_completed_plays": complete,
            "client_in_flight_requests": 0, "corpus_cursor": self.plan.cursor, "finished_at_ms": self.profile_end_ms(),
            "first_request_ms": self.first_request_ms, "idle_shifts": sorted(self.idle_shifts, key=lambda e: e["at_ms"]),
            "issued_requests": issued,
            "last_successful_response_ms": self.last_success_ms,
            "never_issued_requests": len(self.graph.nodes) - issued, "observation_duration_ms": window,
            "options": dict(opts), "plays_started": plays, "profile_start_ms": self.start_ms,
            "response_grace_deadline_ms": grace, "retired_plays": plays, "schema": SCHEMA,
            "server_quiescent_plays": plays - len(self.grace.canceled_plays), "server_unsettled_requests": canceled,
            "successful_request_throughput": self.successes / (window / 1000.0) if window > 0 else 0.0,
            "successful_responses": self.successes, "unsettled_server_requests": canceled,
        }

    def _aborted_report(self) -> dict[str, Any]:
        """The `agentic_profile` block of a profile whose warm-up was aborted, as 0.13 gives it."""
        assert self.preparation is not None
        ends = [r.record.terminal_ms for r in self.preparation.requests
                if r.record is not None and r.record.terminal_ms is not None]
        zero = dict.fromkeys(("canceled_requests", "client_completed_plays", "client_in_flight_requests",
                              "issued_requests", "never_issued_requests", "retired_plays", "server_quiescent_plays",
                              "server_unsettled_requests", "successful_responses", "unsettled_server_requests"), 0)
        none = dict.fromkeys(("admission_cutoff_ms", "cancel_drain_deadline_ms", "first_request_ms",
                              "last_successful_response_ms", "profile_start_ms", "response_grace_deadline_ms",
                              "successful_request_throughput"))
        return zero | none | {
            "admission_closed": False, "cancel_drain_timed_out": False, "corpus_cursor": self.plan.cursor,
            "finished_at_ms": max(ends, default=0.0), "idle_shifts": [], "observation_duration_ms": 0.0,
            "options": dict(self.plan.options), "plays_started": len(self.graph.play_ids), "schema": SCHEMA}

    def rescale(self, summary: dict[str, Any]) -> None:
        """The summary over the observation window: duration and the throughputs dividing by it."""
        block = self.report()
        window = block["observation_duration_ms"]
        ds = max(window / 1000, 1e-9)
        summary["duration_ms"] = window
        summary["request_throughput_rps"] = summary["completed_requests"] / ds
        summary["input_throughput_tok_s"] = summary["total_input_tokens"] / ds
        summary["output_throughput_tok_s"] = summary["total_output_tokens"] / ds
        summary["total_throughput_tok_s"] = (summary["total_input_tokens"] + summary["total_output_tokens"]) / ds
        summary["agentic_profile"] = block
