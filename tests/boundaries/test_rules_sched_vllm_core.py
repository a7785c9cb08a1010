"""vLLM core rules at their edges (`engine.vllm.core`): a request with a single shareable block
still looks it up, a preempted request reuses its own surviving private blocks, once the token
budget is spent one more request with nothing to compute (an output-0, fully cached prompt) may
join and then admission stops, and the queue counts running plus waiting requests."""

from __future__ import annotations

from engine_helpers import vllm_rank, vllm_request
from servesim.engine.request import EngineRequest
from servesim.traffic.workload import GENERATED_BASE, expand_hash_ids

VALUES = [7001, 7002]


def request(rid: int, length: int, output: int, values: list[int], unique_from: int = 1 << 62) -> EngineRequest:
    return EngineRequest(rid, expand_hash_ids(values, 16, length), length, output, GENERATED_BASE + 10_000 * rid,
                         unique_from=unique_from, block_size=16)


def warm(rank, values: list[int] = VALUES) -> None:
    """Run one request of `values` to the end, leaving its blocks cached."""
    rank.enqueue(request(99, 16 * len(values), 1, values))
    while rank.has_work():
        rank.run_pass(0)


def test_the_queue_counts_running_and_waiting_requests():
    rank = vllm_rank(max_sequences=2)
    for i in range(1, 5):
        rank.enqueue(vllm_request(i, 10, 5))
    assert rank.num_requests() == 4
    rank.run_pass(0)
    assert (rank.num_running(), rank.num_waiting(), rank.num_requests()) == (2, 2, 4)


def test_a_single_shareable_block_is_looked_up():
    """Only the first block is shareable (unique from token 16): it is the one cache hit."""
    rank = vllm_rank(prefix_caching=True)
    warm(rank)
    r = request(1, 40, 3, [*VALUES, 7003], unique_from=16)
    assert r.shared_blocks == 1
    rank.enqueue(r)
    assert rank.run_pass(1).admitted == [(r, 16)]


def test_no_shareable_block_means_no_lookup():
    rank = vllm_rank(prefix_caching=True)
    warm(rank)
    r = request(1, 40, 3, [*VALUES, 7003], unique_from=0)
    rank.enqueue(r)
    assert rank.run_pass(1).admitted == [(r, 0)]


def _readmitted_reuse(prefix_caching: bool) -> tuple[list[int], EngineRequest, EngineRequest]:
    """Two 40-token prompts of 30 outputs on 6 blocks of 16: the tokens the preempted one reuses
    at each readmission."""
    rank = vllm_rank(prefix_caching=prefix_caching, num_blocks=6)
    a = request(1, 40, 30, [1, 2, 3], unique_from=0)
    b = request(2, 40, 30, [4, 5, 6], unique_from=0)
    rank.enqueue(a)
    rank.enqueue(b)
    readmitted = []
    for i in range(200):
        result = rank.run_pass(i)
        readmitted += [reused for r, reused in result.admitted if r is b and r.admissions > 1]
        if not rank.has_work():
            break
    assert b.preempted
    return readmitted, a, b


def test_a_preempted_private_request_reuses_its_surviving_blocks():
    """Two prompts hold 3 blocks each. When the first needs its 4th block, the last running one is
    preempted (its 3 private blocks go to the LRU, last block first); the first's 4th and 5th
    blocks evict two of them, so when the first is done the preempted one comes back with its
    first block (16 tokens) still resident."""
    readmitted, a, b = _readmitted_reuse(prefix_caching=True)
    assert readmitted == [16]
    assert (a.generated, b.generated) == (30, 30)


def test_the_same_without_prefix_caching_recomputes_everything():
    assert _readmitted_reuse(prefix_caching=False)[0] == [0]


