"""Aggregated serving: one pool of workers that both prefill and decode, and (servesim
extension) clients that give up (`cluster.timeouts`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from servesim.build import LoweredRun
from servesim.cluster.base import INF, Cluster, route_request
from servesim.cluster.timeouts import ClientTimeouts, Place, without
from servesim.collect.collector import Collector, Route, Status
from servesim.engine.request import EngineRequest
from servesim.engine.worker import Worker, WorkerPass
from servesim.placement.base import StateFreeRouter
from servesim.traffic.driver import Arrival, RequestDriver
from servesim.traffic.timeouts import spans_until

if TYPE_CHECKING:
    from servesim.runtime.paths import ReplayPaths
    from servesim.scaling.contract import ScalingPolicy


class AggregatedCluster(Cluster):
    """Places every request on a worker of the one pool."""

    def __init__(self, run: LoweredRun, driver: RequestDriver, collector: Collector, *, paths: ReplayPaths,
                 scaling: ScalingPolicy | None = None) -> None:
        super().__init__(run, driver, collector, paths=paths, scaling=scaling)
        self.pool = self._add_pool("decode", "agg", run.pool("aggregated"))
        self.router = self.pool.router
        self.fleet = self.pool.fleet
        self.block_size = self.pool.spec.rank_config.block_size
        timeout = run.traffic.client_timeout_ms
        self.timeouts = ClientTimeouts(timeout) if timeout is not None else None
        self._start_scaling()

    def release_arrivals(self, now: float) -> list[Worker]:
        arrivals = self.driver.release(now)
        self.hooks.on_arrivals(len(arrivals))
        placed = []
        for arrival in arrivals:
            if not self.router.workers:
                request = self._register(arrival)[1]
                for observer in self.request_observers:
                    observer.on_placed(arrival, request, None, now)
                self._reject_unrouted(request, "serving", now)
                continue
            worker, rank, request = self._route(arrival, now)
            worker.enqueue(rank, request)
            placed.append(worker)
        return placed

    def route_ahead(self, until: float, limit: int) -> tuple[list[tuple[float, Worker, int, EngineRequest]], float]:
        """Register and route the next requests reaching the engine by `until` (send time plus
        the front-end latency), an instant at a time until at least `limit` are routed:
        ([(that time, worker, rank, request)], when the next one arrives — inf if none by `until`)."""
        routed: list[tuple[float, Worker, int, EngineRequest]] = []
        driver, route, keep = self.driver, self._route, routed.append
        lag = driver.frontend_ms
        in_bulk = self.paths.bulk_routing
        while True:
            instant = driver.next_ready_time()
            if instant > until or instant == INF:
                return routed, INF
            if len(routed) >= limit:
                return routed, instant
            arrivals = driver.release(instant)
            if in_bulk:
                routed += self._route_in_bulk(arrivals, lag)
                continue
            for arrival in arrivals:
                seen = arrival.arrival_ms + lag
                keep((seen, *route(arrival, seen)))

    def _route_in_bulk(self, arrivals: list[Arrival], lag: float) -> list[tuple[float, Worker, int, EngineRequest]]:
        """`_route` of requests arriving together, placed at once (`StateFreeRouter.place_many`):
        [(the time each reaches the engine, worker, rank, request)]."""
        assert isinstance(self.router, StateFreeRouter)
        by_id, on_route, register, bs = self.fleet.by_id, self.collector.on_route, self._register, self.block_size
        routed = []
        for arrival, worker_id in zip(arrivals, self.router.place_many(len(arrivals)), strict=True):
            record, request = register(arrival, bs)
            worker = by_id[worker_id]
            on_route(record, Route("agg", worker_id, worker.first_scheduler_id, 0, 0))
            routed.append((arrival.arrival_ms + lag, worker, 0, request))
        return routed

    def _route(self, arrival: Arrival, now: float) -> tuple[Worker, int, EngineRequest]:
        """Register a request and choose its worker and rank."""
        record, request = self._register(arrival, self.block_size)
        routed = route_request(request, arrival.session_id, self.block_size, self.router.wants_kv_events)
        placement = self.router.place(routed, now)
        if self.scaler is not None:
            self.hooks.on_route(request.prompt_len, placement.overlap_tokens, self.block_size)
        worker = self.fleet.by_id[placement.worker]
        scheduler_id = worker.first_scheduler_id + placement.rank
        self.collector.on_route(record, Route("agg", placement.worker, scheduler_id, placement.rank,
                                              placement.overlap_tokens))
        if self.timeouts is not None:
            self.timeouts.watch(record.rid, record.arrival_ms, now, (worker, placement.rank, request))
        for observer in self.request_observers:
            observer.on_placed(arrival, request, worker, now)
        return worker, placement.rank, request

    # -- client timeouts ----------------------------------------------------------------------------

    def next_timer(self) -> float:
        timer = super().next_timer()
        if self.timeouts is None:
            return timer
        return min(timer, self.timeouts.next_time(self._open.__contains__))

    def fire_timers(self, now: float) -> bool:
        fired = super().fire_timers(now)
        if self.timeouts is not None:
            for place in self.timeouts.due(now, self._open.__contains__):
                arrival_ms = self._open[place[2].rid][1].arrival_ms
                self._give_up(place, now, arrival_ms + self.timeouts.timeout_ms)  # < now when it came that late
                fired = True
        return fired

    def track_places(self) -> None:
        """Keep every request's place from now on, so that its client may hang up (`hang_up`):
        what a live server needs."""
        if self.timeouts is None:
            self.timeouts = ClientTimeouts(INF)

    def hang_up(self, rid: int, now: float) -> bool:
        """The client of request `rid` disconnected at `now` (after `track_places`): it ends as
        timed out at `now` with the tokens received by then, and its KV is freed at once if its
        worker is idle, else at the end of the running pass. False when it had already ended."""
        if self.timeouts is None or rid not in self._open:
            return False
        place = self.timeouts.place(rid)
        if place is None or self.timeouts.abandoned(rid):
            return False
        self._give_up(place, now, now)
        return True

    def _give_up(self, place: Place, now: float, deadline: float) -> None:
        """The client of a request stops waiting (at `deadline`): the driver and the router hear
        of it now; its worker drops it now if idle, else at the end of its running pass."""
        assert self.timeouts is not None
        worker, rank, request = place
        arrival, record = self._open[request.rid]
        self.driver.on_terminal(arrival, now, request.generated, ends_session=True, completed=False)
        self.router.on_terminal(request.rid, now)
        if worker.busy:
            self.timeouts.defer(place, deadline)
        else:
            worker.abort(rank, request)
            self._close_timed_out(request, worker, deadline)

    def _close_timed_out(self, request: EngineRequest, worker: Worker, deadline: float) -> None:
        """Record a timed-out request with the tokens its client received before giving up."""
        _, record = self._open.pop(request.rid)
        if self.timeouts is not None:
            self.timeouts.forget(request.rid)
        spans, tokens = spans_until(request.token_spans, worker.pass_ends, deadline)
        self.collector.on_terminal(record, deadline, Status.TIMED_OUT, tokens, spans, worker.pass_ends)
        for observer in self.request_observers:
            observer.on_ended(record, deadline)

    def _at_pass_boundary(self, worker: Worker, outcome: WorkerPass) -> None:
        """Drop the requests given up on during the pass that just ended."""
        if self.timeouts is None:
            return
        abandoned = self.timeouts.take_abandoned(worker)
        for (_, rank, request), deadline in abandoned:
            worker.abort(rank, request)
            self._close_timed_out(request, worker, deadline)
        if abandoned:
            without(outcome.ranks, {place[2].rid for place, _ in abandoned})

    def _terminal(self, request: EngineRequest, worker: Worker | None, status: Status, now: float) -> None:
        if self.timeouts is not None:
            self.timeouts.forget(request.rid)
        Cluster._terminal(self, request, worker, status, now)  # (super() costs more, once per request)
