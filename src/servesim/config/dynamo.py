"""The Dynamo reference stack's sections: `router:` (where requests go) and `planner:`
(autoscaling), each with servesim's extensions marked.
"""


import math
from typing import Annotated, Literal

from annotated_types import Ge, Gt, Le
from pydantic import Strict, model_validator

from servesim.config.fields import NonNegativeInt, NonNegativeNumber, PositiveInt, PositiveNumber, SchemaModel, raise_if


UnitFraction = Annotated[float, Ge(0), Le(1)]
"""A number in [0, 1] (Dynamo's range for the router's tier hit weights)."""


class PrefillLoadModelConfig(SchemaModel):
    """How the KV router ages the prefill load it charges a worker."""

    type: Literal["none", "ais"] = "none"
    """'none': a request's prompt counts in full until its first token; 'ais': it decays
    linearly over the prefill time the worker's timing model predicts."""


class RouterConfig(SchemaModel):
    """Where each request goes (Dynamo's `router:` section; servesim extensions marked)."""

    policy: Literal["round_robin", "kv_router", "random", "least_loaded"] = "round_robin"
    """round_robin (the reference's default), kv_router (Dynamo's KV-aware cost), random or
    least_loaded (fewest requests in flight) — the last two are servesim extensions."""
    overlap_score_credit: NonNegativeNumber = 1.0
    """kv_router: prefill blocks credited per cached prefix block (c)."""
    prefill_load_scale: NonNegativeNumber = 1.0
    """kv_router: weight of the worker's prefill load after the credit (s)."""
    temperature: NonNegativeNumber = 0.0
    """kv_router: 0 picks the cheapest worker; above 0, softmax over normalised costs."""
    prefill_load_model: PrefillLoadModelConfig = PrefillLoadModelConfig.defaults()
    """kv_router: how charged prefill load ages."""
    overlap_score_credit_decay: NonNegativeNumber = 0.0
    """kv_router (servesim extension): softens the credit on workers with excess prefill load."""
    decode_active_request_weight: NonNegativeNumber = 0.0
    """kv_router (servesim extension): cost in blocks per request in flight on the worker."""
    host_cache_hit_weight: UnitFraction = 0.75
    """Upstream key (Dynamo 1.6.1's router of AISimulate 0.13, `--router-host-cache-hit-weight`): kv_router credit per prefix block a rank holds in its host tier right after its GPU overlap (`kv_cache.host_offload`, rank-local)."""
    disk_cache_hit_weight: UnitFraction = 0.25
    """Upstream key (Dynamo 1.6.1's router, `--router-disk-cache-hit-weight`): kv_router credit per prefix block a rank's worker holds on disk right after its host overlap (`kv_cache.g3_offload`, worker-local)."""
    session_affinity: bool = False
    """servesim extension: later turns of a session go to the worker of its first turn (while
    that worker serves)."""
    seed: NonNegativeInt = 0
    """servesim extension: seed of the router's own random stream (ties, softmax, random policy),
    so a config always gives the same report."""


# --------------------------------------------------------------------------------------------
# planner (the Dynamo reference stack's autoscaler section, plus servesim extensions)
# --------------------------------------------------------------------------------------------

_INTERVAL_KEYS = ("throughput_adjustment_interval_seconds", "load_adjustment_interval_seconds")
IntervalSeconds = Annotated[int, Strict(), Gt(0)]
"""Strict whole seconds > 0 (Dynamo's intervals are integers)."""
GpuBudget = Annotated[int, Strict(), Ge(-1)]
"""Strict integer >= -1 (-1: no bound)."""
Percent = Annotated[int, Strict(), Ge(0), Le(100)]
"""Strict integer percentage in [0, 100]."""