def test_a_spent_budget_admits_one_more_request_with_nothing_to_compute():
    """Budget 16: a fresh 16-token prompt spends it; an output-0 prompt whose two blocks are
    cached computes nothing and joins; admission then stops (the next such prompt waits)."""
    rank = vllm_rank(prefix_caching=True, max_batched_tokens=16)
    warm(rank)
    a = vllm_request(1, 16, 2)
    b, c = request(2, 32, 0, VALUES), request(3, 32, 0, VALUES)
    for r in (a, b, c):
        rank.enqueue(r)
    result = rank.run_pass(1)
    assert result.admitted == [(a, 0), (b, 32)]
    assert list(rank.waiting) == [c]
    assert result.finished == [b]


def test_a_request_taking_the_last_budget_token_does_not_stop_admission():
    """Budget 17: 16 + 1 fresh tokens spend it exactly; the cached output-0 prompt after them
    still joins (it is the first with an empty budget), the next one waits."""
    rank = vllm_rank(prefix_caching=True, max_batched_tokens=17)
    warm(rank)
    a, b = vllm_request(1, 16, 2), vllm_request(2, 1, 2)
    c, d = request(3, 32, 0, VALUES), request(4, 32, 0, VALUES)
    for r in (a, b, c, d):
        rank.enqueue(r)
    result = rank.run_pass(1)
    assert [r for r, _ in result.admitted] == [a, b, c]
    assert list(rank.waiting) == [d]


def test_budget_left_keeps_admitting_requests_with_nothing_to_compute():
    """Budget 20: 16 fresh tokens leave 4; both cached output-0 prompts join."""
    rank = vllm_rank(prefix_caching=True, max_batched_tokens=20)
    warm(rank)
    a = vllm_request(1, 16, 2)
    b, c = request(2, 32, 0, VALUES), request(3, 32, 0, VALUES)
    for r in (a, b, c):
        rank.enqueue(r)
    result = rank.run_pass(1)
    assert [r for r, _ in result.admitted] == [a, b, c]


def test_a_spent_budget_blocks_a_request_with_one_token_to_compute():
    """Budget 16 spent by a fresh prompt: a 33-token prompt with its first 32 tokens cached
    still has one token to compute, so it waits (it is not admitted with nothing scheduled)."""
    rank = vllm_rank(prefix_caching=True, max_batched_tokens=16)
    warm(rank)
    a, b = vllm_request(1, 16, 2), request(2, 33, 2, [*VALUES, 7003])
    rank.enqueue(a)
    rank.enqueue(b)
    result = rank.run_pass(1)
    assert result.admitted == [(a, 0)] and list(rank.waiting) == [b]
    assert rank.run_pass(2).admitted == [(b, 32)]


def test_a_chunked_prompt_holds_exactly_the_blocks_of_its_computed_tokens():
    """Budget 20, a 70-token prompt: 20, 40, 60, 70 tokens computed, then decodes; the pool's
    active blocks are always ceil(computed / 16) (a continuing request keeps its lease)."""
    rank = vllm_rank(max_batched_tokens=20, prefix_caching=False)
    r = vllm_request(1, 70, 6)
    rank.enqueue(r)
    seen = []
    while rank.has_work():
        rank.run_pass(len(seen))
        seen.append((r.computed, rank.pool.active_blocks))
        assert len(seen) < 20
    assert seen[:4] == [(20, 2), (40, 3), (60, 4), (70, 5)]
    assert all(blocks in (-(-computed // 16), 0) for computed, blocks in seen)
    assert rank.pool.active_blocks == 0


def test_state_blocks_are_held_next_to_the_token_blocks_and_copied_from_a_block_boundary():
    """One state block (upstream 0.13's state cache): a 20-token prompt holds its 2 token
    blocks and the state; from the pass that starts at a block boundary (32 computed tokens)
    on, it also holds the state's copy."""
    rank = vllm_rank(prefix_caching=False, state_blocks=1)
    r = vllm_request(1, 20, 20)
    rank.enqueue(r)
    seen = []
    while rank.has_work():
        rank.run_pass(len(seen))
        if rank.has_work():
            seen.append((r.computed, rank.pool.active_blocks))
        assert len(seen) < 30
    assert seen[0] == (20, 3)
    for computed, blocks in seen:
        assert blocks == -(-computed // 16) + (2 if computed > 32 else 1), (computed, blocks)
    assert rank.pool.active_blocks == 0
