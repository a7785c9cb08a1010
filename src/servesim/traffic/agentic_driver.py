"""The agentic workload driver: releases each request of an `AgenticGraph` once its parents allow.

A node is released (dispatched) at the latest of its not-before time and, for every
dependency, the parent's dispatch or completion time plus the dependency's delay. Roots are
released at their not-before times. A parent that ends without completing (rejected, failed)
never fires its completion edges, so its descendants are never released and its play stays
incomplete. Nodes ready at the same instant are released in node (request id) order.

It answers the runtime the same questions as `servesim.traffic.driver.Driver`.
"""

from __future__ import annotations

import heapq
import math
from collections import Counter
from itertools import chain

from servesim.traffic.agentic import AgenticGraph
from servesim.traffic.driver import Arrival
from servesim.traffic.workload import GENERATED_BASE, expand_hash_ids

INF = math.inf


class AgenticDriver:
    """Releases the nodes of an agentic graph in dependency order (open loop only)."""

    def __init__(self, graph: AgenticGraph) -> None:
        self.graph = graph
        nodes = graph.nodes
        self._waiting = [len(p) for p in graph.parents]
        self._ready_at = [n.not_before_ms for n in nodes]
        self._ready: list[tuple[float, int]] = [(n.not_before_ms, i) for i, n in enumerate(nodes)
                                                if not self._waiting[i]]
        heapq.heapify(self._ready)
        self._unique_from = _unique_positions(graph)
        self._next_output_base = GENERATED_BASE
        self.fixed_arrivals = not any(self._waiting)
        """True when no request waits on another: completions never release requests."""

    @property
    def total_requests(self) -> int:
        return len(self.graph.nodes)

    def next_ready_time(self) -> float:
        return self._ready[0][0] if self._ready else INF

    def drained(self) -> bool:
        """True when nothing is scheduled (what is still blocked waits on in-flight requests,
        or on requests that will never complete)."""
        return not self._ready

    def start(self, now: float) -> None:
        """Nothing to activate: roots are scheduled from the start."""

    def release(self, now: float) -> list[Arrival]:
        """Every node ready at or before `now`, ordered by (ready time, node index)."""
        out: list[Arrival] = []
        ready = self._ready
        while ready and ready[0][0] <= now:
            t, i = heapq.heappop(ready)
            out.append(self._emit(i, t))
            self._fire(i, t, "dispatch")
        return out

    def on_terminal(self, arrival: Arrival, now: float, emitted: int, *, ends_session: bool = False,
                    completed: bool = True) -> None:
        """A released node ended; only a completion fires its completion edges."""
        if completed and not ends_session:
            self._fire(arrival.session_index, now, "completion")

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
        base = self._next_output_base
        self._next_output_base += node.output_length + 1
        runs = expand_hash_ids(node.hash_ids, self.graph.block_size, node.input_length)
        return Arrival(i, 0, node.session_id, t, runs, node.input_length, node.output_length, base,
                       self._unique_from[i], request_id=node.request_id, play_id=node.play_id)


def _unique_positions(graph: AgenticGraph) -> list[int]:
    """Per node, the first prompt position no other node's prompt can share (its input length
    if there is none: generated tokens are never shared)."""
    counts = Counter(chain.from_iterable(n.hash_ids for n in graph.nodes))
    out = []
    for node in graph.nodes:
        position = node.input_length
        for k, value in enumerate(node.hash_ids):
            if counts[value] == 1:
                position = k * graph.block_size
                break
        out.append(position)
    return out
