"""The composition root: build every stage from a config, wire them, run, report.

This is the only module that knows the order of the stages: traffic → placement → engine →
collect → report, around the replay loop.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from operator import attrgetter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from servesim.build import LoweredRun, lower
from servesim.cluster import AggregatedCluster, Cluster
from servesim.collect.collector import Collector, RequestRecord
from servesim.config import SimConfig, load_config, parse_config
from servesim.errors import ConfigError
from servesim.perf import save_timing_cache
from servesim.report.records import request_records
from servesim.report.workers import WorkerUsage, worker_breakdown
from servesim.report.summary import (
    SERVESIM_FIELDS,
    SERVESIM_OPTIONAL_FIELDS,
    SERVESIM_RECORD_FIELDS,
    PoolUsage,
    Sla,
    request_accounting,
    summarize,
)
from servesim.report.tally import RequestTally
from servesim.runtime.collection import collector_left_alone
from servesim.runtime.isolated import IsolatedReplay
from servesim.runtime.paths import ISOLATED, SHARED, STEADY, CallFacts, ReplayPaths, decide
from servesim.runtime.replay import ReplayLoop
from servesim.traffic.driver import Driver, RequestDriver
from servesim.traffic.workload import Workload

if TYPE_CHECKING:  # imported where a run needs them (start-up time)
    from servesim.cluster.disaggregated import DisaggregatedCluster
    from servesim.cluster.sampling import StateSampling
    from servesim.collect.sampler import TimeSeries
    from servesim.report.latency import LatencySamples
    from servesim.report.spool import RecordSpool
    from servesim.scaling.contract import ScalingPolicy
    from servesim.traffic.agentic_driver import AgenticDriver


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


@dataclass(eq=False)
class Report:
    """The result of one simulation: the summary fields and, if captured, per-request records."""

    summary: dict[str, Any]
    per_request: list[dict[str, Any]] | None = None
    extensions: dict[str, Any] | None = None
    """What servesim reports beyond the reference: `workers`, a per-worker breakdown (also
    written to `workers.json` by the CLI); for agentic traces, `unreleased`, the requests never
    released because a request of their play ended without completing (`unreleased.json`,
    docs/traffic.md); with a host KV tier, `kv_tiers`: the prompt tokens admissions reused from
    the GPU pool and from host memory, and the bytes stored to and loaded from host memory (and
    read from and written to disk), drawn in the HTML report."""
    timeseries: TimeSeries | None = None
    """Each worker's queue, batch, KV-cache use and prefix hits over simulated time (with
    `simulate(..., timeseries=True)`)."""
    latency: LatencySamples | None = None
    """Per-request latency arrays (with `timeseries=True`), what `write_html` draws."""
    sla: Sla | None = None
    """The run's SLA targets (`evaluation.sla`), drawn on the report's distributions; the
    verdicts are the summary's `sla` block (servesim mode)."""
    deployment: dict[str, str] | None = None
    """What the run simulated, in words (model, GPU, backend, replicas × shape, GPUs, load):
    the headline of the table and the HTML report (`report/headline.py`)."""
    first_rejection: str | None = None
    """Why the first rejected (or failed) request did not complete (None: none was rejected)."""
    rejected: int = 0
    """Requests rejected or failed, for any reason."""
    context_rejected: int = 0
    """Requests rejected because their prompt reaches the context length (the reference's own rejection)."""
    spool: RecordSpool | None = None
    """The spool that took the per-request records as requests ended, when `simulate(...,
    spool=...)` used it; `per_request` is then None."""
    provenance: dict[str, str] = field(default_factory=dict)
    """What the run resolved, as flat text: servesim_version, compat, backend, backend_version,
    hardware, timing_model, fidelity, calibration, and the paths it took: replay_loop and
    fast_paths (`servesim.runtime.paths`) — written to prediction.json's `provenance` and above
    the table, except under `compat: reference`."""

    def to_dict(self) -> dict[str, Any]:
        """The reference's `prediction.json` object (with a `planner` section when one ran)."""
        out = dict(self.summary)
        if self.per_request is not None:
            out["per_request"] = self.per_request
        return out

    def __getitem__(self, key: str) -> Any:
        return self.summary[key]

    def reference_fields_only(self) -> Report:
        """This report with exactly the reference's fields: servesim's additions to the summary
        (`rejected_requests`, `incomplete_requests`, `timed_out_requests`, `sla`, and the upstream
        0.13 power fields) and to the per-request
        records (`rejection_reason`) left out, and no headline (`deployment`)."""
        from servesim.perf.energy import POWER_FIELDS

        added = {*SERVESIM_FIELDS, *SERVESIM_OPTIONAL_FIELDS, *POWER_FIELDS}
        summary = {key: value for key, value in self.summary.items() if key not in added}
        records = None if self.per_request is None else [
            {key: value for key, value in record.items() if key not in SERVESIM_RECORD_FIELDS}
            for record in self.per_request]
        return replace(self, summary=summary, per_request=records, deployment=None)

    def write_html(self, path: str | Path, title: str = "servesim prediction") -> None:
        """Write the self-contained HTML report (needs `simulate(..., timeseries=True)` and the
        `report` extra: plotly)."""
        from servesim.report.html.run import write_run_report

        write_run_report(self, Path(path), title)

    def to_pandas(self) -> Any:
        """The per-request records as a pandas DataFrame (needs `capture_per_request=True`)."""
        from servesim.report.tables import to_pandas

        return to_pandas(self._rows())

    def to_polars(self) -> Any:
        """The per-request records as a polars DataFrame (needs `capture_per_request=True`)."""
        from servesim.report.tables import to_polars

        return to_polars(self._rows())

    def _rows(self) -> list[dict[str, Any]]:
        if self.per_request is None:
            raise ValueError("this report has no per-request records: run simulate(..., capture_per_request=True)")
        return self.per_request


