"""Client timeouts (`traffic.client_timeout_seconds`, servesim extension): when clients give up.

A request sent at t is abandoned at t + timeout if it has not finished by then. This module
only keeps the deadlines; the cluster aborts the request on its worker (at the worker's next
pass boundary) and reports it as timed out.
"""

from __future__ import annotations

import heapq
from bisect import bisect_right
from collections.abc import Callable, Sequence


class Deadlines:
    """The pending deadline of every request in flight, earliest first."""

    def __init__(self, timeout_ms: float) -> None:
        self.timeout_ms = timeout_ms
        self._heap: list[tuple[float, int]] = []

    def add(self, rid: int, sent_ms: float, now: float) -> None:
        """Start the clock of request `rid`, sent at `sent_ms` (its deadline is never before `now`)."""
        heapq.heappush(self._heap, (max(sent_ms + self.timeout_ms, now), rid))

    def next_time(self, is_open: Callable[[int], bool]) -> float:
        """The earliest deadline of a request still open (finished ones are dropped)."""
        heap = self._heap
        while heap and not is_open(heap[0][1]):
            heapq.heappop(heap)
        return heap[0][0] if heap else float("inf")

    def due(self, now: float, is_open: Callable[[int], bool]) -> list[int]:
        """Open requests whose deadline is `now` (or earlier), in deadline order."""
        out = []
        heap = self._heap
        while heap and heap[0][0] <= now:
            _, rid = heapq.heappop(heap)
            if is_open(rid):
                out.append(rid)
        return out


def spans_until(spans: list[int], pass_ends: Sequence[float] | None, deadline: float) -> tuple[list[int], int]:
    """The token spans (pairs of pass indices) of passes that ended by `deadline`, and how many
    tokens they hold: what the client received before it gave up."""
    if pass_ends is None or not spans:
        return [], 0
    last = bisect_right(pass_ends, deadline)
    kept: list[int] = []
    count = 0
    for i in range(0, len(spans), 2):
        a, b = spans[i], min(spans[i + 1], last)
        if b > a:
            kept += [a, b]
            count += b - a
    return kept, count