class PlannerConfig(SchemaModel):
    """Dynamo's planner (autoscaler), as the reference stack's `planner:` section writes it."""

    policy: Literal["enabled", "disabled"] = "disabled"
    """'enabled' runs the planner; 'disabled' (also an omitted or empty section) keeps the fleet fixed."""
    target: Literal["throughput", "latency", "load", "sla"] = "throughput"
    """Dynamo's optimization_target. throughput/latency: fixed queue and KV-utilisation
    thresholds; load: queued prefill tokens 1/0 and KV utilisation 90 %/70 %; sla: predicted
    TTFT/ITL against evaluation.sla. Every target but sla forces load scaling on and
    throughput scaling off."""
    enable_throughput_scaling: bool = True
    """Predictive scaling from a traffic forecast (only with target sla)."""
    enable_load_scaling: bool = False
    """Reactive scaling from forward-pass metrics, one worker per decision (forced on by
    targets other than sla)."""
    throughput_adjustment_interval_seconds: IntervalSeconds | None = 180
    """Seconds between throughput decisions (null only while throughput scaling is off)."""
    load_adjustment_interval_seconds: IntervalSeconds | None = 5
    """Seconds between load decisions (null only while load scaling is off)."""
    max_throughput_scaling_replicas: PositiveInt = 8
    """Largest replica change per pool from one throughput decision."""
    max_num_fpm_samples: PositiveInt = 64
    """Forward-pass samples the planner averages request shapes over."""
    fpm_sample_bucket_size: PositiveInt = 16
    """Dynamo's regression bucket count (a perfect square); accepted, no effect (servesim
    predicts with the pool's own timing model)."""
    load_scaling_down_sensitivity: Percent = 80
    """sla target: a scale-down must keep the predicted latency under this % of the SLA."""
    load_min_observations: PositiveInt = 5
    """Dynamo's regression warm-up; accepted, no effect (the timing model needs none)."""
    load_predictor: Literal["constant", "arima", "kalman", "prophet", "moving_average"] = "arima"
    """Traffic forecaster: constant (last value), kalman (local linear trend), arima (servesim:
    the local-linear-trend filter, its state-space equivalent ARIMA(0,2,2)), prophet (servesim:
    least-squares trend over the last prophet_window_size points), moving_average (servesim
    extension: mean of the last moving_average_window points)."""
    load_predictor_log1p: bool = False
    """Forecast log1p of the series (spiky traffic)."""
    prophet_window_size: PositiveInt = 50
    """prophet: points the trend is fitted on."""
    kalman_q_level: PositiveNumber = 1.0
    """kalman/arima: process noise of the level."""
    kalman_q_trend: PositiveNumber = 0.1
    """kalman/arima: process noise of the trend."""
    kalman_r: PositiveNumber = 10.0
    """kalman/arima: measurement noise."""
    kalman_min_points: PositiveInt = 5
    """kalman/arima: observations before the filter forecasts (the last value until then)."""
    moving_average_window: PositiveInt = 5
    """servesim extension: points averaged by load_predictor moving_average."""
    max_num_gpus: GpuBudget = 8
    """GPU ceiling over all pools (Dynamo's max_gpu_budget); -1: none."""
    min_num_gpus: GpuBudget = -1
    """GPU floor over all pools (Dynamo's min_gpu_budget); -1: none."""
    min_workers: NonNegativeInt = 1
    """Fewest workers per pool (0 allows scaling to zero)."""
    prefill_min_workers: PositiveInt | None = None
    """Disaggregated: fewest prefill workers (default min_workers)."""
    decode_min_workers: PositiveInt | None = None
    """Disaggregated: fewest decode workers (default min_workers)."""

    @model_validator(mode="after")
    def _planner_rules(self) -> "PlannerConfig":
        """Dynamo's checks on an enabled planner: a perfect-square bucket count, an enabled
        scaling mode, an interval for each enabled mode, load faster than throughput."""
        if self.policy != "enabled":
            return self
        problems = []
        root = math.isqrt(self.fpm_sample_bucket_size)
        if root * root != self.fpm_sample_bucket_size:
            problems.append(("fpm_sample_bucket_size", "must be a perfect square"))
        throughput_on, load_on = self.scaling_modes
        if not (throughput_on or load_on):
            problems.append(("", "at least one of enable_throughput_scaling and enable_load_scaling must be true"))
        for key, on in zip(_INTERVAL_KEYS, (throughput_on, load_on), strict=True):
            if on and getattr(self, key) is None:
                problems.append((key, "cannot be null while its scaling mode is enabled"))
        throughput, load = self.throughput_adjustment_interval_seconds, self.load_adjustment_interval_seconds
        if throughput_on and load_on and throughput is not None and load is not None and load >= throughput:
            problems.append(("load_adjustment_interval_seconds",
                             f"must be shorter than throughput_adjustment_interval_seconds ({throughput})"))
        raise_if(problems)
        return self

    @property
    def scaling_modes(self) -> tuple[bool, bool]:
        """(throughput, load) scaling as Dynamo runs them: every target but sla forces load
        scaling on and throughput scaling off."""
        if self.target != "sla":
            return (False, True)
        return (self.enable_throughput_scaling, self.enable_load_scaling)