def simulate(config: SimConfig | Mapping[str, Any] | str | Path, *, capture_per_request: bool = False,
             progress: bool = False, fast: bool = True, unservable: str | None = None,
             scaling: ScalingPolicy | None = None, workload: Workload | None = None,
             timeseries: bool = False, spool: RecordSpool | None = None) -> Report:
    """Run one simulation and return its report.

    `config` is a validated `SimConfig`, a mapping in the YAML schema, or a path to a YAML file.
    With `progress`, a one-line progress indicator is drawn on stderr during long runs.
    `fast=False` turns off the fast paths (implicitly advanced decode cohorts, running ahead,
    one worker at a time); results are identical either way, which the test suite checks.
    `unservable="fail"` makes a request that can never fit the KV pool stall the run into an
    error, as the reference does; "reject" reports it as rejected with a reason and carries on;
    None (the default) is "fail" under `compat: reference` and "reject" otherwise. Under
    `compat: reference` the report has exactly the reference's fields. `scaling` plugs in a scaling policy of your own (see
    `servesim.scaling.contract`); by default the config's `planner` section decides.
    `workload` replays these sessions instead of the ones `traffic.source` describes;
    `traffic.load` still decides when they arrive (with `trace_timestamps`, at the sessions'
    own `first_arrival_ms`, counted from `Workload.origin_ms`). `timeseries=True` samples every
    worker's state over simulated time and keeps per-request latency arrays: what
    `Report.write_html` draws. With `capture_per_request` and a `spool`, each request's record
    goes to the spool as the request ends instead of to `Report.per_request` (so memory does not
    grow with finished records), unless the run needs whole records to the end (disaggregated
    serving, agentic traces); `Report.spool` says whether it was used.
    """
    if unservable not in (None, "reject", "fail"):
        raise ConfigError(f"unservable must be 'reject' or 'fail' (got {unservable!r})")
    if scaling is not None and not all(callable(getattr(scaling, m, None)) for m in ("initial_tick_ms", "on_tick")):
        raise ConfigError(f"scaling must have initial_tick_ms() and on_tick(snapshot) methods "
                          f"(got {type(scaling).__name__})")
    if isinstance(config, (str, os.PathLike)):
        config = load_config(config)
    elif isinstance(config, Mapping):
        config = parse_config(config)
    elif not isinstance(config, SimConfig):
        raise ConfigError(f"config must be a SimConfig, a mapping in the YAML schema or a path to a YAML file "
                          f"(got {type(config).__name__})")
    reference = config.compat == "reference"
    run = lower(config, unservable=unservable or ("fail" if reference else "reject"))
    try:
        with collector_left_alone():
            report = _replay(run, capture_per_request=capture_per_request, progress=progress, fast=fast,
                             scaling=scaling, workload=workload, timeseries=timeseries, spool=spool)
        return report.reference_fields_only() if reference else report
    finally:
        save_timing_cache()  # the AIC answers this run added, for the next one


