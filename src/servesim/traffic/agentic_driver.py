"""The agentic workload driver: releases each request of an `AgenticGraph` once its parents allow.

A node is released (dispatched) at the latest of its not-before time and, for every
dependency, the parent's dispatch or completion time plus the dependency's delay. Roots are
released at their not-before times. A request that ends without completing (rejected, failed)
aborts its play: no request of the play not yet released is released any more (its descendants,
but also later roots and spawned requests of the play), and the play stays incomplete. Nodes
ready at the same instant are released in node (request id) order.

With `lanes` (AISimulate 0.13's `agentic_lanes`) the plays run closed loop instead, at most
`lanes` at a time: the first `lanes` plays in corpus order (`source_play_ordinal`, else order of
first appearance) start at 0, and whenever a play ends (every request it released ended and it
can release no more) its lane starts the next play not started yet. A play's not-before times
count from its start (minus the play's earliest not-before time).

It answers the runtime the same questions as `servesim.traffic.driver.Driver`.
"""

from __future__ import annotations

import heapq
import math
from typing import TYPE_CHECKING, Any, NamedTuple

from servesim.traffic.agentic import AgenticGraph, AgenticNode
from servesim.traffic.driver import Arrival
from servesim.traffic.hash_ids import unique_positions
from servesim.traffic.workload import GENERATED_BASE, expand_hash_ids

if TYPE_CHECKING:
    from servesim.collect.collector import RequestRecord
    from servesim.traffic.warmup import Preparation

INF = math.inf
PREP_BASE = 1 << 48
"""A warm-up's requests are numbered from here (the graph's nodes, which a profile adds to as it
runs, stay below)."""


class Unreleased(NamedTuple):
    """A request never released, and the request whose end held it back."""

    request_id: str
    play_id: str
    session_id: str
    blocked_by: str | None
    """The first request of the play that ended without completing (None if the play was not
    aborted: the replay stopped first)."""


