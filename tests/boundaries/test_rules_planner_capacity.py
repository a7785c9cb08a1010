"""Planner capacity-sweep rules (scaling/planner/capacity.py): the batch candidates (every size
up to 128, else 128 spread sizes rounded to the nearest, both ends included), the pick (highest
rps among SLA-eligible points, ties to the smaller batch; else the least violating), the
prefix-hit discount clamped to [0, 0.95], prompt chunks of at most max_batched_tokens rounded up,
a batch of prompts that fills the token budget exactly still batched, and DP ranks multiplying
a worker's rate."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from servesim.scaling.planner import capacity as cap
from servesim.scaling.planner.capacity import Capacity, Engine


@dataclass(frozen=True)
class Linear:
    """prefill: 1 + 0.01 ms per (batch × token); decode: 2 + 0.1 per sequence + 0.001 per KV token."""

    calls: list

    def prefill(self, batch: int, tokens: int, cached: int) -> float:
        self.calls.append(("prefill", batch, tokens, cached))
        return 1.0 + 0.01 * batch * tokens

    def decode(self, batch: int, kv: int, per: int, rank_kv: int) -> float:
        self.calls.append(("decode", batch, kv, per, rank_kv))
        return 2.0 + 0.1 * batch + 0.001 * kv


def _engine(budget=100, seqs=8, kv=10_000, ranks=1) -> Engine:
    return Engine(Linear([]), budget, seqs, kv, ranks)


@pytest.mark.parametrize("most", [0, 1, 2, 127, 128])
def test_small_maxima_try_every_batch(most):
    assert cap._batch_sizes(most) == list(range(1, max(1, most) + 1))


@given(st.integers(129, 100_000))
def test_large_maxima_spread_128_rounded_sizes_from_one_to_the_maximum(most):
    sizes = cap._batch_sizes(most)
    step = (most - 1) / 127
    assert sizes == sorted({1 + round(i * step) for i in range(128)})
    assert sizes[0] == 1 and sizes[-1] == most and len(sizes) == len(set(sizes))


def test_a_spread_rounds_to_the_nearest():
    sizes = cap._batch_sizes(255)   # step 254 / 127 = 2: exact
    assert sizes == list(range(1, 256, 2))
    sizes = cap._batch_sizes(193)   # step 1.5118...: 1 + round(1.51) = 3, not 2
    assert sizes[:3] == [1, 3, 4]


def _point(rps, batch, ttft=0.0, itl=0.0, eligible=True):
    return Capacity(rps, batch, ttft, itl, eligible)


def test_the_pick_prefers_eligible_rps_then_the_smaller_batch():
    points = [_point(5.0, 1), _point(9.0, 4), _point(9.0, 2), _point(20.0, 8, eligible=False)]
    assert cap._pick(points, 100.0, 100.0).batch == 2


def test_without_eligible_points_the_least_violating_wins_then_the_smaller_batch():
    points = [_point(1.0, 1, ttft=300.0, itl=10.0, eligible=False), _point(1.0, 2, ttft=150.0, itl=60.0, eligible=False),
              _point(1.0, 3, ttft=120.0, itl=60.0, eligible=False)]
    # ratios over (100, 50): max(3, 0.2) = 3; max(1.5, 1.2) = 1.5; max(1.2, 1.2) = 1.2
    assert cap._pick(points, 100.0, 50.0).batch == 3
    tie = [_point(1.0, 4, ttft=200.0, eligible=False), _point(1.0, 2, ttft=200.0, eligible=False)]
    assert cap._pick(tie, 100.0, 50.0).batch == 2
    assert cap._pick([], 100.0, 50.0) is None


@pytest.mark.parametrize(("rate", "clamped"), [(None, 0.0), (float("nan"), 0.0), (-0.2, 0.0), (0.0, 0.0),
                                               (0.5, 0.5), (0.95, 0.95), (0.96, 0.95), (1.0, 0.95)])
def test_the_hit_rate_is_clamped(rate, clamped):
    assert cap.clamp_hit_rate(rate) == clamped


@pytest.mark.parametrize(("tokens", "chunks"), [(0, []), (-5, []), (0.2, [1]), (100, [100]), (100.5, [100, 1]),
                                                (250, [100, 100, 50]), (200, [100, 100])])
def test_prompts_are_cut_into_budget_sized_chunks_rounded_up(tokens, chunks):
    assert _engine()._chunks(tokens) == chunks


def test_a_budget_below_one_token_still_cuts_single_tokens():
    assert _engine(budget=0)._chunks(3) == [1, 1, 1]


def test_decode_rounds_the_kv_up_and_the_batch_to_at_least_one():
    engine = _engine(kv=777)
    engine.decode_ms(0, 10.2)
    engine.decode_ms(3, -4.0)
    assert engine.timing.calls == [("decode", 1, 11, 11, 777), ("decode", 3, 0, 0, 777)]


def test_mixed_ttft_adds_one_decode_pass_per_chunk():
    engine = _engine()
    assert engine.mixed_ttft_ms(0, 4, 100) == 0.0
    assert engine.mixed_ttft_ms(150, 4, 100) == pytest.approx((1 + 1.0) + (1 + 0.5) + 2 * (2 + 0.4 + 0.1))
    assert engine.mixed_ttft_ms(150, 0, 100) == pytest.approx(2.0 + 1.5), "no decodes, nothing rides along"


def test_prefill_capacity_discounts_hits_and_batches_to_the_budget():
    engine = _engine(budget=100, seqs=8)
    best = cap.prefill_capacity(engine, 50, 0.5, 1e9)
    # effective 25 tokens: batches 1..4 (4 × 25 = 100 fills the budget exactly, still one pass)
    assert best is not None and best.batch == 4
    assert best.ttft_ms == pytest.approx(1.0 + 0.01 * 100) and best.rps == pytest.approx(4 / (2.0 / 1000))
    assert cap.prefill_capacity(engine, 0, None, 100.0) is None


def test_a_prompt_over_the_budget_is_timed_in_chunks_alone():
    engine = _engine(budget=100)
    best = cap.prefill_capacity(engine, 250, None, 1e9)
    assert best is not None and best.batch == 1
    assert best.ttft_ms == pytest.approx(2.0 + 2.0 + 1.5)


def test_the_sequence_limit_caps_the_prefill_batch_and_ranks_multiply():
    one = cap.prefill_capacity(_engine(budget=100, seqs=2), 10, None, 1e9)
    two = cap.prefill_capacity(_engine(budget=100, seqs=2, ranks=2), 10, None, 1e9)
    assert one is not None and two is not None and one.batch == 2 and two.rps == pytest.approx(2 * one.rps)


def test_the_prefill_sla_is_inclusive():
    engine = _engine(budget=100, seqs=8)
    best = cap.prefill_capacity(engine, 25, None, 1.5)   # batch 2: 1 + 0.5 = 1.5 exactly
    assert best is not None and best.batch == 2 and best.eligible


def test_the_hit_discount_never_drops_a_prompt_below_one_token():
    engine = _engine(budget=100, seqs=200)
    best = cap.prefill_capacity(engine, 1, 0.95, 1e9)
    assert best is not None and best.batch == 100, "1 effective token: 100 fit the budget"


def test_decode_capacity_uses_half_the_output_as_context_and_the_kv_limit():
    engine = _engine(seqs=64, kv=1000)
    best = cap.decode_capacity(engine, 90, 21, 1e9)
    # context ceil(90 + 10.5) = 101 tokens: 1000 // 101 = 9 sequences at most
    assert best is not None and best.batch == 9
    assert best.itl_ms == pytest.approx(2.0 + 0.9 + 0.001 * 909)
    assert best.rps == pytest.approx(9 / (21 * best.itl_ms / 1000))
    assert cap.decode_capacity(engine, 0, 10, 1e9) is None and cap.decode_capacity(engine, 10, 0, 1e9) is None


def test_the_decode_sla_is_inclusive_and_one_sequence_is_always_tried():
    engine = _engine(seqs=64, kv=50)
    best = cap.decode_capacity(engine, 90, 20, 2.1 + 0.001 * 100)
    assert best is not None and best.batch == 1 and best.eligible


def test_agg_capacity_needs_a_budget_of_two_tokens():
    assert cap.agg_capacity(_engine(budget=1), 10, 10, None, 1e9, 1e9) is None
    assert cap.agg_capacity(_engine(budget=2), 10, 10, None, 1e9, 1e9) is not None
    assert cap.agg_capacity(_engine(), 0, 10, None, 1e9, 1e9) is None
    assert cap.agg_capacity(_engine(), 10, 0, None, 1e9, 1e9) is None


def test_agg_capacity_stops_where_the_prefill_share_overflows_the_budget():
    engine = _engine(budget=20, seqs=64, kv=1_000_000)
    # share = ceil(b × 10 / 5) = 2b must fit next to the b decodes: 2b ≤ 20 − b up to b = 6
    points = []
    real_pick = cap._pick
    try:
        cap._pick = lambda pts, *a: points.extend(pts) or real_pick(pts, *a)  # type: ignore[assignment]
        cap.agg_capacity(engine, 10, 5, None, 1e9, 1e9)
    finally:
        cap._pick = real_pick  # type: ignore[assignment]
    assert [p.batch for p in points] == [1, 2, 3, 4, 5, 6]
    six = points[-1]
    pass_ms = (1 + 0.01 * 12) + (2 + 0.6 + 0.001 * math.ceil(6 * 12.5))
    assert six.itl_ms == pytest.approx(pass_ms)
    assert six.rps == pytest.approx(min(6 / (5 * pass_ms / 1000), (20 - 6) / (10 * pass_ms / 1000)))
