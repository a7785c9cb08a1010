"""Load scaling: one step up or down per pool from the latest forward-pass metrics.

Targets ``throughput``, ``latency`` and ``load`` compare queue / KV-utilisation values with
fixed thresholds (`easy_thresholds`); ``sla`` predicts the next request's TTFT and the next
pass's ITL with the pool's timing model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from servesim.scaling.contract import PoolSnapshot
from servesim.scaling.planner.capacity import clamp_hit_rate, engine_of
from servesim.scaling.planner.observed import FpmMap, Observations, per_worker, top
from servesim.scaling.planner.settings import PlannerSettings

@dataclass(frozen=True, slots=True)
class Thresholds:
    """Scale up when any engine's value is above `up`, down when all are below `down`."""

    up: float
    down: float
    up_inclusive: bool
    down_inclusive: bool

    def above(self, value: float) -> bool:
        """At/over the scale-up threshold."""
        return value >= self.up if self.up_inclusive else value > self.up

    def below(self, value: float) -> bool:
        """At/under the scale-down threshold."""
        return value <= self.down if self.down_inclusive else value < self.down


_EASY = {
    # prefill values: queued prefill tokens / context length (load: queued tokens themselves)
    ("throughput", "prefill"): Thresholds(1.0, 0.1, True, False),
    ("latency", "prefill"): Thresholds(0.1, 0.0, True, True),
    ("load", "prefill"): Thresholds(1.0, 0.0, True, True),
    # decode / aggregated values: KV utilisation
    ("throughput", "decode"): Thresholds(1.0, 0.6, False, False),
    ("latency", "decode"): Thresholds(0.4, 0.1, False, False),
    ("load", "decode"): Thresholds(0.9, 0.7, True, True),
}


def easy_thresholds(target: str, role: str) -> Thresholds:
    """The fixed thresholds of an easy target for "prefill" or "decode" (also aggregated)."""
    return _EASY[(target, "prefill" if role == "prefill" else "decode")]


def easy_step(values: list[float], workers: int, thresholds: Thresholds, min_workers: int) -> tuple[int | None, str]:
    """One easy-mode step: +1 if any value is high, −1 if all are low (and more than one
    worker), unless consolidating onto one worker fewer would itself reach the up threshold."""
    if any(thresholds.above(v) for v in values):
        return workers + 1, "scale_up"
    if workers > 1 and all(thresholds.below(v) for v in values):
        desired = max(workers - 1, min_workers)
        if desired >= workers or (desired > 0 and max(values) * workers / desired >= thresholds.up):
            return workers, "no_change"
        return desired, "scale_down"
    return None, "no_change"



@dataclass(slots=True)
class Step:
    """One pool's load-scaling step: a desired count (None: no opinion) and why."""

    desired: int | None
    reason: str
    refused: bool = False
    """A scale-down was refused for consolidation safety (SLA target)."""

    def target(self, current: int) -> int:
        """The desired count, or `current` without an opinion."""
        return current if self.desired is None else self.desired


REASON_RANK = {"scale_up": 4, "scale_down_capped_by_throughput": 3, "scale_down": 2, "no_change": 1}


# --------------------------------------------------------------------------------------------
# The policy
# --------------------------------------------------------------------------------------------


