"""Aggregated serving: one pool of workers that both prefill and decode."""

from __future__ import annotations

from servesim.build import LoweredRun
from servesim.cluster.base import Cluster, route_request
from servesim.collect.collector import Collector, Route
from servesim.engine.request import EngineRequest
from servesim.engine.worker import Worker
from servesim.scaling.contract import ScalingPolicy
from servesim.traffic.driver import Arrival, RequestDriver


class AggregatedCluster(Cluster):
    """Places every request on a worker of the one pool."""

    isolated_workers = True

    def __init__(self, run: LoweredRun, driver: RequestDriver, collector: Collector, *, fast: bool = True,
                 scaling: ScalingPolicy | None = None) -> None:
        super().__init__(run, driver, collector, fast=fast, scaling=scaling)
        self.pool = self._add_pool("decode", "agg", run.pool("aggregated"))
        self.router = self.pool.router
        self.fleet = self.pool.fleet
        self.block_size = self.pool.spec.rank_config.block_size
        self._start_scaling()

    @property
    def isolated(self) -> bool:
        """Whether each worker's timeline depends only on the requests routed to it, which are
        known before the run (see `servesim.runtime.isolated`)."""
        return self.driver.fixed_arrivals and self.router.state_free and self.scaler is None

    def release_arrivals(self, now: float) -> list[Worker]:
        arrivals = self.driver.release(now)
        self.hooks.on_arrivals(len(arrivals))
        placed = []
        for arrival in arrivals:
            worker, rank, request = self._route(arrival, now)
            worker.enqueue(rank, request)
            placed.append(worker)
        return placed

    def route_ahead(self, until: float) -> list[tuple[float, Worker, int, EngineRequest]]:
        """Register and route every request arriving by `until`: (arrival, worker, rank, request)."""
        routed = []
        for arrival in self.driver.release(until):
            worker, rank, request = self._route(arrival, arrival.arrival_ms)
            routed.append((arrival.arrival_ms, worker, rank, request))
        return routed

    def _route(self, arrival: Arrival, now: float) -> tuple[Worker, int, EngineRequest]:
        """Register a request and choose its worker and rank."""
        record, request = self._register(arrival)
        request.shared_blocks = arrival.unique_from // self.block_size
        routed = route_request(request, arrival.session_id, self.block_size, self.router.wants_kv_events)
        placement = self.router.place(routed, now)
        self.hooks.on_route(request.prompt_len, placement.overlap_tokens, self.block_size)
        worker = self.fleet.by_id[placement.worker]
        scheduler_id = worker.first_scheduler_id + placement.rank
        self.collector.on_route(record, Route("agg", placement.worker, scheduler_id, placement.rank,
                                              placement.overlap_tokens))
        return worker, placement.rank, request
