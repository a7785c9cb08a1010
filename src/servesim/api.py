"""The composition root: build every stage from a config, wire them, run, report.

This is the only module that knows the order of the stages: traffic → placement → engine →
collect → report, around the replay loop.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servesim.collect.collector import COMPLETED, REJECTED, Collector, RequestRecord, Route
from servesim.config import SimConfig, load_config, parse_config
from servesim.build import LoweredRun, lower
from servesim.engine.request import EngineRequest
from servesim.engine.worker import Worker, WorkerPass
from servesim.placement.round_robin import RoundRobin
from servesim.report.records import request_records
from servesim.report.summary import PoolUsage, summarize
from servesim.runtime.replay import Pool, ReplayLoop
from servesim.traffic.driver import Arrival, Driver


class ProgressMeter:
    """Draws simulated time and finished requests on stderr, at most ~5 times a second."""

    def __init__(self, total_requests: int, collector: Collector) -> None:
        self.total = total_requests
        self.collector = collector
        self.started = time.perf_counter()
        self.last = self.started
        self.drawn = False

    def __call__(self, now_ms: float) -> None:
        wall = time.perf_counter()
        if wall - self.last < 0.2 or wall - self.started < 1.0:
            return
        self.last = wall
        done = self.collector.num_terminal
        pct = 100 * done / self.total if self.total else 100.0
        sys.stderr.write(f"\r[servesim] {done}/{self.total} requests ({pct:5.1f} %), "
                         f"simulated {now_ms / 1000:,.1f} s, wall {wall - self.started:,.1f} s ")
        sys.stderr.flush()
        self.drawn = True

    def close(self) -> None:
        if self.drawn:
            sys.stderr.write("\n")
            sys.stderr.flush()


@dataclass
class Report:
    """The result of one simulation: the summary fields and, if captured, per-request records."""

    summary: dict[str, Any]
    per_request: list[dict[str, Any]] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The reference's `prediction.json` object."""
        out = dict(self.summary)
        if self.per_request is not None:
            out["per_request"] = self.per_request
        return out

    def __getitem__(self, key: str) -> Any:
        return self.summary[key]


class _Cluster:
    """Routes released requests to workers and applies finished passes (the runtime's handler)."""

    def __init__(self, run: LoweredRun, driver: Driver, collector: Collector, *, fast: bool = True) -> None:
        self.run = run
        self.driver = driver
        self.collector = collector
        self.workers = [Worker(w, run.make_ranks(lazy_decode=fast), w * run.dp_size)
                        for w in range(run.replicas)]
        self.placement = RoundRobin(list(range(run.replicas)), run.dp_size)
        self._open: dict[int, tuple[Arrival, RequestRecord, EngineRequest]] = {}

    def release_arrivals(self, now: float) -> list[Worker]:
        return [self._admit(arrival, now) for arrival in self.driver.release(now)]

    def _admit(self, arrival: Arrival, now: float) -> Worker:
        record = self.collector.on_arrival(arrival.session_id, arrival.turn_index, arrival.arrival_ms,
                                           arrival.input_length, arrival.max_output_tokens)
        request = EngineRequest(record.rid, arrival.prompt_runs, arrival.input_length,
                                arrival.max_output_tokens, arrival.output_base, arrival.output_ids,
                                unique_from=arrival.unique_from,
                                block_size=self.run.rank_config.block_size)
        placement = self.placement.place(request)
        worker = self.workers[placement.worker]
        scheduler_id = worker.first_scheduler_id + placement.rank
        self.collector.on_route(record, Route("agg", placement.worker, scheduler_id, placement.rank,
                                              placement.overlap_tokens))
        self._open[record.rid] = (arrival, record, request)
        worker.enqueue(placement.rank, request)
        return worker

    def finish_pass(self, worker: Worker, outcome: WorkerPass, now: float) -> None:
        worker.finish_pass()
        collector = self.collector
        for _rank, result in outcome.ranks:
            for request, reused in result.admitted:
                collector.on_admit(self._open[request.rid][1], outcome.start_ms, reused, "agg")
        for _rank, result in outcome.ranks:
            for request in result.finished:
                self._terminal(request, worker, COMPLETED, now)
            for request in result.rejected:
                self._terminal(request, worker, REJECTED, now)

    def _terminal(self, request: EngineRequest, worker: Worker, status: str, now: float) -> None:
        arrival, record, _ = self._open.pop(request.rid)
        self.collector.on_terminal(record, now, status, request.generated, request.token_spans,
                                   worker.pass_ends, request.reject_reason)
        self.driver.on_terminal(arrival, now, request.generated)

    def in_flight(self) -> int:
        return len(self._open)

    def done(self) -> bool:
        return not self._open and self.driver.drained()


def simulate(config: SimConfig | Mapping[str, Any] | str | Path, *, capture_per_request: bool = False,
             progress: bool = False, fast: bool = True, unservable: str = "reject") -> Report:
    """Run one simulation and return its report.

    `config` is a validated `SimConfig`, a mapping in the YAML schema, or a path to a YAML file.
    With `progress`, a one-line progress indicator is drawn on stderr during long runs.
    `fast=False` turns off the fast paths (implicitly advanced decode cohorts); results are
    identical either way, which the test suite checks. `unservable="fail"` makes a request that
    can never fit the KV pool stall the run into an error, as the reference does; the default
    ("reject") reports it as rejected with a reason and carries on.
    """
    if unservable not in ("reject", "fail"):
        raise ValueError(f"unservable must be 'reject' or 'fail' (got {unservable!r})")
    if isinstance(config, (str, Path)):
        config = load_config(config)
    elif not isinstance(config, SimConfig):
        config = parse_config(config)
    run = lower(config, unservable=unservable)
    started = time.perf_counter()
    driver = run.make_driver()
    collector = Collector()
    cluster = _Cluster(run, driver, collector, fast=fast)
    meter = ProgressMeter(driver.total_requests, collector) if progress else None
    loop = ReplayLoop(driver, [Pool("decode", cluster.workers)], cluster, run.time_cap_ms,
                      progress=meter)
    driver.start(0.0)
    loop.run()
    if meter is not None:
        meter.close()
    wall_ms = (time.perf_counter() - started) * 1000
    pools = {"decode": PoolUsage(loop.pools[0].worker_seconds, run.gpus_per_worker)}
    summary = summarize(collector.records, pools, wall_ms, run.sla)
    per_request = request_records(collector.records) if capture_per_request else None
    return Report(summary, per_request)
