"""A driver whose requests are added while the replay runs (`servesim serve`): each is one
single-turn session, sent at the moment its client sent it."""

from __future__ import annotations

import heapq
import math
from itertools import groupby

from servesim.traffic.driver import Arrival
from servesim.traffic.workload import GENERATED_BASE, NEVER, Run

INF = math.inf


def token_runs(token_ids: list[int]) -> list[Run]:
    """A prompt's token ids as runs (repeated ids folded into one run)."""
    return [(value, sum(1 for _ in group)) for value, group in groupby(token_ids)]


class LiveDriver:
    """A `traffic.driver.RequestDriver` fed from outside: `add` queues a request sent at a given
    time; the replay releases it at that time plus the front-end latency. It is drained only once
    `close` says no request will be added any more."""

    fixed_arrivals = False
    """Requests arrive whenever clients send them: nothing is known in advance."""

    def __init__(self, frontend_ms: float = 0.0) -> None:
        self.frontend_ms = frontend_ms
        self._pending: list[tuple[float, int, Arrival]] = []
        self._added = 0
        self._next_output_base = GENERATED_BASE
        self._closed = False

    @property
    def total_requests(self) -> int:
        """Requests added so far."""
        return self._added

    def add(self, key: str, sent_ms: float, token_ids: list[int], max_output_tokens: int) -> Arrival:
        """Queue a request sent at `sent_ms` whose prompt is `token_ids` (non-negative); `key`
        becomes its session id."""
        if self._closed:
            raise RuntimeError("the live driver is closed: no request can be added")
        base = self._next_output_base
        self._next_output_base += max_output_tokens + 1
        arrival = Arrival(self._added, 0, key, sent_ms, token_runs(token_ids), len(token_ids), max_output_tokens,
                          base, NEVER)
        heapq.heappush(self._pending, (sent_ms, self._added, arrival))
        self._added += 1
        return arrival

    def close(self) -> None:
        """No request will be added any more."""
        self._closed = True

    def next_ready_time(self) -> float:
        return self._pending[0][0] + self.frontend_ms if self._pending else INF

    def drained(self) -> bool:
        return self._closed and not self._pending

    def start(self, now: float) -> None:
        pass

    def release(self, now: float) -> list[Arrival]:
        """Every added request whose release time is `now` or earlier, in send order."""
        out: list[Arrival] = []
        pending, lag = self._pending, self.frontend_ms
        while pending and pending[0][0] + lag <= now:
            out.append(heapq.heappop(pending)[2])
        return out

    def on_terminal(self, arrival: Arrival, now: float, emitted: int, *, ends_session: bool = False,
                    completed: bool = True) -> None:
        pass