class AgenticDriver:
    """Releases the nodes of an agentic graph in dependency order (open loop only)."""

    def __init__(self, graph: AgenticGraph, frontend_ms: float = 0.0, lanes: int | None = None,
                 preparation: Preparation | None = None) -> None:
        self.graph = graph
        self.frontend_ms = frontend_ms
        """A node dispatched (sent) at t is released at t + frontend_ms and keeps t as its arrival."""
        nodes = graph.nodes
        self._waiting = [len(p) for p in graph.parents]
        self._ready_at = [n.not_before_ms for n in nodes]
        self._released = bytearray(len(nodes))
        play_index = {play: k for k, play in enumerate(graph.play_ids)}
        self._play = [play_index[n.play_id] for n in nodes]
        self._lanes = _Lanes(graph, self._play, lanes) if lanes is not None else None
        active = self._lanes.initial() if self._lanes is not None else None
        if self._lanes is not None:
            self._ready_at = list(self._lanes.offset)
        self._ready: list[tuple[float, int]] = [(self._ready_at[i], i) for i in range(len(nodes))
                                                if not self._waiting[i] and (active is None or self._play[i] in active)]
        heapq.heapify(self._ready)
        self._aborted_by: dict[int, int] = {}
        """Per aborted play, the node whose end aborted it."""
        self.preparation = preparation
        """A warm-up run first (`servesim.traffic.warmup`): its requests are numbered after the
        nodes; the nodes wait in `_held` until its barrier falls."""
        self._held: list[tuple[float, int]] = []
        extra: list[AgenticNode] = []
        if preparation is not None:
            self._held, self._ready = self._ready, [(0.0, PREP_BASE + k) for k in preparation.first[:-1]
                                                    if k < preparation.first[-1]]
            heapq.heapify(self._ready)
            extra = [r.source for r in preparation.requests]
        positions = _unique_positions(graph, extra)
        self._unique_from = positions[:len(nodes)]
        self._prep_unique = positions[len(nodes):]
        """The unique positions of the warm-up's requests (numbered from PREP_BASE)."""
        self._next_output_base = GENERATED_BASE
        self.fixed_arrivals = (lanes is None and preparation is None and not any(self._waiting)
                               and len(graph.play_ids) == len(nodes))
        """True when no request waits on another and every play has one request: terminal
        requests never release or hold back others."""

    @property
    def total_requests(self) -> int:
        return len(self.graph.nodes)

    def profile_end_ms(self) -> float | None:
        """When a continuous profile ends (None: this replay is no profile)."""
        return None

    def rescale(self, summary: dict[str, Any]) -> None:
        """Adjust the report's summary to the replay's measured window (a profile's; here none)."""

    def attach(self, cluster: Any) -> None:
        """The run's cluster is built: a warm-up's barrier will snapshot its worker accounting."""
        if self.preparation is not None:
            from servesim.traffic.warmup import barrier_accounting

            self.preparation.on_barrier = barrier_accounting(cluster, self.preparation.at_barrier)

    def settle(self, records: list[RequestRecord]) -> list[RequestRecord]:
        """The run's records as the report takes them (a profile's cancels; here all as they are).
        After an aborted preparation nothing was measured: worker seconds restart from the end."""
        prep = self.preparation
        if prep is not None and prep.failed is not None and prep.on_barrier is not None:
            prep.on_barrier(0.0)
        return records

    def next_ready_time(self) -> float:
        self._drop_aborted()
        return self._ready[0][0] + self.frontend_ms if self._ready else INF

    def drained(self) -> bool:
        """True when nothing is scheduled (what is still blocked waits on in-flight requests,
        or belongs to an aborted play)."""
        self._drop_aborted()
        return not self._ready

    def start(self, now: float) -> None:
        """Nothing to activate: roots are scheduled from the start."""

    def release(self, now: float) -> list[Arrival]:
        """Every node ready at or before `now`, ordered by (ready time, node index)."""
        out: list[Arrival] = []
        ready, lag = self._ready, self.frontend_ms
        while self._drop_aborted() and ready[0][0] + lag <= now:
            t, i = heapq.heappop(ready)
            out.append(self._emit(i, t))
            if i < PREP_BASE:
                self._fire(i, t, "dispatch")
        return out

    def on_terminal(self, arrival: Arrival, now: float, emitted: int, *, ends_session: bool = False,
                    completed: bool = True) -> None:
        """A released node ended: a completion fires its completion edges, any other end
        aborts its play."""
        i = arrival.session_index
        if i >= PREP_BASE:
            if not completed or ends_session:
                self._preparation_failed(i - PREP_BASE)
            else:
                self._prepared(i - PREP_BASE, now)
            return
        if completed and not ends_session:
            self._fire(i, now, "completion")
        else:
            self._aborted_by.setdefault(self._play[i], i)
        if self._lanes is not None:
            play = self._play[i]
            self._lanes.ended[play] += 1
            if self._lanes.play_over(play, play in self._aborted_by):
                self._start_next(play, now)

    def _preparation_failed(self, k: int) -> None:
        """Preparation request `k` ended without completing: the preparation is aborted (as in
        0.13): no lane sends another, the barrier never falls, the measured plays never start."""
        prep = self.preparation
        assert prep is not None
        prep.ended += 1
        if prep.failed is None:
            prep.failed = k
        self._ready = [entry for entry in self._ready if entry[1] < PREP_BASE]
        heapq.heapify(self._ready)

    def _prepared(self, k: int, now: float) -> None:
        """Preparation request `k` ended: its lane sends the next one; after the last one the
        barrier falls and the held nodes are scheduled from `now`."""
        prep = self.preparation
        assert prep is not None
        prep.ended += 1
        if prep.failed is not None:  # aborted: nothing more is sent
            return
        nxt = prep.next_of(k)
        if nxt is not None:
            heapq.heappush(self._ready, (now, PREP_BASE + nxt))
        if prep.ended < len(prep.requests):
            return
        prep.barrier_ms = now
        if prep.on_barrier is not None:
            prep.on_barrier(now)
        self._ready_at = [now + t for t in self._ready_at]
        for t, i in self._held:
            heapq.heappush(self._ready, (now + t, i))
        self._held = []

    def _start_next(self, play: int, now: float) -> None:
        """`play` ended: start the next play on its lane, its times counted from `now`."""
        assert self._lanes is not None
        nxt = self._lanes.successor(play)
        if nxt is None:
            return
        for i in self._lanes.members[nxt]:
            self._ready_at[i] = now + self._lanes.offset[i]
            if not self._waiting[i]:
                heapq.heappush(self._ready, (self._ready_at[i], i))

    def unreleased(self) -> list[Unreleased]:
        """Every request not released (so far), in request id order."""
        nodes = self.graph.nodes
        out = []
        for i, node in enumerate(nodes):
            if not self._released[i]:
                by = self._aborted_by.get(self._play[i])
                out.append(Unreleased(node.request_id, node.play_id, node.session_id,
                                      nodes[by].request_id if by is not None else None))
        return out

    def _drop_aborted(self) -> bool:
        """Forget the ready nodes of aborted plays at the head of the queue; True if a node
        is left."""
        ready, n = self._ready, len(self._play)
        while ready and ready[0][1] < n and self._play[ready[0][1]] in self._aborted_by:
            heapq.heappop(ready)
        return bool(ready)

    def _fire(self, i: int, at: float, trigger: str) -> None:
        for child, dep in self.graph.children[i]:
            if dep.trigger != trigger:
                continue
            self._ready_at[child] = max(self._ready_at[child], at + dep.delay_ms)
            self._waiting[child] -= 1
            if not self._waiting[child]:
                heapq.heappush(self._ready, (self._ready_at[child], child))

    def _emit(self, i: int, t: float) -> Arrival:
        if i >= PREP_BASE:
            return self._emit_preparation(i, t)
        node = self.graph.nodes[i]
        self._released[i] = 1
        if self._lanes is not None:
            self._lanes.released[self._play[i]] += 1
        base = self._next_output_base
        self._next_output_base += node.output_length + 1
        runs = expand_hash_ids(node.hash_ids, self.graph.block_size, node.input_length)
        return Arrival(i, 0, node.session_id, t, runs, node.input_length, node.output_length, base,
                       self._unique_from[i], request_id=node.request_id, play_id=node.play_id)


    def _emit_preparation(self, i: int, t: float) -> Arrival:
        """Preparation request `i - len(nodes)`: its source's prompt, a one-token answer."""
        assert self.preparation is not None
        request = self.preparation.requests[i - PREP_BASE]
        node = request.source
        base = self._next_output_base
        self._next_output_base += 2
        runs = expand_hash_ids(node.hash_ids, self.graph.block_size, node.input_length)
        return Arrival(i, 0, request.identity["conversation_id"], t, runs, node.input_length, 1, base,
                       self._prep_unique[i - PREP_BASE], request_id=request.request_id,
                       play_id=request.identity["play_id"])


