"""The composition root: build every stage from a config, wire them, run, report.

This is the only module that knows the order of the stages: traffic → placement → engine →
collect → report, around the replay loop.
"""

from __future__ import annotations

import gc
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servesim.build import LoweredRun, lower
from servesim.cluster import AggregatedCluster, DisaggregatedCluster
from servesim.collect.collector import TIMED_OUT, Collector
from servesim.config import SimConfig, load_config, parse_config
from servesim.report.records import request_records
from servesim.report.workers import WorkerUsage, worker_breakdown
from servesim.report.summary import PoolUsage, summarize
from servesim.runtime.isolated import IsolatedReplay
from servesim.runtime.replay import ReplayLoop
from servesim.scaling.contract import ScalingPolicy


class ProgressMeter:
    """Draws simulated time and finished requests on stderr, at most ~5 times a second."""

    def __init__(self, total_requests: int, collector: Collector) -> None:
        self.total = total_requests
        self.collector = collector
        self.started = time.perf_counter()
        self.last = self.started
        self.drawn = False

    def __call__(self, now_ms: float | None) -> None:
        """Redraw (if due); `now_ms` is the simulated time, None when workers run one by one."""
        wall = time.perf_counter()
        if wall - self.last < 0.2 or wall - self.started < 1.0:
            return
        self.last = wall
        done = self.collector.num_terminal
        pct = 100 * done / self.total if self.total else 100.0
        simulated = f"simulated {now_ms / 1000:,.1f} s, " if now_ms is not None else ""
        sys.stderr.write(f"\r[servesim] {done}/{self.total} requests ({pct:5.1f} %), "
                         f"{simulated}wall {wall - self.started:,.1f} s ")
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
    extensions: dict[str, Any] | None = None
    """What servesim reports beyond the reference: `workers`, a per-worker breakdown (also
    written to `workers.json` by the CLI)."""

    def to_dict(self) -> dict[str, Any]:
        """The reference's `prediction.json` object (with a `planner` section when one ran)."""
        out = dict(self.summary)
        if self.per_request is not None:
            out["per_request"] = self.per_request
        return out

    def __getitem__(self, key: str) -> Any:
        return self.summary[key]


def simulate(config: SimConfig | Mapping[str, Any] | str | Path, *, capture_per_request: bool = False,
             progress: bool = False, fast: bool = True, unservable: str = "reject",
             scaling: ScalingPolicy | None = None) -> Report:
    """Run one simulation and return its report.

    `config` is a validated `SimConfig`, a mapping in the YAML schema, or a path to a YAML file.
    With `progress`, a one-line progress indicator is drawn on stderr during long runs.
    `fast=False` turns off the fast paths (implicitly advanced decode cohorts); results are
    identical either way, which the test suite checks. `unservable="fail"` makes a request that
    can never fit the KV pool stall the run into an error, as the reference does; the default
    ("reject") reports it as rejected with a reason and carries on. `scaling` plugs in a
    scaling policy of your own (see `servesim.scaling.contract`); by default the config's
    `planner` section decides.
    """
    if unservable not in ("reject", "fail"):
        raise ValueError(f"unservable must be 'reject' or 'fail' (got {unservable!r})")
    if isinstance(config, (str, Path)):
        config = load_config(config)
    elif not isinstance(config, SimConfig):
        config = parse_config(config)
    run = lower(config, unservable=unservable)
    with _collection_paused():
        return _replay(run, capture_per_request=capture_per_request, progress=progress, fast=fast,
                       scaling=scaling)


def _replay(run: LoweredRun, *, capture_per_request: bool, progress: bool, fast: bool,
            scaling: ScalingPolicy | None) -> Report:
    """Wire the stages of a lowered run, replay it and build the report."""
    config = run.config
    started = time.perf_counter()
    driver = run.make_driver()
    collector = Collector()
    cluster_type = DisaggregatedCluster if run.disaggregated else AggregatedCluster
    cluster = cluster_type(run, driver, collector, fast=fast)
    if scaling is None and config.planner.policy == "enabled":
        from servesim.scaling.planner import make_planner

        scaling = make_planner(config.planner, config.evaluation.sla, run.disaggregated)
    if scaling is not None:
        cluster.enable_scaling(scaling)
    meter = ProgressMeter(driver.total_requests, collector) if progress else None
    pools = list(cluster.pools.values())
    driver.start(0.0)
    if fast and isinstance(cluster, AggregatedCluster) and cluster.isolated:
        loop: ReplayLoop | IsolatedReplay = IsolatedReplay(pools, cluster, run.time_cap_ms, progress=meter)
    else:
        loop = ReplayLoop(driver, pools, cluster, run.time_cap_ms, progress=meter)
    loop.run()
    if meter is not None:
        meter.close()
    wall_ms = (time.perf_counter() - started) * 1000
    usage = {pool.name: PoolUsage(pool.worker_seconds, _gpus_per_worker(run, pool.name)) for pool in pools}
    summary = summarize(collector.records, usage, wall_ms, run.sla)
    if config.traffic.client_timeout_seconds is not None:
        summary["timed_out_requests"] = sum(1 for r in collector.records if r.status == TIMED_OUT)
    workers = [WorkerUsage(name, w.worker_id, w.busy_ms) for name, fleet in cluster.fleets.items()
               for w in fleet.by_id.values()]
    extensions = {"workers": worker_breakdown(collector.records, workers, loop.now)}
    if cluster.scaler is not None:
        summary["planner"] = cluster.scaler.record.as_dict()
    per_request = request_records(collector.records) if capture_per_request else None
    return Report(summary, per_request, extensions)


@contextmanager
def _collection_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector: the replay allocates many long-lived objects and
    no reference cycles worth collecting, so collections would only cost time."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _gpus_per_worker(run: LoweredRun, pool: str) -> int:
    role = "aggregated" if pool == "decode" and not run.disaggregated else pool
    return run.pool(role).gpus_per_worker
