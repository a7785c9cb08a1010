"""Clients that give up (`traffic.client_timeout_seconds`, servesim extension) — a part of the
aggregated cluster, kept apart.

At a request's deadline (its send time + the timeout) the driver and the router hear that it
ended; the worker drops it at once when idle, else at the end of its running pass (the KV is
freed at the next pass boundary). Its record is closed as timed out at the deadline with the
tokens its client received by then.
"""

from __future__ import annotations

import math
from typing import Any

from servesim.collect.collector import TIMED_OUT
from servesim.engine.request import EngineRequest
from servesim.engine.worker import Worker
from servesim.traffic.timeouts import Deadlines, spans_until

INF = math.inf


class AbandonedRequests:
    """Mixin of a cluster with `_open`, `_placed`, `driver`, `router` and `collector`."""

    deadlines: Deadlines | None
    _abandoned: dict[Worker, list[tuple[int, EngineRequest, float]]]
    _open: dict[int, tuple[Any, Any]]
    _placed: dict[int, tuple[Worker, int, EngineRequest]]

    def _is_open(self, rid: int) -> bool:
        return rid in self._open

    def next_timer(self) -> float:
        deadline = self.deadlines.next_time(self._is_open) if self.deadlines is not None else INF
        return min(deadline, super().next_timer())  # type: ignore[misc]

    def fire_timers(self, now: float) -> bool:
        fired = super().fire_timers(now)  # type: ignore[misc]
        if self.deadlines is not None:
            for rid in self.deadlines.due(now, self._is_open):
                self._give_up(rid, now)
                fired = True
        return fired

    def _give_up(self, rid: int, now: float) -> None:
        """The client of `rid` stops waiting: the driver and the router hear of it now, the
        worker drops the request now if idle, else at the end of its running pass."""
        arrival, _ = self._open[rid]
        worker, rank, request = self._placed[rid]
        self.driver.on_terminal(arrival, now, request.generated, ends_session=True)
        self.router.on_terminal(rid, now)
        deadline = self._open[rid][1].arrival_ms + self.deadlines.timeout_ms  # ≤ now when sent that late
        if worker.busy:
            self._abandoned.setdefault(worker, []).append((rank, request, deadline))
        else:
            worker.abort(rank, request)
            self._close_timed_out(request, worker, deadline)

    def _close_timed_out(self, request: EngineRequest, worker: Worker, deadline: float) -> None:
        """Record a timed-out request with the tokens its client received before giving up."""
        _, record = self._open.pop(request.rid)
        del self._placed[request.rid]
        spans, tokens = spans_until(request.token_spans, worker.pass_ends, deadline)
        self.collector.on_terminal(record, deadline, TIMED_OUT, tokens, spans, worker.pass_ends)

    def _drop_abandoned(self, worker: Worker) -> set[int]:
        """At a pass boundary: drop the requests abandoned during the pass; their ids."""
        abandoned = self._abandoned.pop(worker, None)
        if not abandoned:
            return set()
        for rank, request, deadline in abandoned:
            worker.abort(rank, request)
            self._close_timed_out(request, worker, deadline)
        return {request.rid for _, request, _ in abandoned}

