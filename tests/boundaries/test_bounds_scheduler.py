"""Scheduler boundaries (docs: engine spec §3 vLLM, §5 SGLang): the token budget is used to the
last token, slots to the last slot, the context limit is reached at max_model_len, a fully
cached prompt recomputes its last block, and SGLang's ratio decays every pass (also the pass
that reset it) from 0.7·conservativeness to 0.14 of that in 600 passes."""

from __future__ import annotations

import pytest

from engine_helpers import sglang_rank, sglang_request, vllm_rank, vllm_request

# -- vLLM: token budget and slots ------------------------------------------------------------


@pytest.mark.parametrize("lazy", [False, True], ids=["plain", "cohort"])
def test_every_pass_spends_the_whole_budget_while_work_remains(lazy):
    """Budget 2, two 4-token prompts with 3 output tokens each, running first then FCFS:
    a: 2 + 2 prompt tokens (first token), then a decode + 1 of b's prompt twice (a is done
    after its third token), then b's last 2 prompt tokens, then b's two decodes."""
    rank = vllm_rank(lazy, max_batched_tokens=2)
    a, b = vllm_request(1, 4, 3), vllm_request(2, 4, 3)
    rank.enqueue(a)
    rank.enqueue(b)
    used = []
    while rank.has_work():
        used.append(rank.run_pass(len(used)).scheduled_tokens)
        assert len(used) < 20
    assert used == [2, 2, 2, 2, 2, 1, 1]
    assert (a.generated, b.generated) == (3, 3)


def test_a_prompt_cut_by_the_budget_takes_all_of_it():
    rank = vllm_rank(max_batched_tokens=64)
    r = vllm_request(1, 100, 2)
    rank.enqueue(r)
    rank.run_pass(0)
    assert r.computed == 64
    rank.run_pass(1)
    assert r.computed == 100 and r.generated == 1


def test_a_prompt_exactly_the_budget_completes_in_one_pass():
    rank = vllm_rank(max_batched_tokens=64)
    r = vllm_request(1, 64, 2)
    rank.enqueue(r)
    result = rank.run_pass(0)
    assert r.computed == 64 and result.first_tokens == [r] and result.scheduled_tokens == 64


def test_admission_fills_the_slots_and_no_more():
    rank = vllm_rank(max_sequences=2)
    requests = [vllm_request(i, 10, 5) for i in range(1, 4)]
    for r in requests:
        rank.enqueue(r)
    result = rank.run_pass(0)
    assert [r for r, _ in result.admitted] == requests[:2]
    assert list(rank.waiting) == requests[2:]


def test_the_context_limit_is_reached_at_max_model_len():
    rank = vllm_rank(max_model_len=100)
    at, below = vllm_request(1, 100, 2), vllm_request(2, 99, 2)
    rank.enqueue(at)
    rank.enqueue(below)
    result = rank.run_pass(0)
    assert result.rejected == [at] and [r for r, _ in result.admitted] == [below]


def test_a_decode_only_pass_has_no_prefill_time():
    rank = vllm_rank()
    r = vllm_request(1, 20, 3)
    rank.enqueue(r)
    assert rank.run_pass(0).prefill_ms == 10.0
    second = rank.run_pass(1)
    assert (second.prefill_ms, second.decode_ms) == (0.0, 5.0)


def test_a_fully_cached_prompt_recomputes_its_last_block():
    rank = vllm_rank(prefix_caching=True)
    values = [7001, 7002]
    first = vllm_request(1, 32, 1, values)
    rank.enqueue(first)
    rank.run_pass(0)
    assert not rank.has_work()
    again = vllm_request(2, 32, 3, values)
    rank.enqueue(again)
    result = rank.run_pass(1)
    assert result.admitted == [(again, 16)], "the last of two cached blocks is recomputed to sample from"


def test_a_prompt_one_token_past_its_cached_blocks_reuses_them_all():
    rank = vllm_rank(prefix_caching=True)
    rank.enqueue(vllm_request(1, 32, 1, [7001, 7002]))
    rank.run_pass(0)
    longer = vllm_request(2, 33, 3, [7001, 7002, 7003])
    rank.enqueue(longer)
    assert rank.run_pass(1).admitted == [(longer, 32)]


# -- SGLang ----------------------------------------------------------------------------------


def test_sglang_ratio_constants():
    r = sglang_rank(schedule_conservativeness=1.0)
    assert r.ratio == pytest.approx(0.7) and r.ratio_min == pytest.approx(0.7 * 0.14)
    assert r.ratio_decay == pytest.approx((0.7 - 0.098) / 600)


