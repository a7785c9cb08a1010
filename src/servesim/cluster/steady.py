"""The steady replay: an aggregated run of plain requests replayed as arrays, not objects.

It applies when `servesim.runtime.paths` allows it: when the per-worker replay does
(`servesim.runtime.isolated`: open-loop single-turn arrivals, a state-free router, no scaling,
no client timeouts) and besides: no time cap, nobody watching passes, every request alike and
sharing nothing (`Driver.plain_lengths`), a router that can place requests in bulk, and workers
of one rank whose passes `servesim.engine.vllm.steady` can replay exactly. Requests are then released as send times, placed a window at a time, each
worker's timeline is run as counts per pass (`SteadyLane`), and the requests each window
finishes go to the report's tally as columns and, with per-request capture, as records to the
spool (or the collector). Workers, pools, driver and collector end as the general replay leaves
them.

A pass the steady replay cannot take exactly stops it (`NotSteady`); the caller then replays
the whole run with the general engine, so the report is the same either way.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from servesim.cluster.aggregated import AggregatedCluster
from servesim.collect.collector import Admission, RequestRecord, Route, Status
from servesim.engine.vllm.steady import Finished, NotSteady, SteadyLane, SteadyShape, steady_shape
from servesim.engine.worker import Worker
from servesim.placement.base import StateFreeRouter
from servesim.report.tally import CompletedColumns, RequestTally
from servesim.runtime import isolated
from servesim.traffic.driver import Driver

INF = float("inf")
NAN = float("nan")


def steady_shapes(cluster: AggregatedCluster) -> list[SteadyShape]:
    """Each worker's steady shape, for a run whose paths allow the steady lane
    (`ReplayPaths.steady`)."""
    driver = cluster.driver
    assert cluster.paths.steady and isinstance(driver, Driver)
    lengths = driver.plain_lengths()
    assert lengths is not None
    return [steady_shape(worker.ranks[0], *lengths) for worker in cluster.pool.fleet.by_id.values()]


class SteadyReplay:
    """Replays a run that `steady_shapes` accepts; `run` raises `NotSteady` if a pass leaves
    the class (the cluster, driver, collector and tally are then spent)."""

    def __init__(self, cluster: AggregatedCluster, shapes: list[SteadyShape], tally: RequestTally | None,
                 keep: Callable[[RequestRecord], None] | None = None,
                 progress: Callable[[float | None], None] | None = None) -> None:
        """`tally`: where finished requests go as columns (None: nowhere); `keep`: what takes
        each finished request's record (per-request capture; None: no record is made)."""
        self.cluster = cluster
        self.tally = tally
        self.keep = keep
        workers = list(cluster.pool.fleet.by_id.values())
        self.workers = workers
        self.lanes = [SteadyLane(shape, worker.pass_ends) for shape, worker in zip(shapes, workers, strict=True)]
        self._progress = progress
        self.now = 0.0
        self.passes = 0
        """Passes replayed (for tests and profiles)."""

    def run(self) -> float:
        """Replay to the end; returns the last instant the shared clock visits."""
        cluster, driver, collector = self.cluster, self.cluster.driver, self.cluster.collector
        assert isinstance(driver, Driver)
        router = cluster.router
        assert isinstance(router, StateFreeRouter)
        lag = driver.frontend_ms
        slot = {worker.worker_id: i for i, worker in enumerate(self.workers)}
        clock = isolated.SharedClock(list(cluster.pools.values()), self.workers, INF)
        while True:
            first_rid = collector.num_arrived
            sent = np.array(driver.release_times(isolated.ROUTE_WINDOW), dtype=np.float64)
            if not len(sent):
                break
            seen = sent + lag
            bound = driver.next_ready_time()
            placed = router.place_many(len(sent))
            lane_of = np.array([slot[w] for w in placed], dtype=np.int64)
            collector.num_arrived += len(sent)
            for index, lane in enumerate(self.lanes):
                mine = np.flatnonzero(lane_of == index)
                lane.feed(seen[mine].tolist(), first_rid + mine, sent[mine])
                lane.run(bound)
                self._hand_back(index, lane)
            clock.advance(seen, bound)  # every later pass starts at `bound` or after, and so does every later arrival
            if self._progress is not None:
                self._progress(None)
        for lane, worker in zip(self.lanes, self.workers, strict=True):
            if not lane.idle():
                raise NotSteady("a worker holds requests it can never run")
            worker.busy_ms = lane.busy_ms
            self.passes += len(lane.ends)
        if clock.last is not None:
            self.now = clock.last
        return self.now

    def _hand_back(self, index: int, lane: SteadyLane) -> None:
        """Hand the requests `lane` finished to the tally and to `keep`."""
        finished = lane.hand_back()
        count = len(finished.rid)
        if not count:
            return
        shape, worker = lane.shape, self.workers[index]
        ends = np.frombuffer(lane.ends, dtype=np.float64)  # a view: dropped before the lane runs on
        first_pass = finished.first_pass
        last = ends[first_pass + (shape.output - 1)]
        if self.tally is not None:
            second = ends[first_pass + 1] if shape.output > 1 else np.full(count, NAN)
            columns = CompletedColumns(finished.rid, finished.sent, np.full(count, shape.prompt, dtype=np.int64),
                                       np.full(count, shape.output, dtype=np.int64), first_pass, ends[first_pass],
                                       second, last)
            self.tally.add_completed(("decode", worker.worker_id), lane.ends, columns)
        del ends
        if self.keep is not None:
            self._keep_records(worker, shape, finished, last)
        self.cluster.collector.num_terminal += count

    def _keep_records(self, worker: Worker, shape: SteadyShape, finished: Finished, last: np.ndarray) -> None:
        """The record of each finished request, as the general replay makes it, to `keep`."""
        keep, prompt, output, ends = self.keep, shape.prompt, shape.output, worker.pass_ends
        assert keep is not None
        worker_id, scheduler_id = worker.worker_id, worker.first_scheduler_id
        for rid, sent, at, first, end in zip(finished.rid.tolist(), finished.sent.tolist(),
                                             finished.admitted_at.tolist(), finished.first_pass.tolist(),
                                             last.tolist(), strict=True):
            record = RequestRecord(rid, f"session_{rid}", 0, sent, prompt, output,
                                   [Route("agg", worker_id, scheduler_id, 0, 0)], [Admission(at, 0, "agg")],
                                   Status.COMPLETED, end, output, [first, first + output], ends)
            keep(record)

