"""What the planner predicts with a pool's timing model: latencies of one worker (`Engine`)
and the requests per second one worker sustains under the SLA (§3.5 step 3)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from servesim.engine.pass_time import TimingModel
from servesim.scaling.contract import PoolSnapshot

MAX_HIT_RATE = 0.95
"""Dynamo caps the prefix-hit discount so some work is always ahead."""
MAX_BATCH_CANDIDATES = 128


@dataclass(frozen=True, slots=True)
class Engine:
    """What predictions need about one worker of a pool."""

    timing: TimingModel
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


def clamp_hit_rate(rate: float | None) -> float:
    """A prefix-hit rate clamped to [0, 0.95] (None: 0)."""
    return 0.0 if rate is None or math.isnan(rate) else max(0.0, min(MAX_HIT_RATE, rate))




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
    effective = max(1, math.ceil(isl * (1 - clamp_hit_rate(hit))))
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
    discount = 1 - clamp_hit_rate(hit)
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

