"""SGLang scheduler rules at their edges (`engine.sglang.core`): the batch's prefill budgets
(`max_prefill_tokens`, `chunked_prefill_size`) are spent to the last token and shared by all
its chunks, a pass schedules the tokens it computes (not the reused ones) plus one per decoder,
admissions that fit never reset the ratio, and a pass decodes every running request."""

from __future__ import annotations

import pytest

from engine_helpers import sglang_rank, sglang_request
from servesim.engine.rank import RankConfig
from servesim.engine.request import EngineRequest
from servesim.engine.sglang.core import SglangRank
from servesim.perf.timing import FixedTiming
from servesim.traffic.workload import GENERATED_BASE


def admitted(result) -> list:
    return [r for r, _ in result.admitted]


@pytest.mark.parametrize("budget, count", [(119, 1), (120, 2), (179, 2), (180, 3)])
def test_max_prefill_tokens_is_shared_by_the_batch(budget, count):
    rank = sglang_rank(max_prefill_tokens=budget)
    requests = [sglang_request(i, 60, 4) for i in range(1, 5)]
    for r in requests:
        rank.enqueue(r)
    assert admitted(rank.run_pass(0)) == requests[:count]


@pytest.mark.parametrize("size, count", [(9, 1), (10, 2)])
def test_the_chunk_budget_is_spent_to_its_last_token(size, count):
    """Page 1, chunk size 10: a 9-token prompt leaves 1, which a 1-token prompt still takes."""
    rank = sglang_rank(chunked_prefill_size=size)
    a, b = sglang_request(1, 9, 4), sglang_request(2, 1, 4)
    rank.enqueue(a)
    rank.enqueue(b)
    assert admitted(rank.run_pass(0)) == [a, b][:count]


def test_a_pass_schedules_the_computed_prompt_tokens_and_one_per_decoder():
    """40 prompt tokens of which 32 are in the tree: 8 computed, then its first decode."""
    rank = sglang_rank()
    runs = [(5_000_000, -40)]
    first = EngineRequest(1, runs, 40, 1, GENERATED_BASE)
    rank.enqueue(first)
    while rank.has_work():
        rank.run_pass(0)
    again = EngineRequest(2, [(5_000_000, -32), (6_000_000, -8)], 40, 3, GENERATED_BASE + 100_000)
    rank.enqueue(again)
    result = rank.run_pass(1)
    assert result.admitted == [(again, 32)]
    assert result.scheduled_tokens == 8 + 1


def test_admissions_that_fit_leave_the_ratio_decaying():
    """A request admitted in each of 5 passes, nothing retracted: the ratio decays 5 times."""
    rank = sglang_rank(schedule_conservativeness=1.0)
    for p in range(5):
        rank.enqueue(sglang_request(p + 1, 10, 50))
        assert len(rank.run_pass(p).admitted) == 1
    assert rank.ratio == pytest.approx(rank.ratio_init - 5 * rank.ratio_decay, rel=1e-12)


def test_the_reserve_of_running_requests_is_their_clipped_output_times_the_ratio():
    """Page 1, 100 pages; a running request with 60 outputs left reserves 60 × 0.7 = 42 at the
    first admission pass after it, so a 30-token prompt of 5 outputs needs 35 < 100 − 11 − 42."""
    rank = sglang_rank(num_blocks=100, schedule_conservativeness=1.0)
    a = sglang_request(1, 10, 61)
    rank.enqueue(a)
    rank.run_pass(0)  # a: 10 prompt tokens + 1 output, 60 left; ratio decays once
    ratio = rank.ratio
    reserve = 60 * ratio
    free = 100 - 11
    fits = int(free - reserve - 1e-9)  # the largest charged + out strictly below the room
    b = sglang_request(2, fits - 5, 5)
    c = sglang_request(3, fits - 4, 5)
    rank.enqueue(b)
    assert admitted(rank.run_pass(1)) == [b]
    rank2 = sglang_rank(num_blocks=100, schedule_conservativeness=1.0)
    rank2.enqueue(sglang_request(1, 10, 61))
    rank2.run_pass(0)
    rank2.enqueue(c)
    assert admitted(rank2.run_pass(1)) == []