def _replay(run: LoweredRun, *, capture_per_request: bool, progress: bool, fast: bool,
            scaling: ScalingPolicy | None, workload: Workload | None, timeseries: bool,
            spool: RecordSpool | None) -> Report:
    """Wire the stages of a lowered run, replay it and build the report."""
    started = time.perf_counter()
    if scaling is None and run.planner is not None:
        from servesim.scaling.planner.policy import DynamoPlanner  # imported when used: start-up time

        scaling = DynamoPlanner(run.planner)
    stages = RunStages(run, capture_per_request, fast, scaling, workload, timeseries, spool)
    paths = stages.paths
    now = _steady_replay(stages, progress) if paths.steady else None
    left_steady = stages.left_steady
    loop = STEADY
    if now is None:
        if stages.spent:
            stages.cluster.release()
            stages = RunStages(run, capture_per_request, fast, scaling, workload, timeseries, spool)
        now = _general_replay(run, stages, progress)
        loop = ISOLATED if paths.isolated else SHARED
    wall_ms = (time.perf_counter() - started) * 1000
    report = build_report(run, stages.cluster, stages.collector, stages.tally, now, wall_ms,
                     capture_per_request and stages.spool is None, stages.sampling)
    report.spool = stages.spool
    report.provenance = {**run.provenance, **paths.provenance(loop, left_steady)}
    stages.cluster.release()  # the run's memory returns with its last reference (no full collection)
    return report


class RunStages:
    """The stages of one replay, wired: driver, cluster, collector, the report's tally and
    (with time series) the state sampling."""

    def __init__(self, run: LoweredRun, capture_per_request: bool, fast: bool, scaling: ScalingPolicy | None,
                 workload: Workload | None, timeseries: bool, spool: RecordSpool | None,
                 driver: RequestDriver | None = None) -> None:
        if driver is None:
            source = workload if workload is not None else run.traffic.workload(run.pools[0].rank_config.block_size)
            driver = run.traffic.driver(source, prompt_limit=run.pools[0].rank_config.prompt_content_limit)
        self.driver = driver
        self.tally = RequestTally()
        self.whole_records = whole_records = run.disaggregated or _agentic(driver) is not None
        """Whether the report needs every request's whole record to the end."""
        self.paths: ReplayPaths = decide(run, driver, CallFacts(fast, scaling is not None, timeseries, whole_records))
        """Which fast paths the replay may take (`servesim.runtime.paths`)."""
        if not capture_per_request or whole_records:
            spool = None
        self.spool = spool
        self.keep_records = whole_records or (capture_per_request and spool is None)
        self.collector = Collector(fold=None if self.keep_records else _fold(self.tally, spool))
        if run.disaggregated:
            from servesim.cluster.disaggregated import DisaggregatedCluster

            self.cluster: AggregatedCluster | DisaggregatedCluster = DisaggregatedCluster(
                run, driver, self.collector, paths=self.paths, scaling=scaling)
        else:
            self.cluster = AggregatedCluster(run, driver, self.collector, paths=self.paths, scaling=scaling)
        agentic = _agentic(driver)
        if agentic is not None:
            agentic.attach(self.cluster)
        self.sampling: StateSampling | None = None
        if timeseries:
            from servesim.cluster.sampling import StateSampling

            self.sampling = StateSampling()
            self.cluster.observers.append(self.sampling)
        self.spent = False
        """Whether a replay started on these stages (a second one needs new ones)."""
        self.left_steady: str | None = None
        """Why the steady replay on these stages stopped (None: it did not)."""


