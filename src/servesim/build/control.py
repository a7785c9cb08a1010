"""Lowering the `router:` and `planner:` sections (the Dynamo reference stack's) into the
settings `servesim.placement` and `servesim.scaling.planner` are built from."""

from __future__ import annotations

from typing import TYPE_CHECKING

from servesim.config.schema import PlannerConfig, RouterConfig, SlaConfig
from servesim.placement.factory import RouterSpec

if TYPE_CHECKING:
    from servesim.scaling.planner.settings import PlannerSettings


def router_spec(config: RouterConfig) -> RouterSpec:
    """The routing policy and its knobs."""
    return RouterSpec(
        policy=config.policy, seed=config.seed, session_affinity=config.session_affinity,
        overlap_credit=config.overlap_score_credit, prefill_scale=config.prefill_load_scale,
        temperature=config.temperature, credit_decay=config.overlap_score_credit_decay,
        request_weight=config.decode_active_request_weight,
        host_weight=config.host_cache_hit_weight, disk_weight=config.disk_cache_hit_weight,
        timed_prefill=config.prefill_load_model.type == "ais")


def planner_settings(config: PlannerConfig, sla: SlaConfig | None, disaggregated: bool) -> PlannerSettings | None:
    """Resolve a `planner:` section the way the reference stack's adapter does (None when the
    planner is disabled)."""
    if config.policy != "enabled":
        return None
    from servesim.scaling.planner.settings import DEFAULT_ITL_MS, DEFAULT_TTFT_MS, ForecastSettings, PlannerSettings

    throughput_on, load_on = config.scaling_modes
    ttft, itl = DEFAULT_TTFT_MS, DEFAULT_ITL_MS
    if config.target == "sla" and sla is not None:
        ttft = sla.per_request("ttft_ms") or ttft  # run-level (percentile) targets do not steer it
        itl = sla.per_request("itl_ms") or itl
    forecast = ForecastSettings(
        kind=config.load_predictor, log1p=config.load_predictor_log1p, window=config.prophet_window_size,
        moving_average_window=config.moving_average_window, q_level=config.kalman_q_level,
        q_trend=config.kalman_q_trend, r=config.kalman_r, kalman_min_points=config.kalman_min_points)
    floor = config.min_workers
    return PlannerSettings(
        disaggregated=disaggregated, target=config.target,
        throughput_scaling=throughput_on, load_scaling=load_on,
        throughput_interval_s=config.throughput_adjustment_interval_seconds or 180,
        load_interval_s=config.load_adjustment_interval_seconds or 5,
        ttft_ms=float(ttft), itl_ms=float(itl), sensitivity=config.load_scaling_down_sensitivity / 100.0,
        min_prefill=floor if config.prefill_min_workers is None or not disaggregated else config.prefill_min_workers,
        min_decode=floor if config.decode_min_workers is None or not disaggregated else config.decode_min_workers,
        max_gpus=config.max_num_gpus, min_gpus=config.min_num_gpus,
        max_step=config.max_throughput_scaling_replicas, fpm_window=config.max_num_fpm_samples,
        forecast=forecast)
