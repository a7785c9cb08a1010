"""The planner's resolved settings (`servesim.build.control` fills them from a `planner:`
section the way the reference stack's adapter does)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from servesim.scaling.forecast import Forecaster, make_forecaster

DEFAULT_TTFT_MS = 500.0
DEFAULT_ITL_MS = 50.0


@dataclass(frozen=True, slots=True)
class ForecastSettings:
    """Which demand forecaster throughput scaling uses, and its knobs."""

    kind: str = "arima"
    log1p: bool = False
    window: int = 50
    moving_average_window: int = 5
    q_level: float = 1.0
    q_trend: float = 0.1
    r: float = 10.0
    kalman_min_points: int = 5

    def make(self) -> Forecaster:
        """A fresh forecaster."""
        return make_forecaster(self.kind, log1p=self.log1p, window=self.window,
                               moving_average_window=self.moving_average_window, q_level=self.q_level,
                               q_trend=self.q_trend, r=self.r, kalman_min_points=self.kalman_min_points)


@dataclass(frozen=True, slots=True)
class PlannerSettings:
    """Everything the policy needs from the config, resolved (defaults and forced modes applied)."""

    disaggregated: bool = False
    target: str = "throughput"
    throughput_scaling: bool = False
    load_scaling: bool = True
    throughput_interval_s: int = 180
    load_interval_s: int = 5
    ttft_ms: float = DEFAULT_TTFT_MS
    itl_ms: float = DEFAULT_ITL_MS
    sensitivity: float = 0.8
    min_prefill: int = 1
    min_decode: int = 1
    max_gpus: int = 8
    min_gpus: int = -1
    max_step: int = 8
    fpm_window: int = 64
    forecast: ForecastSettings = field(default_factory=ForecastSettings)

    @property
    def tick_s(self) -> int:
        """The base tick: gcd of the load interval and, when it runs, the throughput interval."""
        if not self.throughput_scaling:
            return self.load_interval_s
        return math.gcd(self.load_interval_s, self.throughput_interval_s)

    def min_workers(self, pool: str) -> int:
        """The minimum worker count of a pool ("decode" is also the aggregated pool)."""
        return self.min_prefill if pool == "prefill" else self.min_decode