class _Lanes:
    """Which play runs on which lane, and what each play has released and ended so far."""

    def __init__(self, graph: AgenticGraph, play_of: list[int], lanes: int) -> None:
        count = len(graph.play_ids)  # lanes beyond the play count stay idle, as in 0.13
        self.members: list[list[int]] = [[] for _ in range(count)]
        for i, play in enumerate(play_of):
            self.members[play].append(i)
        nodes = graph.nodes
        ordinals = [nodes[m[0]].source_play_ordinal for m in self.members]
        known = [o for o in ordinals if o is not None]
        order = (sorted(range(count), key=lambda p: known[p]) if len(known) == count else list(range(count)))
        self._first = order[:lanes]
        self._queue = order[lanes:][::-1]
        """Plays not started yet, the next one last."""
        self.offset = [0.0] * len(nodes)
        for m in self.members:
            start = min(nodes[i].not_before_ms for i in m)
            for i in m:
                self.offset[i] = nodes[i].not_before_ms - start
        self.released = [0] * count
        self.ended = [0] * count

    def initial(self) -> set[int]:
        """The plays running from the start: the first `lanes` ones."""
        return set(self._first)

    def play_over(self, play: int, aborted: bool) -> bool:
        """True once every released request of `play` ended and nothing more will be released
        (all were released, or the play was aborted)."""
        return self.ended[play] == self.released[play] and (aborted or self.released[play] == len(self.members[play]))

    def successor(self, play: int) -> int | None:
        """The play the lane freed by `play` starts next (None: every play has started)."""
        return self._queue.pop() if self._queue else None


def _unique_positions(graph: AgenticGraph, extra: list[AgenticNode] | None = None) -> list[int]:
    """Per node (then per `extra` prompt: a warm-up's sources), the first prompt position no
    other prompt can share (its input length if there is none: generated tokens are never
    shared)."""
    nodes = graph.nodes + (extra or [])
    return unique_positions([n.hash_ids for n in nodes], [n.input_length for n in nodes], graph.block_size)
