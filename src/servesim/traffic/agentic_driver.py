"""The agentic workload driver: releases each request of an `AgenticGraph` once its parents allow.

A node is released (dispatched) at the latest of its not-before time and, for every
dependency, the parent's dispatch or completion time plus the dependency's delay. Roots are
released at their not-before times. A request that ends without completing (rejected, failed)
aborts its play: no request of the play not yet released is released any more (its descendants,
but also later roots and spawned requests of the play), and the play stays incomplete. Nodes
ready at the same instant are released in node (request id) order.

It answers the runtime the same questions as `servesim.traffic.driver.Driver`.
"""

from __future__ import annotations

import heapq
import math
from typing import NamedTuple

from servesim.traffic.agentic import AgenticGraph
from servesim.traffic.driver import Arrival
from servesim.traffic.hash_ids import unique_positions
from servesim.traffic.workload import GENERATED_BASE, expand_hash_ids

INF = math.inf


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

    def __init__(self, graph: AgenticGraph, frontend_ms: float = 0.0) -> None:
        self.graph = graph
        self.frontend_ms = frontend_ms
        """A node dispatched (sent) at t is released at t + frontend_ms and keeps t as its arrival."""
        nodes = graph.nodes
        self._waiting = [len(p) for p in graph.parents]
        self._ready_at = [n.not_before_ms for n in nodes]
        self._ready: list[tuple[float, int]] = [(n.not_before_ms, i) for i, n in enumerate(nodes)
                                                if not self._waiting[i]]
        heapq.heapify(self._ready)
        self._released = bytearray(len(nodes))
        play_index = {play: k for k, play in enumerate(graph.play_ids)}
        self._play = [play_index[n.play_id] for n in nodes]
        self._aborted_by: dict[int, int] = {}
        """Per aborted play, the node whose end aborted it."""
        self._unique_from = _unique_positions(graph)
        self._next_output_base = GENERATED_BASE
        self.fixed_arrivals = not any(self._waiting) and len(graph.play_ids) == len(nodes)
        """True when no request waits on another and every play has one request: terminal
        requests never release or hold back others."""

    @property
    def total_requests(self) -> int:
        return len(self.graph.nodes)

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
            self._fire(i, t, "dispatch")
        return out

    def on_terminal(self, arrival: Arrival, now: float, emitted: int, *, ends_session: bool = False,
                    completed: bool = True) -> None:
        """A released node ended: a completion fires its completion edges, any other end
        aborts its play."""
        i = arrival.session_index
        if completed and not ends_session:
            self._fire(i, now, "completion")
        else:
            self._aborted_by.setdefault(self._play[i], i)

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
        ready = self._ready
        while ready and self._play[ready[0][1]] in self._aborted_by:
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
        node = self.graph.nodes[i]
        self._released[i] = 1
        base = self._next_output_base
        self._next_output_base += node.output_length + 1
        runs = expand_hash_ids(node.hash_ids, self.graph.block_size, node.input_length)
        return Arrival(i, 0, node.session_id, t, runs, node.input_length, node.output_length, base,
                       self._unique_from[i], request_id=node.request_id, play_id=node.play_id)


def _unique_positions(graph: AgenticGraph) -> list[int]:
    """Per node, the first prompt position no other node's prompt can share (its input length
    if there is none: generated tokens are never shared)."""
    nodes = graph.nodes
    return unique_positions([n.hash_ids for n in nodes], [n.input_length for n in nodes], graph.block_size)