@pytest.mark.parametrize("clip, ok", [(20, True), (60, False)])
def test_the_reserve_is_clipped_per_running_request(clip, ok):
    """The running request reserves min(60, clip) × ratio: with clip 20 only 14 tokens."""
    rank = sglang_rank(num_blocks=100, schedule_conservativeness=1.0, clip_max_new_tokens=clip)
    rank.enqueue(sglang_request(1, 10, 61))
    rank.run_pass(0)
    b = sglang_request(2, 60, 5)  # charged 60 + min(5, clip) = 65 vs the room 89 − reserve
    rank.enqueue(b)
    assert (admitted(rank.run_pass(1)) == [b]) is ok


def test_every_running_request_decodes_in_a_pass():
    rank = sglang_rank()
    requests = [sglang_request(i, 10, 5) for i in range(1, 4)]
    for r in requests:
        rank.enqueue(r)
    first = rank.run_pass(0)
    assert first.emitted == 3 and first.scheduled_tokens == 30 + 3
    second = rank.run_pass(1)
    assert second.emitted == 3 and second.scheduled_tokens == 3 and second.prefill_ms == 0.0
    assert [r.generated for r in requests] == [2, 2, 2]


def interval_rank(interval: int) -> SglangRank:
    config = RankConfig(block_size=1, num_blocks=1000, prefix_caching=True, backend="sglang",
                        prefill_decode_interval=interval)
    return SglangRank(config, FixedTiming(10, 5))


@pytest.mark.parametrize("interval, first_admitting", [(0, 1), (1, 1), (2, 2), (3, 3)])
def test_after_an_extend_the_interval_less_one_passes_only_decode(interval, first_admitting):
    """prefill_decode_interval N (upstream 0.13): the extend pass is the first of N rounds
    without another extend, so a request arriving right after waits N − 1 passes."""
    rank = interval_rank(interval)
    rank.enqueue(sglang_request(1, 10, 20))
    assert admitted(rank.run_pass(0))
    b = sglang_request(2, 10, 20)
    rank.enqueue(b)
    passes = [bool(admitted(rank.run_pass(p))) for p in range(1, 5)]
    assert passes.index(True) + 1 == first_admitting
    assert passes.count(True) == 1


def test_held_passes_end_when_nothing_runs():
    """The first request finishes in its extend pass: nothing decodes, so the next one is
    admitted at once however long the interval."""
    rank = interval_rank(3)
    rank.enqueue(sglang_request(1, 10, 1))
    rank.run_pass(0)
    assert not rank.running
    rank.enqueue(sglang_request(2, 10, 20))
    assert admitted(rank.run_pass(1))


def test_a_decode_only_run_ahead_needs_room_for_every_next_token_exactly():
    """Page 1, 12 pages, one output token reserved: a 10-token prompt's first pass leaves 11 tokens in 11 pages; the next
    token fits the last free page (run ahead), the one after it does not."""
    rank = sglang_rank(num_blocks=12, clip_max_new_tokens=1)
    rank.enqueue(sglang_request(1, 10, 5))
    rank.run_pass(0)
    assert (rank.cache.free_pages, rank.cache.evictable_tokens) == (1, 0)
    assert rank.can_run_ahead(1)
    rank.run_pass(1)
    assert rank.cache.free_pages == 0 and not rank.can_run_ahead(2)


def test_evictable_cached_tokens_count_as_run_ahead_room():
    """A finished request's tokens stay in the tree, evictable: they are room for decoding."""
    rank = sglang_rank(num_blocks=12, clip_max_new_tokens=1)
    rank.enqueue(sglang_request(1, 3, 1))
    rank.run_pass(0)
    evictable = rank.cache.evictable_tokens
    assert evictable > 0 and not rank.has_work()
    rank.enqueue(sglang_request(2, 12 - evictable - 1, 5))
    rank.run_pass(1)
    assert rank.cache.free_pages == 0 and rank.cache.evictable_tokens > 0
    assert rank.can_run_ahead(2)