def _steady_replay(stages: RunStages, progress: bool) -> float | None:
    """Replay a run whose paths allow it as arrays (`servesim.cluster.steady`); the last
    instant, or None when a pass turns out not to be that simple (`stages.left_steady` says
    why)."""
    cluster = stages.cluster
    assert isinstance(cluster, AggregatedCluster)
    from servesim.cluster.steady import NotSteady, SteadyReplay, steady_shapes

    shapes = steady_shapes(cluster)
    stages.spent = True
    kept: list[RequestRecord] = []
    keep: Callable[[RequestRecord], None] | None
    tally: RequestTally | None
    if stages.keep_records:  # the report folds the records into the tally at the end
        tally, keep = None, kept.append
    else:
        tally, keep = stages.tally, stages.spool.add if stages.spool is not None else None
    meter = ProgressMeter(stages.driver.total_requests, stages.collector) if progress else None
    try:
        now = SteadyReplay(cluster, shapes, tally, keep, meter).run()
    except NotSteady as exc:
        stages.left_steady = str(exc)
        return None
    finally:
        if meter is not None:
            meter.close()
    kept.sort(key=attrgetter("rid"))
    stages.collector.records += kept
    return now


def _general_replay(run: LoweredRun, stages: RunStages, progress: bool) -> float:
    """Replay the run with the general engine (per worker when its paths allow); the last
    instant."""
    cluster, driver, paths = stages.cluster, stages.driver, stages.paths
    meter = ProgressMeter(driver.total_requests, stages.collector) if progress else None
    pools = list(cluster.pools.values())
    stages.spent = True
    driver.start(0.0)
    if paths.isolated:
        assert isinstance(cluster, AggregatedCluster)
        loop: ReplayLoop | IsolatedReplay = IsolatedReplay(pools, cluster, run.time_cap_ms, progress=meter,
                                                           run_ahead=paths.run_ahead, run_on=paths.run_on)
    else:
        loop = ReplayLoop(driver, pools, cluster, run.time_cap_ms, progress=meter, run_ahead=paths.run_ahead)
    loop.run()
    if meter is not None:
        meter.close()
    return loop.now


def _fold(tally: RequestTally, spool: RecordSpool | None) -> Callable[[RequestRecord], None]:
    """What the collector does with each request as it ends: the tally takes it and, with a
    spool, so does the spool."""
    if spool is None:
        return tally.add
    add_to_tally, add_to_spool = tally.add, spool.add

    def fold(record: RequestRecord) -> None:
        add_to_tally(record)
        add_to_spool(record)

    return fold


