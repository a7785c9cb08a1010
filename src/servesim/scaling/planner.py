"""Dynamo's planner (autoscaler) as a servesim scaling policy (spec/router-planner.md §3).

A periodic controller: every base tick (the gcd of the enabled decision intervals, first tick
one interval after the start) it runs whichever decisions are due —

* **throughput scaling** (every ``throughput_adjustment_interval_seconds``, target ``sla``
  only): forecasts the next interval's request count and shape from the traffic windows,
  sizes one engine with the pool's timing model and asks for ``ceil(demand / engine rps)``
  workers (at most ``max_throughput_scaling_replicas`` away from now). With load scaling also
  on, that number is only a floor for it;
* **load scaling** (every ``load_adjustment_interval_seconds``): one step up or down from the
  latest forward-pass metrics (FPM) of every active (worker, rank). Targets ``throughput``,
  ``latency`` and ``load`` compare queue / KV-utilisation values with fixed thresholds;
  ``sla`` predicts the next request's TTFT and the next pass's ITL with the timing model.

Then the minimum worker counts and the GPU budget are applied. The answer is the desired
non-draining worker count per pool; ``reason`` and ``diagnostics`` say why.

Where servesim follows the Dynamo reference stack's replay adapter rather than the live planner:
worker counts are ``ready = active`` and ``expected = active + starting`` with no pending
count, so any tick with a worker still starting is ``scaling_in_progress`` (no decision at
all, hence no scale-up either); the latest FPM of a rank is kept across ticks until its worker
stops being active; SLA values come from ``evaluation.sla`` only for target ``sla`` (otherwise
Dynamo's defaults, 500 ms / 50 ms).

Simplifications (documented, deliberate):

* Latency predictions use the pool's own timing model (the one the engines run) instead of
  Dynamo's regression on FPM samples, so the SLA target needs no warm-up
  (``load_min_observations`` and ``fpm_sample_bucket_size`` are accepted and unused). A chunk of
  ``c`` uncached prompt tokens is timed as ``prefill(1, c, 0)``; an aggregated pass adds
  ``decode(batch, kv, …)`` for the decodes riding along.
* The average ISL behind the SLA TTFT estimate is the last traffic window's mean prompt length
  (the FPM mean before any window completed a request); the mean decode length and the prefill
  time riding on an aggregated pass are moving averages over ``max_num_fpm_samples`` FPMs (the
  mean of each sampled pass's prefill time, not the time of the mean token count, so the fixed
  per-pass cost is not charged to passes without prompt work).
* The GPU budget is Dynamo's direction-preserving guard; where Dynamo searches for the best
  feasible opposing prefill/decode rebalance at a full budget, servesim accepts the proposed
  pair if it fits and holds otherwise.
* Throughput capacity is per worker (rank capacity × attention-DP ranks); when no candidate
  batch meets the SLA the least-violating one is used. Speculative decoding is not modelled
  (accept length 1).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from servesim.engine.metrics import ForwardPassMetrics
from servesim.scaling.contract import Decision, PoolSnapshot, ScalingPolicy, Snapshot, TrafficWindow
from servesim.scaling.forecast import Forecaster, make_forecaster

if TYPE_CHECKING:
    from servesim.config.schema import PlannerConfig, SlaConfig

__all__ = [
    "Capacity",
    "DynamoPlanner",
    "PlannerSettings",
    "Thresholds",
    "agg_capacity",
    "decode_capacity",
    "easy_thresholds",
    "guard_pair",
    "guard_single",
    "make_planner",
    "prefill_capacity",
    "settings_from_config",
]

DEFAULT_TTFT_MS = 500.0
DEFAULT_ITL_MS = 50.0
MAX_HIT_RATE = 0.95
"""Dynamo caps the prefix-hit discount so some work is always ahead."""
MAX_BATCH_CANDIDATES = 128
_EPS_MS = 1e-6

FpmMap = dict[tuple[int, int], ForwardPassMetrics]
"""(worker id, DP rank) → latest forward-pass metrics."""


# --------------------------------------------------------------------------------------------
# Settings
# --------------------------------------------------------------------------------------------


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
    forecaster: Callable[[], Forecaster] = field(default=lambda: make_forecaster("arima"))

    @property
    def tick_s(self) -> int:
        """The base tick: gcd of the load interval and, when it runs, the throughput interval."""
        if not self.throughput_scaling:
            return self.load_interval_s
        return math.gcd(self.load_interval_s, self.throughput_interval_s)

    def min_workers(self, pool: str) -> int:
        """The minimum worker count of a pool ("decode" is also the aggregated pool)."""
        return self.min_prefill if pool == "prefill" else self.min_decode


def settings_from_config(config: PlannerConfig, sla: SlaConfig | None, disaggregated: bool) -> PlannerSettings:
    """Resolve a `planner:` section the way the reference stack's adapter does."""
    throughput_on, load_on = config.scaling_modes
    ttft, itl = DEFAULT_TTFT_MS, DEFAULT_ITL_MS
    if config.target == "sla" and sla is not None:
        ttft = sla.ttft_ms if sla.ttft_ms is not None else ttft
        itl = sla.itl_ms if sla.itl_ms is not None else itl

    def forecaster() -> Forecaster:
        return make_forecaster(config.load_predictor, log1p=config.load_predictor_log1p,
                               window=config.prophet_window_size,
                               moving_average_window=config.moving_average_window,
                               q_level=config.kalman_q_level, q_trend=config.kalman_q_trend,
                               r=config.kalman_r, kalman_min_points=config.kalman_min_points)

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
        forecaster=forecaster)


def make_planner(config: PlannerConfig, sla: SlaConfig | None, disaggregated: bool) -> ScalingPolicy | None:
    """The planner policy for a `planner:` section, or None when its policy is disabled."""
    if config.policy != "enabled":
        return None
    return DynamoPlanner(settings_from_config(config, sla, disaggregated))


