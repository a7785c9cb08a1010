"""The vLLM rank scheduler, pass by pass (fixed timing: prefill 10 ms, decode 5 ms)."""

from __future__ import annotations

import pytest

from servesim.engine.request import EngineRequest
from servesim.perf.timing import FixedTiming
from servesim.engine.rank import RankConfig
from servesim.engine.vllm.core import VllmRank
from servesim.traffic.workload import GENERATED_BASE, expand_hash_ids


def _request(rid, length, output, values=None, block=16):
    values = values if values is not None else [1000 * rid + i for i in range(-(-length // block))]
    return EngineRequest(rid, expand_hash_ids(values, block, length), length, output,
                         GENERATED_BASE + 10_000 * rid)


def _rank(lazy, **overrides):
    config = RankConfig(**{"block_size": 16, "num_blocks": 1000, "max_batched_tokens": 8192, **overrides})
    return VllmRank(config, FixedTiming(10, 5), lazy_decode=lazy)


@pytest.fixture(params=[True, False], ids=["cohort", "plain"])
def lazy(request):
    return request.param


def test_prompt_pass_costs_prefill_plus_decode_and_emits_the_first_token(lazy):
    rank = _rank(lazy)
    r = _request(1, 20, 3)
    rank.enqueue(r)
    first = rank.run_pass(0)
    assert (first.prefill_ms, first.decode_ms) == (10.0, 5.0)
    assert first.admitted == [(r, 0)] and r.generated == 1
    second = rank.run_pass(1)
    assert (second.prefill_ms, second.decode_ms) == (0.0, 5.0)
    third = rank.run_pass(2)
    assert third.finished == [r] and r.generated == 3 and r.token_spans == [0, 3]
    assert not rank.has_work() and rank.pool.active_blocks == 0


def test_waiting_request_gets_the_budget_left_after_decodes(lazy):
    rank = _rank(lazy, max_batched_tokens=64)
    a, b = _request(1, 20, 6), _request(2, 150, 2)
    rank.enqueue(a)
    rank.run_pass(0)
    rank.enqueue(b)
    chunks = []
    for p in range(1, 4):
        before = b.computed
        rank.run_pass(p)
        chunks.append(b.computed - before)
    assert chunks == [63, 63, 24], "chunks are whatever budget the decoding request leaves"
    assert b.generated == 1


def test_lifo_preemption_recomputes_and_reuses_surviving_blocks(lazy):
    rank = _rank(lazy, num_blocks=10)
    a, b = _request(1, 64, 40), _request(2, 64, 40)
    rank.enqueue(a)
    rank.enqueue(b)
    p = 0
    while not b.preempted:
        result = rank.run_pass(p)
        p += 1
        assert p < 1000, "b must be preempted"
    assert result.preemptions == 1 and not result.admitted
    assert list(rank.waiting) == [b] and b.computed == 0 and b.generated == 17
    while b.admissions < 2:
        result = rank.run_pass(p)
        p += 1
        assert p < 1000, "b must be readmitted"
    assert result.admitted == [(b, 48)], "3 of b's blocks survived in the cache"


def test_rejections_fire_even_with_no_budget_left(lazy):
    rank = _rank(lazy, max_batched_tokens=64, max_model_len=256)
    big, too_long = _request(1, 200, 2), _request(2, 256, 2)
    rank.enqueue(big)
    rank.enqueue(too_long)
    result = rank.run_pass(0)
    assert result.admitted == [(big, 0)] and big.computed == 64
    assert result.rejected == [too_long]


def test_output_zero_completes_without_a_token_or_decode_time(lazy):
    rank = _rank(lazy)
    r = _request(1, 10, 0)
    rank.enqueue(r)
    result = rank.run_pass(0)
    assert result.finished == [r] and r.generated == 0 and r.token_spans == []
    assert (result.prefill_ms, result.decode_ms) == (10.0, 0.0)


def test_context_limit_ends_generation_early(lazy):
    rank = _rank(lazy, max_model_len=256)
    r = _request(1, 250, 20)
    rank.enqueue(r)
    p = 0
    while rank.has_work():
        rank.run_pass(p)
        p += 1
        assert p < 1000, "the request must end"
    assert r.generated == 6 and r.length == 256


def test_same_pass_prefix_reuse_and_recompute_cap(lazy):
    rank = _rank(lazy)
    shared = [7, 8, 9, 10, 11, 12, 13]
    a, b = _request(1, 100, 2, shared), _request(2, 100, 2, shared)
    rank.enqueue(a)
    rank.enqueue(b)
    result = rank.run_pass(0)
    assert result.admitted == [(a, 0), (b, 96)], "b hits a's blocks scheduled earlier in the same pass"
    c = _request(3, 96, 2, shared[:6])
    rank.enqueue(c)
    assert rank.run_pass(1).admitted == [(c, 80)], "a fully cached aligned prompt recomputes its last block"


def test_cohort_members_are_not_touched_between_their_events():
    rank = _rank(True)
    r = _request(1, 20, 100)
    rank.enqueue(r)
    rank.run_pass(0)
    rank.run_pass(1)
    assert r in rank.cohort and r.anchor == 1
    for p in range(2, 40):
        rank.run_pass(p)
    assert (r.generated, r.computed) == (1, 20), "counters move only when the request leaves the cohort"
    assert len(r.lease) == -(-(20 + 39) // 16), "blocks are still allocated on time"


def test_forward_pass_metrics_describe_the_pass(lazy):
    rank = _rank(lazy, max_batched_tokens=70, max_sequences=3, record_metrics=True)
    a, b = _request(1, 20, 9), _request(2, 30, 9)
    rank.enqueue(a)
    rank.enqueue(b)
    rank.run_pass(0)
    rank.run_pass(1)
    c, d, e = _request(3, 100, 2), _request(4, 16, 2), _request(5, 16, 2)
    for r in (c, d, e):
        rank.enqueue(r)
    m = rank.run_pass(2).metrics
    assert (m.num_decode_requests, m.sum_decode_kv_tokens) == (2, 22 + 32)
    assert m.var_decode_kv_tokens == 25.0
    assert (m.num_prefill_requests, m.sum_prefill_tokens, m.sum_prefill_kv_tokens) == (1, 68, 0)
    assert (m.num_queued_prefill, m.sum_queued_prefill_tokens) == (2, 32), "d and e wait for a slot"
    assert m.var_queued_prefill_length == 0.0 and m.num_queued_decode == 0
