"""The live composition: `simulate`'s stages wired for requests that arrive while the clock
runs (`servesim serve`), stepped by the caller instead of replayed to the end."""

from __future__ import annotations

import math
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from servesim.api import Report, RunStages, build_report
from servesim.build import LoweredRun, lower
from servesim.cluster import AggregatedCluster
from servesim.config import SimConfig, load_config, parse_config
from servesim.errors import ConfigError
from servesim.perf import save_timing_cache
from servesim.runtime.replay import ReplayLoop

if TYPE_CHECKING:
    from servesim.scaling.contract import ScalingPolicy
    from servesim.traffic.live import LiveDriver


class LiveReplay:
    """A replay whose requests arrive while it runs (`servesim serve`): the caller adds requests
    to `driver`, steps the clock with `run_until`, hangs up requests whose clients left, and
    takes the report with `finish`. The engines, router and planner are those `simulate` wires
    for the same config, run without fast paths (so that each pass can be observed)."""

    def __init__(self, run: LoweredRun, stages: RunStages, driver: LiveDriver, reference: bool) -> None:
        self.run = run
        self.driver = driver
        self.stages = stages
        self.reference = reference
        cluster = stages.cluster
        assert isinstance(cluster, AggregatedCluster)
        self.cluster = cluster
        cluster.track_places()
        self.loop: ReplayLoop = ReplayLoop(driver, list(cluster.pools.values()), cluster, None)
        self._started = time.perf_counter()
        stages.spent = True
        driver.start(0.0)
        self.loop.start()

    def warm_up(self) -> None:
        """Load what each pool's timing model defers (AIConfigurator's engine, which a timing
        memo may spare until a question it cannot answer), so that no request waits for it
        mid-run; answers are unchanged."""
        for spec in self.run.pools:
            getattr(spec.timing, "engine", None)

    @property
    def now(self) -> float:
        """The simulated clock (ms)."""
        return self.loop.now

    def run_until(self, until_ms: float) -> float:
        """Process everything due by `until_ms` and move the clock there."""
        return self.loop.run_until(until_ms)

    def hang_up(self, rid: int) -> bool:
        """The client of request `rid` left now (`AggregatedCluster.hang_up`)."""
        return self.cluster.hang_up(rid, self.loop.now)

    def finish(self) -> Report:
        """Close the driver, hang up every request still open and build the report of the run so
        far (per-request records included)."""
        self.driver.close()
        for rid in self.cluster.open_requests():
            self.cluster.hang_up(rid, self.loop.now)
        while self.cluster.in_flight() and (at := self.loop.next_time()) < math.inf:
            self.loop.run_until(at)  # to the ends of the passes that still hold hung-up requests
        wall_ms = (time.perf_counter() - self._started) * 1000
        stages = self.stages
        report = build_report(self.run, self.cluster, stages.collector, stages.tally, self.loop.now, wall_ms, True,
                         stages.sampling)
        report.summary["timed_out_requests"] = stages.tally.timed_out
        save_timing_cache()
        return report.reference_fields_only() if self.reference else report


def live_replay(config: SimConfig | Mapping[str, Any] | str | Path, *, timeseries: bool = False,
                scaling: ScalingPolicy | None = None) -> LiveReplay:
    """Wire the engine section of `config` for requests added while it runs (`LiveReplay`);
    its traffic section is not used. Disaggregated serving is refused (ConfigError)."""
    from servesim.traffic.live import LiveDriver

    if isinstance(config, (str, os.PathLike)):
        config = load_config(config)
    elif isinstance(config, Mapping):
        config = parse_config(config)
    run = lower(config, unservable="reject")
    if run.disaggregated:
        raise ConfigError("engine.mode: disaggregated serving cannot be served live (servesim serve takes "
                          "aggregated configs)")
    if scaling is None and run.planner is not None:
        from servesim.scaling.planner.policy import DynamoPlanner

        scaling = DynamoPlanner(run.planner)
    driver = LiveDriver(run.traffic.frontend_ms)
    stages = RunStages(run, True, False, scaling, None, timeseries, None, driver=driver)
    return LiveReplay(run, stages, driver, config.compat == "reference")