class LoadSteps:
    """The per-pool load steps of each target, from the planner's observations."""

    def __init__(self, settings: PlannerSettings, seen: Observations) -> None:
        self.settings = settings
        self.seen = seen

    # -- easy targets -------------------------------------------------------------------------

    def easy_agg(self, pool: PoolSnapshot, fpms: FpmMap, workers: int, diag: dict[str, Any]) -> Step:
        """Aggregated utilisation = (scheduled KV + queued KV + queued prefill tokens) / max KV."""
        max_kv = engine_of(pool).worker_kv_tokens
        if max_kv <= 0 or workers == 0:
            return Step(None, "insufficient_data")
        utils = [(f.sum_decode_kv_tokens + f.sum_queued_decode_kv_tokens + f.sum_queued_prefill_tokens) / max_kv
                 for _, f in sorted(fpms.items())]
        diag["kv_utilization"] = [round(u, 4) for u in utils]
        desired, reason = easy_step(utils, workers, easy_thresholds(self.settings.target, "decode"), self.settings.min_decode)
        return Step(desired, reason)

    def easy_decode(self, pool: PoolSnapshot, fpms: FpmMap, workers: int, diag: dict[str, Any]) -> Step:
        """Decode pool utilisation = (scheduled KV + queued KV) / max KV."""
        max_kv = engine_of(pool).worker_kv_tokens
        if max_kv <= 0 or workers == 0:
            return Step(None, "insufficient_data")
        utils = [(f.sum_decode_kv_tokens + f.sum_queued_decode_kv_tokens) / max_kv for _, f in sorted(fpms.items())]
        diag["kv_utilization_decode"] = [round(u, 4) for u in utils]
        desired, reason = easy_step(utils, workers, easy_thresholds(self.settings.target, "decode"), self.settings.min_decode)
        return Step(desired, reason)

    def easy_prefill(self, pool: PoolSnapshot, fpms: FpmMap, workers: int, diag: dict[str, Any]) -> Step:
        """Prefill pool: queued prefill tokens (load) or their ratio to the context length."""
        if workers == 0:
            return Step(None, "insufficient_data")
        queued = [float(f.sum_queued_prefill_tokens) for _, f in sorted(fpms.items())]
        if self.settings.target != "load":
            if not pool.context_length:
                return Step(None, "insufficient_data")
            queued = [q / pool.context_length for q in queued]
        diag["prefill_queue"] = queued
        desired, reason = easy_step(queued, workers, easy_thresholds(self.settings.target, "prefill"), self.settings.min_prefill)
        return Step(desired, reason)

    # -- sla target ---------------------------------------------------------------------------

    def sla_prefill(self, pool: PoolSnapshot, fpms: FpmMap, workers: int, diag: dict[str, Any]) -> Step:
        """Prefill pool: predicted TTFT of the next request on each worker (queue + own prompt)."""
        engine, discount = engine_of(pool), 1 - clamp_hit_rate(self.seen.hit_rate)
        isl, scale = self.seen.request_isl("prefill"), consolidation(workers)
        estimates, can_down, refused = [], workers > 1, False
        for group in per_worker(fpms):
            queued = top(group, lambda f: f.sum_queued_prefill_tokens)
            estimates.append(engine.prefill_ms((queued + isl) * discount))
            if can_down:
                own = engine.prefill_ms(isl * discount)
                room = (self.settings.ttft_ms - own) * self.settings.sensitivity
                after = engine.prefill_ms((queued * scale + isl) * discount) - own
                if room <= 0 or after >= room:
                    can_down, refused = False, True
        diag["estimated_ttft_ms"] = max(estimates, default=None)
        return sla_step(estimates, self.settings.ttft_ms, workers, self.settings.min_prefill, can_down, refused,
                         keep_on_refusal=False)

    def sla_decode(self, pool: PoolSnapshot, fpms: FpmMap, workers: int, diag: dict[str, Any]) -> Step:
        """Decode pool: predicted ITL of the next pass on each worker, queued decodes included."""
        engine, scale = engine_of(pool), consolidation(workers)
        extra = self.seen.stats["decode"].decode_len.value
        estimates, can_down, refused = [], workers > 1, False
        for group in per_worker(fpms):
            kv = top(group, lambda f: f.sum_decode_kv_tokens + f.sum_queued_decode_kv_tokens)
            batch = int(top(group, lambda f: f.num_decode_requests + f.num_queued_decode)) + 1
            estimates.append(engine.decode_ms(batch, kv + extra))
            if can_down:
                after = kv * scale
                if after >= engine.worker_kv_tokens or \
                        engine.decode_ms(math.ceil(batch * scale), after + extra) >= self.settings.itl_ms * self.settings.sensitivity:
                    can_down, refused = False, True
        diag["estimated_itl_ms"] = max(estimates, default=None)
        return sla_step(estimates, self.settings.itl_ms, workers, self.settings.min_decode, can_down, refused, keep_on_refusal=False)

    def sla_agg(self, pool: PoolSnapshot, fpms: FpmMap, workers: int, diag: dict[str, Any]) -> Step:
        """Aggregated pool: the prefill (TTFT) and decode (ITL) views combined as Dynamo does."""
        p = self._sla_agg_prefill(pool, fpms, workers, diag)
        d = self._sla_agg_decode(pool, fpms, workers, diag)
        refused = p.refused or d.refused
        if p.desired is not None and p.desired > workers:
            return Step(p.desired, "scale_up", refused)
        if d.desired is not None and d.desired > workers:
            return Step(d.desired, "scale_up", refused)
        if p.desired is None and d.desired is not None and d.desired < workers:
            return Step(d.desired, "scale_down", refused)
        if p.desired is not None and d.desired is not None and p.desired < workers and d.desired < workers:
            return Step(max(p.desired, d.desired), "scale_down", refused)
        return Step(None, "no_change", refused)

    def _sla_agg_prefill(self, pool: PoolSnapshot, fpms: FpmMap, workers: int, diag: dict[str, Any]) -> Step:
        """TTFT on an aggregated worker: the prompt work ahead, with the decodes riding along."""
        engine, discount = engine_of(pool), 1 - clamp_hit_rate(self.seen.hit_rate)
        isl, scale = self.seen.request_isl("decode"), consolidation(workers)
        estimates, can_down, refused = [], workers > 1, False
        for group in per_worker(fpms):
            queued = top(group, lambda f: f.sum_queued_prefill_tokens)
            batch = int(top(group, lambda f: f.num_decode_requests))
            kv = top(group, lambda f: f.sum_decode_kv_tokens)
            estimates.append(engine.mixed_ttft_ms((queued + isl) * discount, batch, kv))
            if can_down:
                kv_after = top(group, lambda f: f.sum_decode_kv_tokens + f.sum_queued_decode_kv_tokens) * scale
                batch_after = math.ceil(batch * scale)
                own = engine.mixed_ttft_ms(isl * discount, batch_after, kv_after)
                room = (self.settings.ttft_ms - own) * self.settings.sensitivity
                after = engine.mixed_ttft_ms((queued * scale + isl) * discount, batch_after, kv_after) - own
                if room <= 0 or after >= room:
                    can_down, refused = False, True
        diag["estimated_ttft_ms"] = max(estimates, default=None)
        return sla_step(estimates, self.settings.ttft_ms, workers, self.settings.min_decode, can_down, refused, keep_on_refusal=True)

    def _sla_agg_decode(self, pool: PoolSnapshot, fpms: FpmMap, workers: int, diag: dict[str, Any]) -> Step:
        """ITL on an aggregated worker: one decode pass plus the average prompt work per pass."""
        engine, scale = engine_of(pool), consolidation(workers)
        stats = self.seen.stats["decode"]
        ride = stats.prefill_ms.value
        estimates, can_down, refused = [], workers > 1, False
        for group in per_worker(fpms):
            kv = top(group, lambda f: f.sum_decode_kv_tokens + f.sum_queued_decode_kv_tokens)
            batch = int(top(group, lambda f: f.num_decode_requests + f.num_queued_decode)) + 1
            estimates.append(ride + engine.decode_ms(batch, kv + stats.decode_len.value))
            if can_down:
                combined = top(group, lambda f: f.sum_decode_kv_tokens + f.sum_queued_decode_kv_tokens
                                + f.sum_queued_prefill_tokens) * scale
                itl_after = ride + engine.decode_ms(math.ceil(batch * scale), combined + stats.decode_len.value)
                if combined >= engine.worker_kv_tokens or itl_after >= self.settings.itl_ms * self.settings.sensitivity:
                    can_down, refused = False, True
        diag["estimated_itl_ms"] = max(estimates, default=None)
        return sla_step(estimates, self.settings.itl_ms, workers, self.settings.min_decode, can_down, refused, keep_on_refusal=True)


def consolidation(workers: int) -> float:
    """N / (N − 1): how much one survivor's load grows when a worker goes away."""
    return workers / (workers - 1) if workers > 1 else 1.0


def sla_step(estimates: list[float], sla: float, workers: int, min_workers: int, can_down: bool,
              refused: bool, keep_on_refusal: bool) -> Step:
    """+1 if every worker's prediction exceeds the SLA; −1 when scaling down is safe."""
    if not estimates:
        return Step(None, "insufficient_data")
    if all(t > sla for t in estimates):
        return Step(workers + 1, "scale_up")
    if can_down:
        return Step(max(workers - 1, min_workers), "scale_down")
    if refused:
        return Step(workers if keep_on_refusal else None, "scale_down_refused_consolidation", True)
    return Step(None, "no_change")


def classify(final: int, current: int, original: int, refused: bool) -> str:
    """The load decision's reason from where it ended relative to the current count."""
    capped = final > original and original < current
    if final > current:
        return "scale_up"
    if final < current:
        return "scale_down_capped_by_throughput" if capped else "scale_down"
    if capped:
        return "scale_down_capped_by_throughput"
    return "scale_down_refused_consolidation" if refused else "no_change"