def test_sglang_ratio_reaches_its_floor_after_600_passes_not_before():
    r = sglang_rank(schedule_conservativeness=1.0)
    for p in range(599):
        r.run_pass(p)
    assert r.ratio == pytest.approx(r.ratio_min + r.ratio_decay, rel=1e-9)
    r.run_pass(599)
    assert r.ratio == pytest.approx(r.ratio_min, abs=1e-12)
    r.run_pass(600)
    assert r.ratio == r.ratio_min


def test_sglang_ratio_decays_in_the_pass_that_reset_it():
    r = sglang_rank(num_blocks=200, schedule_conservativeness=0.01)
    a, b = sglang_request(1, 20, 100), sglang_request(2, 20, 100)
    r.enqueue(a)
    r.enqueue(b)
    for p in range(1000):
        if r.run_pass(p).preemptions:
            break
    else:
        raise AssertionError("no retraction")
    assert b.preempted
    assert r.ratio == max(r.ratio_init - r.ratio_decay, r.ratio_min), "reset, then the pass's decay"


def test_sglang_a_prompt_of_exactly_the_chunk_size_waits_whole():
    """extend ≤ chunked_prefill_size: never split to fill what is left of the chunk budget."""
    r = sglang_rank(chunked_prefill_size=64)
    a, b = sglang_request(1, 10, 5), sglang_request(2, 64, 5)
    r.enqueue(a)
    r.enqueue(b)
    assert r.run_pass(0).admitted == [(a, 0)]
    assert r.run_pass(1).admitted == [(b, 0)] and b.generated == 1, "the whole prompt in one chunk"


def test_sglang_admission_fills_the_free_slots_and_no_more():
    r = sglang_rank(max_sequences=3)
    first = sglang_request(1, 10, 50)
    r.enqueue(first)
    r.run_pass(0)
    others = [sglang_request(i, 10, 50) for i in range(2, 6)]
    for q in others:
        r.enqueue(q)
    assert [q for q, _ in r.run_pass(1).admitted] == others[:2]


def test_sglang_admission_needs_strictly_less_than_the_room():
    """page 1, 200 tokens: a 100-token prompt reserving 99 outputs fits (199 < 200); reserving 100
    it does not (200 is not < 200)."""
    fits, not_quite = sglang_rank(num_blocks=200), sglang_rank(num_blocks=200)
    a, b = sglang_request(1, 100, 99), sglang_request(2, 100, 100)
    fits.enqueue(a)
    not_quite.enqueue(b)
    assert fits.run_pass(0).admitted == [(a, 0)]
    assert not not_quite.run_pass(0).admitted


class RecordingTiming:
    """Fixed phase times that record the prefill batch they were asked about."""

    def __init__(self) -> None:
        self.prefills: list[tuple[int, int, int]] = []

    def prefill(self, batch: int, mean_isl: int, mean_prefix: int) -> float:
        self.prefills.append((batch, mean_isl, mean_prefix))
        return 10.0

    def decode(self, batch: int, active_kv_tokens: int, mean_ctx: int, total_kv_tokens: int) -> float:
        return 5.0


def test_the_prefill_batch_is_timed_at_the_floor_means_of_its_chunks():
    from servesim.engine.rank import RankConfig
    from servesim.engine.vllm.core import VllmRank

    timing = RecordingTiming()
    rank = VllmRank(RankConfig(block_size=16, num_blocks=100, max_batched_tokens=8192), timing, lazy_decode=False)
    rank.enqueue(vllm_request(1, 10, 2))
    rank.enqueue(vllm_request(2, 21, 2))
    rank.run_pass(0)
    assert timing.prefills == [(2, 15, 0)], "floor(31 / 2) = 15"


def test_sglang_cached_pages_count_as_room():
    """Free plus evictable: a finished request's cached pages can be evicted for a new one."""
    r = sglang_rank(num_blocks=200)
    warm = sglang_request(1, 100, 1)
    r.enqueue(warm)
    r.run_pass(0)
    assert not r.running and not r.waiting
    big = sglang_request(2, 150, 10)
    r.enqueue(big)
    assert r.run_pass(1).admitted == [(big, 0)], "150 + 10 < 200 once the cached 100 are evictable"


@pytest.mark.parametrize(("output", "admitted"), [(31, True), (32, False)])
def test_sglang_a_chunk_is_charged_in_whole_pages(output, admitted):
    """Page 16, 5 pages; one running request holds a page and reserves ~0 (39 × ratio 0.0007):
    a 20-token prompt is charged 2 pages, 32 + 31 < 64 − 0.03 but 32 + 32 is not."""
    r = sglang_rank(num_blocks=5, page=16, schedule_conservativeness=0.001)
    running = sglang_request(1, 10, 40)
    r.enqueue(running)
    assert r.run_pass(0).admitted == [(running, 0)]
    q = sglang_request(2, 20, output)
    r.enqueue(q)
    assert bool(r.run_pass(1).admitted) is admitted
    assert q not in r.run_pass(2).rejected, "while a request runs, a head that does not fit waits"