# --------------------------------------------------------------------------------------------
# Easy-mode thresholds (targets throughput, latency, load)
# --------------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------------
# GPU budget
# --------------------------------------------------------------------------------------------


def _in_band(total: int, min_gpus: int, max_gpus: int, tolerance: int) -> bool:
    """Total within [min − tolerance, max] (a negative bound is off)."""
    if max_gpus >= 0 and total > max_gpus:
        return False
    return not (min_gpus >= 0 and total < min_gpus - tolerance)


def clamp_single(desired: int, gpus: int, min_gpus: int, max_gpus: int, min_workers: int) -> int:
    """One pool's replica count brought into the GPU band (0 if even the minimum does not fit)."""
    if (min_gpus < 0 and max_gpus < 0) or gpus <= 0:
        return desired
    tolerance = gpus if min_gpus >= 0 and max_gpus >= 0 else 0
    if _in_band(desired * gpus, min_gpus, max_gpus, tolerance):
        return desired
    if max_gpus >= 0 and desired * gpus > max_gpus:
        return 0 if max_gpus < min_workers * gpus else max(min_workers, max_gpus // gpus)
    return max(min_workers, -(-min_gpus // gpus))


def guard_single(current: int, proposed: int, gpus: int, min_gpus: int, max_gpus: int,
                 min_workers: int) -> tuple[int, str | None]:
    """Apply the GPU band to one pool's proposal without reversing its direction.

    Returns the count and a reason when the budget intervened: ``gpu_budget_reconcile`` (the
    current count is out of band: bring it back), ``gpu_budget_guard_hold`` (at the ceiling and
    asked to grow, at the floor and asked to shrink, or the clamp would reverse the move).
    """
    if gpus <= 0:
        return proposed, None
    tolerance = gpus if min_gpus >= 0 and max_gpus >= 0 else 0
    total = current * gpus
    if not _in_band(total, min_gpus, max_gpus, tolerance):
        return clamp_single(current, gpus, min_gpus, max_gpus, min_workers), "gpu_budget_reconcile"
    if (min_gpus >= 0 and total <= min_gpus and proposed < current) or (
            max_gpus >= 0 and total >= max_gpus and proposed > current):
        return current, "gpu_budget_guard_hold"
    final = clamp_single(proposed, gpus, min_gpus, max_gpus, min_workers)
    if not min(current, proposed) <= final <= max(current, proposed):
        return current, "gpu_budget_guard_hold"
    return final, None


def clamp_pair(p: int, d: int, p_gpus: int, d_gpus: int, min_gpus: int, max_gpus: int,
               p_min: int, d_min: int) -> tuple[int, int]:
    """(prefill, decode) brought into the GPU band proportionally; the minimums always win."""
    if (min_gpus < 0 and max_gpus < 0) or p_gpus <= 0 or d_gpus <= 0:
        return p, d
    total = p * p_gpus + d * d_gpus
    tolerance = max(p_gpus, d_gpus) if min_gpus >= 0 and max_gpus >= 0 else 0
    if _in_band(total, min_gpus, max_gpus, tolerance):
        return p, d
    if max_gpus >= 0 and total > max_gpus:
        if max_gpus < p_min * p_gpus + d_min * d_gpus:
            return 0, 0
        most_p = (max_gpus - d_min * d_gpus) // p_gpus
        new_p = max(p_min, min(most_p, math.floor(p * max_gpus / total)))
        return new_p, max(d_min, (max_gpus - new_p * p_gpus) // d_gpus)
    new_p = max(p_min, math.ceil(p * min_gpus / total) if total > 0 else math.ceil(min_gpus / 2 / p_gpus))
    new_d = max(d, d_min, math.ceil(max(0, min_gpus - new_p * p_gpus) / d_gpus))
    if max_gpus >= 0 and new_p * p_gpus + new_d * d_gpus > max_gpus:
        return p, d
    return new_p, new_d


def guard_pair(current: tuple[int, int], proposed: tuple[int, int], gpus: tuple[int, int],
               min_gpus: int, max_gpus: int, minimums: tuple[int, int]) -> tuple[int, int, str | None]:
    """Apply the GPU band to a disaggregated (prefill, decode) proposal without reversing either
    move; reasons as in `guard_single`."""
    (cp, cd), (pp, pd), (pg, dg), (pmin, dmin) = current, proposed, gpus, minimums
    if pg <= 0 or dg <= 0:
        return pp, pd, None
    if cp < pmin or cd < dmin:
        return (*clamp_pair(max(pp, pmin), max(pd, dmin), pg, dg, min_gpus, max_gpus, pmin, dmin),
                "gpu_budget_reconcile")
    tolerance = max(pg, dg) if max_gpus >= 0 else 0
    total = cp * pg + cd * dg
    if not _in_band(total, min_gpus, max_gpus, tolerance):
        return (*clamp_pair(cp, cd, pg, dg, min_gpus, max_gpus, pmin, dmin), "gpu_budget_reconcile")
    ups, downs = (pp > cp, pd > cd), (pp < cp, pd < cd)
    opposing = (ups[0] and downs[1]) or (downs[0] and ups[1])
    at_floor = min_gpus >= 0 and total <= min_gpus
    at_ceiling = max_gpus >= 0 and total >= max_gpus
    if (at_floor and any(downs) and not any(ups)) or (at_ceiling and any(ups) and not opposing):
        return cp, cd, "gpu_budget_guard_hold"
    if (at_floor or at_ceiling) and opposing:
        fits = _in_band(pp * pg + pd * dg, min_gpus, max_gpus, tolerance)
        return (pp, pd, None) if fits else (cp, cd, "gpu_budget_guard_hold")
    np_, nd = clamp_pair(pp, pd, pg, dg, min_gpus, max_gpus, pmin, dmin)
    kept = min(cp, pp) <= np_ <= max(cp, pp) and min(cd, pd) <= nd <= max(cd, pd)
    if not kept or not _in_band(np_ * pg + nd * dg, min_gpus, max_gpus, tolerance):
        return cp, cd, "gpu_budget_guard_hold"
    return np_, nd, None


# --------------------------------------------------------------------------------------------
# Latency predictions from a pool's timing model
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Engine:
    """What predictions need about one worker of a pool."""

    timing: Any
    max_batched_tokens: int
    max_sequences: int
    rank_kv_tokens: int
    """KV capacity of one DP rank in tokens (what the timing model's utilisation is relative to)."""
    ranks: int
    """DP ranks per worker."""

    @property
    def worker_kv_tokens(self) -> int:
        """Dynamo's max_kv_tokens: blocks × block size × DP."""
        return self.rank_kv_tokens * self.ranks

    def prefill_ms(self, tokens: float) -> float:
        """Time to compute `tokens` uncached prompt tokens alone, in passes of at most
        max_batched_tokens."""
        return sum(self.timing.prefill(1, chunk, 0) for chunk in self._chunks(tokens))

    def decode_ms(self, batch: int, kv_tokens: float) -> float:
        """One decode phase for `batch` sequences holding `kv_tokens` tokens."""
        batch, kv = max(1, int(batch)), max(0, int(math.ceil(kv_tokens)))
        return self.timing.decode(batch, kv, kv // batch, self.rank_kv_tokens)

    def mixed_ttft_ms(self, tokens: float, batch: int, kv_tokens: float) -> float:
        """Time to compute `tokens` prompt tokens while `batch` decodes ride along each pass."""
        chunks = self._chunks(tokens)
        if not chunks:
            return 0.0
        ride = self.decode_ms(batch, kv_tokens) if batch > 0 else 0.0
        return sum(self.timing.prefill(1, chunk, 0) + ride for chunk in chunks)

    def _chunks(self, tokens: float) -> list[int]:
        """`tokens` (rounded up) cut into max_batched_tokens pieces."""
        left = int(math.ceil(max(0.0, tokens)))
        size = max(1, self.max_batched_tokens)
        return [min(size, left - start) for start in range(0, left, size)]


def engine_of(pool: PoolSnapshot) -> Engine:
    """The prediction view of a pool's workers."""
    blocks = pool.kv_blocks_per_rank or (pool.ranks[0].total_blocks if pool.ranks else 0)
    dp = max(1, pool.ranks_per_worker, len(pool.ranks) // max(1, len(pool.active)))
    return Engine(pool.timing, pool.max_batched_tokens, pool.max_sequences, blocks * pool.block_size, dp)


def _hit(rate: float | None) -> float:
    """A prefix-hit rate clamped to [0, 0.95] (None: 0)."""
    return 0.0 if rate is None or math.isnan(rate) else max(0.0, min(MAX_HIT_RATE, rate))


# --------------------------------------------------------------------------------------------
# Throughput capacity of one engine (§3.5 step 3)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Capacity:
    """The best operating point found for one worker."""

    rps: float
    batch: int
    ttft_ms: float
    itl_ms: float
    eligible: bool


def _batch_sizes(most: int) -> list[int]:
    """1..most, or 128 evenly spread sizes from 1 to most."""
    most = max(1, most)
    if most <= MAX_BATCH_CANDIDATES:
        return list(range(1, most + 1))
    step = (most - 1) / (MAX_BATCH_CANDIDATES - 1)
    return sorted({1 + round(i * step) for i in range(MAX_BATCH_CANDIDATES)})


def _pick(points: list[Capacity], ttft_sla: float, itl_sla: float) -> Capacity | None:
    """The highest-rps SLA-eligible point, else the least-violating one."""
    eligible = [p for p in points if p.eligible]
    if eligible:
        return max(eligible, key=lambda p: (p.rps, -p.batch))
    return min(points, key=lambda p: (max(p.ttft_ms / ttft_sla, p.itl_ms / itl_sla), p.batch), default=None)


def prefill_capacity(engine: Engine, isl: float, hit: float | None, ttft_sla: float) -> Capacity | None:
    """Requests/s one prefill worker sustains: batches of b prompts, rps = b / TTFT(b)."""
    if isl <= 0:
        return None
    effective = max(1, math.ceil(isl * (1 - _hit(hit))))
    budget = max(1, engine.max_batched_tokens)
    most = 1 if effective > budget else min(engine.max_sequences, budget // effective)
    points = []
    for b in _batch_sizes(most):
        ttft = engine.timing.prefill(b, effective, 0) if b * effective <= budget else engine.prefill_ms(effective)
        if ttft > 0:
            points.append(Capacity(b / (ttft / 1000.0) * engine.ranks, b, ttft, 0.0, ttft <= ttft_sla))
    return _pick(points, ttft_sla, math.inf)


def decode_capacity(engine: Engine, isl: float, osl: float, itl_sla: float) -> Capacity | None:
    """Requests/s one decode worker sustains: b sequences of mean context isl + osl/2,
    rps = b / (osl × ITL(b))."""
    if isl <= 0 or osl <= 0:
        return None
    ctx = max(1, math.ceil(isl + osl / 2))
    most = max(1, min(engine.max_sequences, engine.rank_kv_tokens // ctx))
    points = []
    for b in _batch_sizes(most):
        itl = engine.decode_ms(b, b * ctx)
        points.append(Capacity(b / (osl * itl / 1000.0) * engine.ranks, b, 0.0, itl, itl <= itl_sla))
    return _pick(points, math.inf, itl_sla)


def agg_capacity(engine: Engine, isl: float, osl: float, hit: float | None, ttft_sla: float,
                 itl_sla: float) -> Capacity | None:
    """Requests/s one aggregated worker sustains with b decoding sequences whose prompts are
    prefilled alongside (b × isl / osl tokens per pass must fit next to the b decodes)."""
    if isl <= 0 or osl <= 0 or engine.max_batched_tokens <= 1:
        return None
    discount = 1 - _hit(hit)
    effective, ctx = isl * discount, isl + osl / 2
    budget = engine.max_batched_tokens
    most = max(1, min(engine.max_sequences, int(engine.rank_kv_tokens // max(1.0, ctx)), budget - 1))
    points = []
    for b in _batch_sizes(most):
        share = math.ceil(b * effective / osl)
        if b > 1 and share > budget - b:
            break
        pass_ms = engine.prefill_ms(min(share, budget)) + engine.decode_ms(b, b * ctx)
        queued = min(b * isl / osl, budget)
        ttft = engine.mixed_ttft_ms((queued + isl) * discount, b, b * ctx)
        rps = b / (osl * pass_ms / 1000.0)
        if effective > 0:
            rps = min(rps, (budget - b) / (effective * pass_ms / 1000.0))
        points.append(Capacity(rps * engine.ranks, b, ttft, pass_ms, pass_ms <= itl_sla and ttft <= ttft_sla))
    return _pick(points, ttft_sla, itl_sla)


# --------------------------------------------------------------------------------------------
# Observed state
# --------------------------------------------------------------------------------------------


class _Average:
    """Moving average over a window that ignores leading zeros (Dynamo's `_MovingAverage`)."""

    def __init__(self, window: int) -> None:
        self._values: deque[float] = deque(maxlen=max(1, window))
        self._started = False

    def add(self, value: float) -> None:
        """Add a value (a zero before the first non-zero one is dropped)."""
        if value == 0.0 and not self._started:
            return
        self._started = self._started or value != 0.0
        self._values.append(value)

    @property
    def value(self) -> float:
        """The mean (0 when empty)."""
        return sum(self._values) / len(self._values) if self._values else 0.0


class _PoolStats:
    """Request-shape averages of one pool from the FPMs it published."""

    def __init__(self, window: int) -> None:
        self.isl = _Average(window)
        """Prompt tokens per prefill request per pass."""
        self.decode_len = _Average(window)
        """Sequence length per decoding request."""
        self.prefill_ms = _Average(window)
        """Prefill time per pass (0 for a pass without prompt work), from the timing model."""

    def observe(self, fpm: ForwardPassMetrics, timing: Any) -> None:
        """Fold one FPM in."""
        n = fpm.num_prefill_requests
        if n > 0:
            self.isl.add(fpm.sum_prefill_tokens / n)
        if fpm.num_decode_requests > 0:
            self.decode_len.add(fpm.sum_decode_kv_tokens / fpm.num_decode_requests)
        tokens = fpm.sum_prefill_tokens
        self.prefill_ms.add(timing.prefill(n, tokens // n, 0) if n > 0 and tokens >= n else 0.0)


@dataclass(slots=True)
class _Traffic:
    """Traffic windows merged since the throughput decision last consumed them."""

    duration_s: float = 0.0
    num_req: int = 0
    completed: int = 0
    isl_sum: float = 0.0
    osl_sum: float = 0.0

    def add(self, window: TrafficWindow) -> None:
        """Merge a window in (shape means weighted by completions)."""
        self.duration_s += window.duration_s
        self.num_req += window.num_req
        self.completed += window.num_completed
        self.isl_sum += window.avg_isl * window.num_completed
        self.osl_sum += window.avg_osl * window.num_completed

    @property
    def isl(self) -> float:
        return self.isl_sum / self.completed if self.completed else 0.0

    @property
    def osl(self) -> float:
        return self.osl_sum / self.completed if self.completed else 0.0


def fpm_coverage_ok(fpms: FpmMap, ready: int, dp: int = 1) -> bool:
    """Every ready worker published for each of its `dp` ranks (else Dynamo's
    `worker_count_mismatch`)."""
    ranks: dict[int, set[int]] = {}
    for worker, rank in fpms:
        ranks.setdefault(worker, set()).add(rank)
    return len(ranks) == ready and all(len(r) == dp for r in ranks.values())


def _per_worker(fpms: FpmMap) -> list[list[ForwardPassMetrics]]:
    """FPMs grouped by worker, in worker order."""
    groups: dict[int, list[ForwardPassMetrics]] = {}
    for (worker, _rank), fpm in sorted(fpms.items()):
        groups.setdefault(worker, []).append(fpm)
    return list(groups.values())


def _top(group: Iterable[ForwardPassMetrics], key: Callable[[ForwardPassMetrics], float]) -> float:
    """The largest value of `key` over a worker's ranks."""
    return max(key(f) for f in group)


@dataclass(slots=True)
class _Sub:
    """One pool's load sub-decision: a desired count (None: no opinion) and why."""

    desired: int | None
    reason: str
    refused: bool = False
    """A scale-down was refused for consolidation safety (SLA target)."""


_REASON_RANK = {"scale_up": 4, "scale_down_capped_by_throughput": 3, "scale_down": 2, "no_change": 1}


# --------------------------------------------------------------------------------------------
# The policy
# --------------------------------------------------------------------------------------------


class DynamoPlanner:
    """Dynamo's planner behind servesim's `ScalingPolicy` contract (see the module notes)."""

    def __init__(self, settings: PlannerSettings) -> None:
        self.s = settings
        self._fpm: dict[str, FpmMap] = {"prefill": {}, "decode": {}}
        self._stats = {pool: _PoolStats(settings.fpm_window) for pool in ("prefill", "decode")}
        self._traffic = _Traffic()
        self._num_req, self._isl, self._osl = (settings.forecaster() for _ in range(3))
        self._seen_traffic = False
        self._last_shape: tuple[float, float] | None = None
        self._hit: float | None = None
        self._isl_seen = 0.0
        self._bound = {"prefill": settings.min_prefill, "decode": settings.min_decode}
        self._last_run = {"load": 0.0, "throughput": 0.0}

    # -- contract -----------------------------------------------------------------------------

    def initial_tick_ms(self) -> float:
        """One base interval after the start."""
        return self.s.tick_s * 1000.0

    def on_tick(self, snapshot: Snapshot) -> Decision:
        """Observe, run the decisions that are due, and answer with targets and the next tick."""
        self._observe(snapshot)
        diag: dict[str, Any] = {}
        targets: dict[str, int] | None = None
        reasons: list[str] = []
        if self._due("throughput", snapshot.now_ms):
            targets, reason = self._throughput_tick(snapshot, diag)
            diag["throughput_decision_reason"] = reason
            reasons.append(reason)
        if self._due("load", snapshot.now_ms):
            load_targets, reason = self._load_tick(snapshot, diag)
            diag["load_decision_reason"] = reason
            reasons.insert(0, reason)
            targets = load_targets if load_targets is not None else targets
        diag["throughput_lower_bound"] = dict(self._bound) if self.s.throughput_scaling else None
        return self._decision(snapshot, targets, reasons[0] if reasons else "not_due", diag)

    # -- bookkeeping --------------------------------------------------------------------------

    def _due(self, kind: str, now_ms: float) -> bool:
        """Whether the decision `kind` runs at `now_ms` (and mark it run)."""
        enabled = self.s.load_scaling if kind == "load" else self.s.throughput_scaling
        interval = (self.s.load_interval_s if kind == "load" else self.s.throughput_interval_s) * 1000.0
        if not enabled or now_ms - self._last_run[kind] < interval - _EPS_MS:
            return False
        self._last_run[kind] = now_ms
        return True

    def _observe(self, snapshot: Snapshot) -> None:
        """Cache the latest FPM per active (worker, rank), fold fresh FPMs into the shape
        averages, and merge the traffic window."""
        for name, pool in snapshot.pools.items():
            cache = self._fpm.setdefault(name, {})
            for rank in pool.ranks:
                if rank.metrics is not None:
                    cache[(rank.worker_id, rank.dp_rank)] = rank.metrics
                    self._stats[name].observe(rank.metrics, pool.timing)
            active = set(pool.active)
            for key in [k for k in cache if k[0] not in active]:
                del cache[key]
        window = snapshot.traffic
        self._traffic.add(window)
        if window.num_completed > 0 and window.avg_isl > 0:
            self._isl_seen = window.avg_isl
        if window.num_kv_hit_samples > 0 or window.num_req > 0:
            self._hit = window.avg_kv_hit_rate

    def _decision(self, snapshot: Snapshot, targets: dict[str, int] | None, reason: str,
                  diag: dict[str, Any]) -> Decision:
        """The contract's answer: only targets that change the non-draining count."""
        changed = {}
        for name, target in (targets or {}).items():
            pool = snapshot.pools.get(name)
            if pool is not None and target != pool.non_draining:
                changed[name] = max(0, target)
        if changed and reason == "scale":
            reason = self._direction(snapshot, changed)
        return Decision(target_decode=changed.get("decode"), target_prefill=changed.get("prefill"),
                        next_tick_ms=snapshot.now_ms + self.s.tick_s * 1000.0, reason=reason, diagnostics=diag)

    @staticmethod
    def _direction(snapshot: Snapshot, changed: dict[str, int]) -> str:
        """scale_up / scale_down for a throughput decision (scale_up if any pool grows)."""
        up = any(t > snapshot.pools[name].non_draining for name, t in changed.items())
        return "scale_up" if up else "scale_down"

    # -- load scaling -------------------------------------------------------------------------

    def _load_tick(self, snapshot: Snapshot, diag: dict[str, Any]) -> tuple[dict[str, int] | None, str]:
        """The load decision (gating, then the per-pool step, then bounds)."""
        if self.s.disaggregated:
            return self._load_disagg(snapshot, diag)
        return self._load_agg(snapshot, diag)

    def _gate(self, snapshot: Snapshot, names: tuple[str, ...]) -> str | None:
        """Why no load decision can be made now (None: go ahead)."""
        pools = [snapshot.pools[n] for n in names if n in snapshot.pools]
        if not any(self._fpm.get(n) for n in names):
            return "no_fpm_data"
        if any(pool.starting for pool in pools):
            return "scaling_in_progress"
        for name in names:
            fpms = self._fpm.get(name)
            pool = snapshot.pools[name]
            if fpms and not fpm_coverage_ok(fpms, len(pool.active), engine_of(pool).ranks):
                return "worker_count_mismatch"
        return None

    def _load_agg(self, snapshot: Snapshot, diag: dict[str, Any]) -> tuple[dict[str, int] | None, str]:
        """Aggregated pool: one step from the combined KV utilisation (easy targets) or the
        TTFT and ITL predictions (sla)."""
        blocked = self._gate(snapshot, ("decode",))
        if blocked:
            return None, blocked
        pool, fpms = snapshot.pools["decode"], self._fpm["decode"]
        workers = len(pool.active)
        if self.s.target != "sla":
            sub = self._easy_agg(pool, fpms, workers, diag)
            if sub.desired is None:
                return None, sub.reason
        else:
            sub = self._sla_agg(pool, fpms, workers, diag)
        final, reason = self._bounded_single("decode", pool, sub, workers)
        return {"decode": final}, reason

    def _bounded_single(self, name: str, pool: PoolSnapshot, sub: _Sub, workers: int) -> tuple[int, str]:
        """Apply the minimum, the throughput floor and the GPU budget to one pool's step."""
        original = workers if sub.desired is None else sub.desired
        desired = max(original, self.s.min_workers(name))
        if self.s.throughput_scaling:
            desired = max(desired, self._bound[name])
        final, budget = guard_single(workers, desired, pool.gpus_per_worker, self.s.min_gpus, self.s.max_gpus,
                                     self.s.min_workers(name))
        return final, budget or _classify(final, workers, original, sub.refused)

    def _load_disagg(self, snapshot: Snapshot, diag: dict[str, Any]) -> tuple[dict[str, int] | None, str]:
        """Prefill and decode decided separately, then bounded together."""
        blocked = self._gate(snapshot, ("prefill", "decode"))
        if blocked:
            return None, blocked
        subs = {name: self._disagg_step(name, snapshot.pools[name], diag) for name in ("prefill", "decode")}
        current = tuple(len(snapshot.pools[n].active) for n in ("prefill", "decode"))
        original = tuple(c if subs[n].desired is None else subs[n].desired
                         for n, c in zip(("prefill", "decode"), current))
        desired = [max(o, self.s.min_workers(n)) for n, o in zip(("prefill", "decode"), original)]
        if self.s.throughput_scaling:
            desired = [max(d, self._bound[n]) for n, d in zip(("prefill", "decode"), desired)]
        gpus = (snapshot.pools["prefill"].gpus_per_worker, snapshot.pools["decode"].gpus_per_worker)
        fp, fd, budget = guard_pair(current, (desired[0], desired[1]), gpus, self.s.min_gpus, self.s.max_gpus,
                                    (self.s.min_prefill, self.s.min_decode))
        per_pool = {n: _classify(f, c, o, subs[n].refused)
                    for n, f, c, o in zip(("prefill", "decode"), (fp, fd), current, original)}
        diag["load_decision_reason_prefill"] = per_pool["prefill"]
        diag["load_decision_reason_decode"] = per_pool["decode"]
        reason = budget or max(per_pool.values(), key=lambda r: _REASON_RANK.get(r, 0))
        if (fp, fd) == current and budget is None:
            quiet = ("no_change", "scale_up", "scale_down", "no_fpm_data")
            reason = next((s.reason for s in subs.values() if s.reason not in quiet), reason)
            return None, reason
        return {"prefill": fp, "decode": fd}, reason

    def _disagg_step(self, name: str, pool: PoolSnapshot, diag: dict[str, Any]) -> _Sub:
        """One disaggregated pool's raw step (no FPMs: no opinion)."""
        fpms = self._fpm.get(name)
        if not fpms:
            return _Sub(None, "no_fpm_data")
        workers = len(pool.active)
        if self.s.target == "sla":
            return self._sla_prefill(pool, fpms, workers, diag) if name == "prefill" else \
                self._sla_decode(pool, fpms, workers, diag)
        return self._easy_prefill(pool, fpms, workers, diag) if name == "prefill" else \
            self._easy_decode(pool, fpms, workers, diag)

    # -- easy targets -------------------------------------------------------------------------

    def _easy_agg(self, pool: PoolSnapshot, fpms: FpmMap, workers: int, diag: dict[str, Any]) -> _Sub:
        """Aggregated utilisation = (scheduled KV + queued KV + queued prefill tokens) / max KV."""
        max_kv = engine_of(pool).worker_kv_tokens
        if max_kv <= 0 or workers == 0:
            return _Sub(None, "insufficient_data")
        utils = [(f.sum_decode_kv_tokens + f.sum_queued_decode_kv_tokens + f.sum_queued_prefill_tokens) / max_kv
                 for _, f in sorted(fpms.items())]
        diag["kv_utilization"] = [round(u, 4) for u in utils]
        desired, reason = easy_step(utils, workers, easy_thresholds(self.s.target, "decode"), self.s.min_decode)
        return _Sub(desired, reason)

    def _easy_decode(self, pool: PoolSnapshot, fpms: FpmMap, workers: int, diag: dict[str, Any]) -> _Sub:
        """Decode pool utilisation = (scheduled KV + queued KV) / max KV."""
        max_kv = engine_of(pool).worker_kv_tokens
        if max_kv <= 0 or workers == 0:
            return _Sub(None, "insufficient_data")
        utils = [(f.sum_decode_kv_tokens + f.sum_queued_decode_kv_tokens) / max_kv for _, f in sorted(fpms.items())]
        diag["kv_utilization_decode"] = [round(u, 4) for u in utils]
        desired, reason = easy_step(utils, workers, easy_thresholds(self.s.target, "decode"), self.s.min_decode)
        return _Sub(desired, reason)

    def _easy_prefill(self, pool: PoolSnapshot, fpms: FpmMap, workers: int, diag: dict[str, Any]) -> _Sub:
        """Prefill pool: queued prefill tokens (load) or their ratio to the context length."""
        if workers == 0:
            return _Sub(None, "insufficient_data")
        queued = [float(f.sum_queued_prefill_tokens) for _, f in sorted(fpms.items())]
        if self.s.target != "load":
            if not pool.context_length:
                return _Sub(None, "insufficient_data")
            queued = [q / pool.context_length for q in queued]
        diag["prefill_queue"] = queued
        desired, reason = easy_step(queued, workers, easy_thresholds(self.s.target, "prefill"), self.s.min_prefill)
        return _Sub(desired, reason)

    # -- sla target ---------------------------------------------------------------------------

    def _request_isl(self, name: str) -> float:
        """Mean prompt length of the next request: the traffic's, else the FPMs'."""
        return self._isl_seen or self._stats[name].isl.value

    def _sla_prefill(self, pool: PoolSnapshot, fpms: FpmMap, workers: int, diag: dict[str, Any]) -> _Sub:
        """Prefill pool: predicted TTFT of the next request on each worker (queue + own prompt)."""
        engine, discount = engine_of(pool), 1 - _hit(self._hit)
        isl, scale = self._request_isl("prefill"), _consolidation(workers)
        estimates, can_down, refused = [], workers > 1, False
        for group in _per_worker(fpms):
            queued = _top(group, lambda f: f.sum_queued_prefill_tokens)
            estimates.append(engine.prefill_ms((queued + isl) * discount))
            if can_down:
                own = engine.prefill_ms(isl * discount)
                room = (self.s.ttft_ms - own) * self.s.sensitivity
                after = engine.prefill_ms((queued * scale + isl) * discount) - own
                if room <= 0 or after >= room:
                    can_down, refused = False, True
        diag["estimated_ttft_ms"] = max(estimates, default=None)
        return _sla_step(estimates, self.s.ttft_ms, workers, self.s.min_prefill, can_down, refused,
                         keep_on_refusal=False)

    def _sla_decode(self, pool: PoolSnapshot, fpms: FpmMap, workers: int, diag: dict[str, Any]) -> _Sub:
        """Decode pool: predicted ITL of the next pass on each worker, queued decodes included."""
        engine, scale = engine_of(pool), _consolidation(workers)
        extra = self._stats["decode"].decode_len.value
        estimates, can_down, refused = [], workers > 1, False
        for group in _per_worker(fpms):
            kv = _top(group, lambda f: f.sum_decode_kv_tokens + f.sum_queued_decode_kv_tokens)
            batch = int(_top(group, lambda f: f.num_decode_requests + f.num_queued_decode)) + 1
            estimates.append(engine.decode_ms(batch, kv + extra))
            if can_down:
                after = kv * scale
                if after >= engine.worker_kv_tokens or \
                        engine.decode_ms(math.ceil(batch * scale), after + extra) >= self.s.itl_ms * self.s.sensitivity:
                    can_down, refused = False, True
        diag["estimated_itl_ms"] = max(estimates, default=None)
        return _sla_step(estimates, self.s.itl_ms, workers, self.s.min_decode, can_down, refused, keep_on_refusal=False)

    def _sla_agg(self, pool: PoolSnapshot, fpms: FpmMap, workers: int, diag: dict[str, Any]) -> _Sub:
        """Aggregated pool: the prefill (TTFT) and decode (ITL) views combined as Dynamo does."""
        p = self._sla_agg_prefill(pool, fpms, workers, diag)
        d = self._sla_agg_decode(pool, fpms, workers, diag)
        refused = p.refused or d.refused
        if p.desired is not None and p.desired > workers:
            return _Sub(p.desired, "scale_up", refused)
        if d.desired is not None and d.desired > workers:
            return _Sub(d.desired, "scale_up", refused)
        if p.desired is None and d.desired is not None and d.desired < workers:
            return _Sub(d.desired, "scale_down", refused)
        if p.desired is not None and d.desired is not None and p.desired < workers and d.desired < workers:
            return _Sub(max(p.desired, d.desired), "scale_down", refused)
        return _Sub(None, "no_change", refused)

    def _sla_agg_prefill(self, pool: PoolSnapshot, fpms: FpmMap, workers: int, diag: dict[str, Any]) -> _Sub:
        """TTFT on an aggregated worker: the prompt work ahead, with the decodes riding along."""
        engine, discount = engine_of(pool), 1 - _hit(self._hit)
        isl, scale = self._request_isl("decode"), _consolidation(workers)
        estimates, can_down, refused = [], workers > 1, False
        for group in _per_worker(fpms):
            queued = _top(group, lambda f: f.sum_queued_prefill_tokens)
            batch = int(_top(group, lambda f: f.num_decode_requests))
            kv = _top(group, lambda f: f.sum_decode_kv_tokens)
            estimates.append(engine.mixed_ttft_ms((queued + isl) * discount, batch, kv))
            if can_down:
                kv_after = _top(group, lambda f: f.sum_decode_kv_tokens + f.sum_queued_decode_kv_tokens) * scale
                batch_after = math.ceil(batch * scale)
                own = engine.mixed_ttft_ms(isl * discount, batch_after, kv_after)
                room = (self.s.ttft_ms - own) * self.s.sensitivity
                after = engine.mixed_ttft_ms((queued * scale + isl) * discount, batch_after, kv_after) - own
                if room <= 0 or after >= room:
                    can_down, refused = False, True
        diag["estimated_ttft_ms"] = max(estimates, default=None)
        return _sla_step(estimates, self.s.ttft_ms, workers, self.s.min_decode, can_down, refused, keep_on_refusal=True)

    def _sla_agg_decode(self, pool: PoolSnapshot, fpms: FpmMap, workers: int, diag: dict[str, Any]) -> _Sub:
        """ITL on an aggregated worker: one decode pass plus the average prompt work per pass."""
        engine, scale = engine_of(pool), _consolidation(workers)
        stats = self._stats["decode"]
        ride = stats.prefill_ms.value
        estimates, can_down, refused = [], workers > 1, False
        for group in _per_worker(fpms):
            kv = _top(group, lambda f: f.sum_decode_kv_tokens + f.sum_queued_decode_kv_tokens)
            batch = int(_top(group, lambda f: f.num_decode_requests + f.num_queued_decode)) + 1
            estimates.append(ride + engine.decode_ms(batch, kv + stats.decode_len.value))
            if can_down:
                combined = _top(group, lambda f: f.sum_decode_kv_tokens + f.sum_queued_decode_kv_tokens
                                + f.sum_queued_prefill_tokens) * scale
                itl_after = ride + engine.decode_ms(math.ceil(batch * scale), combined + stats.decode_len.value)
                if combined >= engine.worker_kv_tokens or itl_after >= self.s.itl_ms * self.s.sensitivity:
                    can_down, refused = False, True
        diag["estimated_itl_ms"] = max(estimates, default=None)
        return _sla_step(estimates, self.s.itl_ms, workers, self.s.min_decode, can_down, refused, keep_on_refusal=True)

    # -- throughput scaling -------------------------------------------------------------------

    def _throughput_tick(self, snapshot: Snapshot, diag: dict[str, Any]) -> tuple[dict[str, int] | None, str]:
        """Forecast the next interval from the merged windows and size the pools for it."""
        window, self._traffic = self._traffic, _Traffic()
        if window.duration_s <= 0:
            return None, "no_traffic_data"
        num_req, isl, osl = self._forecast(window)
        diag.update(predicted_num_req=num_req, predicted_isl=isl, predicted_osl=osl, predicted_kv_hit_rate=self._hit)
        demand = num_req / window.duration_s
        if self.s.disaggregated:
            return self._throughput_disagg(snapshot, demand, isl, osl, diag)
        return self._throughput_agg(snapshot, demand, isl, osl, diag)

    def _forecast(self, window: _Traffic) -> tuple[float, float, float]:
        """Feed the window to the three forecasters (carrying the last request shape over idle
        windows) and return their predictions."""
        self._num_req.observe(float(window.num_req))
        isl, osl = window.isl, window.osl
        if window.num_req > 0 and window.completed > 0:
            self._seen_traffic = True
            self._last_shape = (isl, osl)
        elif self._seen_traffic and self._last_shape is not None:
            isl, osl = self._last_shape
        self._isl.observe(isl)
        self._osl.observe(osl)
        return self._num_req.predict(), self._isl.predict(), self._osl.predict()

    def _replicas(self, name: str, demand: float, capacity: Capacity | None, current: int,
                  diag: dict[str, Any]) -> tuple[int, bool]:
        """ceil(demand / engine rps) capped to ±max_step of now, at least the minimum; the
        current count when the capacity is unknown. Also says whether the model was ready."""
        ready = capacity is not None and capacity.rps > 0
        diag[f"engine_rps_{name}"] = capacity.rps if ready else None
        desired = math.ceil(demand / capacity.rps - 1e-9) if ready else current
        desired = max(desired, self.s.min_workers(name))
        desired = min(max(desired, current - self.s.max_step), current + self.s.max_step)
        return max(desired, self.s.min_workers(name)), ready

    def _throughput_agg(self, snapshot: Snapshot, demand: float, isl: float, osl: float,
                        diag: dict[str, Any]) -> tuple[dict[str, int] | None, str]:
        """One aggregated pool sized for the forecast demand."""
        pool = snapshot.pools["decode"]
        workers = len(pool.active)
        capacity = agg_capacity(engine_of(pool), isl, osl, self._hit, self.s.ttft_ms, self.s.itl_ms)
        desired, ready = self._replicas("decode", demand, capacity, workers, diag)
        gpus, floor = pool.gpus_per_worker, self.s.min_decode
        fitted, ceiling = guard_single(workers, desired, gpus, -1, self.s.max_gpus, floor)
        if self.s.load_scaling:
            self._bound["decode"] = fitted
            return None, "model_not_ready" if not ready else ceiling or "set_lower_bound"
        final, budget = guard_single(workers, fitted, gpus, self.s.min_gpus, self.s.max_gpus, floor)
        if final == workers:
            return None, "model_not_ready" if not ready else budget or ceiling or "no_change"
        return {"decode": final}, "model_not_ready" if not ready else "scale"

    def _throughput_disagg(self, snapshot: Snapshot, demand: float, isl: float, osl: float,
                           diag: dict[str, Any]) -> tuple[dict[str, int] | None, str]:
        """Prefill and decode pools sized for the forecast demand, budgeted together."""
        pp, dp = snapshot.pools["prefill"], snapshot.pools["decode"]
        current = (len(pp.active), len(dp.active))
        cap_p = prefill_capacity(engine_of(pp), isl, self._hit, self.s.ttft_ms)
        cap_d = decode_capacity(engine_of(dp), isl, osl, self.s.itl_ms)
        want_p, ready_p = self._replicas("prefill", demand, cap_p, current[0], diag)
        want_d, ready_d = self._replicas("decode", demand, cap_d, current[1], diag)
        if not (ready_p and ready_d):
            want_p, want_d = max(current[0], self.s.min_prefill), max(current[1], self.s.min_decode)
        gpus, floors = (pp.gpus_per_worker, dp.gpus_per_worker), (self.s.min_prefill, self.s.min_decode)
        fp, fd, ceiling = guard_pair(current, (want_p, want_d), gpus, -1, self.s.max_gpus, floors)
        if self.s.load_scaling:
            self._bound["prefill"], self._bound["decode"] = fp, fd
            return None, "set_lower_bound" if ready_p and ready_d else "model_not_ready"
        fp, fd, budget = guard_pair(current, (fp, fd), gpus, self.s.min_gpus, self.s.max_gpus, floors)
        if (fp, fd) == current:
            return None, "model_not_ready" if not (ready_p and ready_d) else budget or ceiling or "no_change"
        return {"prefill": fp, "decode": fd}, "scale"


def _consolidation(workers: int) -> float:
    """N / (N − 1): how much one survivor's load grows when a worker goes away."""
    return workers / (workers - 1) if workers > 1 else 1.0


def _sla_step(estimates: list[float], sla: float, workers: int, min_workers: int, can_down: bool,
              refused: bool, keep_on_refusal: bool) -> _Sub:
    """+1 if every worker's prediction exceeds the SLA; −1 when scaling down is safe."""
    if not estimates:
        return _Sub(None, "insufficient_data")
    if all(t > sla for t in estimates):
        return _Sub(workers + 1, "scale_up")
    if can_down:
        return _Sub(max(workers - 1, min_workers), "scale_down")
    if refused:
        return _Sub(workers if keep_on_refusal else None, "scale_down_refused_consolidation", True)
    return _Sub(None, "no_change")


def _classify(final: int, current: int, original: int, refused: bool) -> str:
    """The load decision's reason from where it ended relative to the current count."""
    capped = final > original and original < current
    if final > current:
        return "scale_up"
    if final < current:
        return "scale_down_capped_by_throughput" if capped else "scale_down"
    if capped:
        return "scale_down_capped_by_throughput"
    return "scale_down_refused_consolidation" if refused else "no_change"