def build_report(run: LoweredRun, cluster: Cluster, collector: Collector, tally: RequestTally, end_ms: float,
                 wall_ms: float, capture_per_request: bool, sampling: StateSampling | None) -> Report:
    """The summary, the per-worker breakdown, the planner section, the per-request records and,
    with `sampling`, the time series and latency arrays. `tally` holds the requests the
    collector folded as they ended; the rest are folded in now. After a warm-up the report
    covers the measured phase only (`servesim.traffic.warmup`)."""
    agentic = _agentic(cluster.driver)
    prep = agentic.preparation if agentic is not None else None
    before: dict[str, float] = {}
    loop_end = end_ms
    if agentic is not None:
        collector.records = agentic.settle(collector.records)
    if prep is not None:
        from servesim.traffic.agentic_driver import PREP_BASE

        collector.records = prep.measured(collector.records, PREP_BASE)
        before = prep.at_barrier
        end_ms -= prep.barrier_ms or 0.0
    for record in collector.unfolded():
        tally.add(record)
    profile_end = agentic.profile_end_ms() if agentic is not None else None
    if profile_end is not None:  # worker seconds run to the profile's end
        for pool in cluster.pools.values():
            pool.worker_seconds += max(0.0, profile_end - loop_end) * len(pool.workers) / 1000
    usage = {p.name: PoolUsage(cluster.pools[p.name].worker_seconds, p.spec.gpus_per_worker)
             for p in cluster.serving}
    summary: dict[str, Any] = summarize(tally, usage, wall_ms, run.sla)
    summary.update(request_accounting(tally, cluster.driver.total_requests))
    if run.traffic.client_timeout_ms is not None:
        summary["timed_out_requests"] = tally.timed_out
    workers = [WorkerUsage(name, w.worker_id, w.busy_ms - before.get(f"{name}:{w.worker_id}", 0.0))
               for name, fleet in cluster.fleets.items() for w in fleet.by_id.values()]
    summary.update(_power(cluster, workers, int(summary.get("total_output_tokens", 0))))
    extensions: dict[str, Any] = {"workers": worker_breakdown(tally, workers, end_ms)}
    driver = agentic
    if driver is not None:
        from servesim.report.trajectories import trajectory_breakdown, trajectory_fields, unreleased_requests

        graph = driver.graph
        summary.update(trajectory_fields(collector.records, graph.play_sizes(), graph.report_block(),
                                         graph.play_starts))
        summary.update(graph.summary_fields)
        if prep is not None:
            summary["agentic_phases"] = prep.report()
        driver.rescale(summary)
        summary["trajectories"] = trajectory_breakdown(collector.records, graph.play_sizes(), graph.play_starts)
        extensions["unreleased"] = unreleased_requests(driver.unreleased(), collector.records)
    if cluster.scaler is not None:
        summary["planner"] = cluster.scaler.record.as_dict()
    g3 = cluster.g3_summary()
    if g3 is not None:
        summary["g3_offload"] = g3
    kvcr = cluster.kvcr_summary()
    if kvcr is not None:
        summary["kvcr"] = kvcr
    tiers = cluster.kv_tiers()
    if tiers is not None:
        extensions["kv_tiers"] = tiers
    numbers = driver.graph.uuid_numbers if driver is not None else None
    per_request = request_records(collector.records, uuid_numbers=numbers) if capture_per_request else None
    report = Report(summary, per_request, extensions, sla=run.sla, deployment=run.deployment,
                    first_rejection=tally.first_rejection[1] if tally.first_rejection else None,
                    rejected=tally.rejected, context_rejected=tally.context_rejected)
    if sampling is not None:
        from servesim.report.latency import from_tally

        report.timeseries = sampling.finish(cluster, end_ms)
        report.latency = from_tally(tally)
    tally.close()
    return report


def _power(cluster: Cluster, workers: list[WorkerUsage], output_tokens: int) -> dict[str, float | None]:
    """`power_w`, `power_coverage` and `energy_per_output_token_j` (`servesim.perf.energy`)."""
    from servesim.perf.energy import EnergyMeter, PoolEnergy, power_fields

    pools = []
    for pool in cluster.serving:
        meter = pool.spec.timing if isinstance(pool.spec.timing, EnergyMeter) else None
        busy = sum(w.busy_ms for w in workers if w.pool == pool.name)
        pools.append(PoolEnergy(meter, busy, pool.spec.gpus_per_worker))
    return power_fields(pools, output_tokens)


def _agentic(driver: RequestDriver) -> AgenticDriver | None:
    """The driver when it replays an agentic trace's dependency graph, else None (a run of
    sessions never imports the agentic modules)."""
    if isinstance(driver, Driver):
        return None
    from servesim.traffic.agentic_driver import AgenticDriver

    return driver if isinstance(driver, AgenticDriver) else None
