"""KV block accounting at the block boundary: a sequence of k·block_size tokens holds exactly k
blocks, one token more takes block k+1; a prompt needing exactly the pool is admitted, one block
more is rejected; a pool can hand out exactly all of its blocks."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine_helpers import vllm_rank, vllm_request
from servesim.engine.cache.blocks import KeyMemo, chain_keys
from servesim.engine.cache.kv import BlockPool


def test_a_pool_hands_out_exactly_all_its_blocks():
    pool = BlockPool(4)
    assert pool.allocate(4) and pool.active_blocks == 4
    assert not pool.allocate(1) and pool.active_blocks == 4


def test_a_pool_refuses_one_block_more_than_it_has():
    pool = BlockPool(4)
    assert not pool.allocate(5) and pool.active_blocks == 0


def test_a_prompt_of_exactly_the_pool_is_served():
    rank = vllm_rank(num_blocks=2)
    r = vllm_request(1, 32, 1)
    rank.enqueue(r)
    result = rank.run_pass(0)
    assert not result.rejected and result.finished == [r]


def test_a_prompt_one_token_past_the_pool_is_rejected():
    rank = vllm_rank(num_blocks=2)
    r = vllm_request(1, 33, 1)
    rank.enqueue(r)
    result = rank.run_pass(0)
    assert result.rejected == [r] and "needs 3 KV blocks" in r.reject_reason


def test_a_prompt_of_k_blocks_holds_k_blocks_until_its_next_token():
    rank = vllm_rank(num_blocks=10)
    r = vllm_request(1, 32, 3)
    rank.enqueue(r)
    rank.run_pass(0)
    assert (r.computed, rank.pool.active_blocks) == (32, 2), "token 33 is sampled, not yet computed"
    rank.run_pass(1)
    assert (r.computed, rank.pool.active_blocks) == (33, 3)


def test_a_request_that_exactly_fills_the_free_blocks_fits():
    rank = vllm_rank(num_blocks=3)
    a, b = vllm_request(1, 32, 1), vllm_request(2, 16, 1)
    rank.enqueue(a)
    rank.enqueue(b)
    result = rank.run_pass(0)
    assert [r for r, _ in result.admitted] == [a, b]


def test_one_block_short_a_request_waits():
    rank = vllm_rank(num_blocks=3)
    a, b = vllm_request(1, 32, 1), vllm_request(2, 17, 1)
    rank.enqueue(a)
    rank.enqueue(b)
    assert [r for r, _ in rank.run_pass(0).admitted] == [a]


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 200), st.integers(1, 6), st.sampled_from([1, 4, 16]), st.integers(8, 96))
def test_held_blocks_are_the_ceiling_of_computed_tokens(prompt, output, block, budget):
    """Whatever the prompt, block size and chunking: after every pass the rank holds
    ceil(computed / block_size) blocks for its one request."""
    rank = vllm_rank(block_size=block, max_batched_tokens=budget)
    r = vllm_request(1, prompt, output, block=block)
    rank.enqueue(r)
    for p in range(400):
        if not rank.has_work():
            break
        rank.run_pass(p)
        if rank.has_work():
            assert rank.pool.active_blocks == -(-r.computed // block)
    assert r.generated == output and rank.pool.active_blocks == 0


def test_a_request_with_nothing_to_generate_hits_every_cached_block():
    """The last block is recomputed only to sample a token from: with output 0 every full block
    may come from the cache (policy.cache_limit)."""
    rank = vllm_rank(prefix_caching=True)
    rank.enqueue(vllm_request(1, 32, 1, [7001, 7002]))
    rank.run_pass(0)
    none_left = vllm_request(2, 32, 0, [7001, 7002])
    rank.enqueue(none_left)
    assert rank.run_pass(1).admitted == [(none_left, 32)]


def _preempted(length: int, generated: int):
    r = vllm_request(1, length - generated, generated + 5)
    r.generated, r.preempted = generated, True
    return r


def test_a_preempted_request_is_rejected_only_past_the_whole_pool():
    rank = vllm_rank(num_blocks=2)
    fits, past = _preempted(32, 4), _preempted(33, 4)
    assert not rank.policy.must_reject(fits), "32 tokens: exactly the 2 blocks"
    assert rank.policy.must_reject(past) and "need 3 KV blocks" in past.reject_reason


def test_shared_active_blocks_count_once_in_the_fit():
    rank = vllm_rank(num_blocks=4, prefix_caching=True)
    a = vllm_request(1, 32, 5, [7001, 7002])
    rank.enqueue(a)
    rank.run_pass(0)
    rank.run_pass(1)
    assert rank.pool.active_blocks == 3
    b = vllm_request(2, 48, 2, [7001, 7002, 7003])
    rank.enqueue(b)
    assert rank.run_pass(2).admitted == [(b, 32)], "b needs 1 block of its own: 3 + 1 = 4"


# -- the key memo: at most `wanted` blocks, whole runs only ---------------------------------------

def _memo_with_two_runs():
    runs = [(1, 64), (2, 64), (3, 64)]  # 4 blocks of 16 per run
    memo = KeyMemo(1000)
    chain_keys(runs[:2], 16, 8, memo=memo)  # one edge: runs 1-2, 8 keys
    return memo, runs, chain_keys(runs, 16, 12, memo=None)


@pytest.mark.parametrize(("wanted", "covered", "blocks"), [(7, 1, 4), (8, 2, 8), (9, 2, 8), (4, 1, 4), (3, 0, 0)])
def test_the_memo_covers_whole_runs_up_to_the_wanted_blocks(wanted, covered, blocks):
    memo, runs, fresh = _memo_with_two_runs()
    keys: list[int] = []
    assert memo.prefix(runs, 16, wanted, keys)[0] == covered
    assert keys == fresh[:blocks]


def test_a_chain_continued_from_an_edge_ending_at_the_wanted_blocks_is_recorded_after_it():
    """A prefix that takes an edge whole (8 = wanted) goes on from the edge's end: adding the
    rest there keeps the edge intact, and a longer chain then finds all 12 keys."""
    memo, runs, fresh = _memo_with_two_runs()
    keys: list[int] = []
    covered, where = memo.prefix(runs, 16, 8, keys)
    memo.add(where, runs[covered:], fresh[8:])
    again: list[int] = []
    assert memo.prefix(runs, 16, 12, again)[0] == 3 and again == fresh
    assert memo.size == 12


@pytest.mark.parametrize("wanted", [8, 12])
def test_chains_through_the_memo_equal_fresh_ones_at_an_edge_end(wanted):
    memo, runs, fresh = _memo_with_two_runs()
    assert chain_keys(runs, 16, wanted, memo=memo) == fresh[:wanted]
    assert chain_keys(runs, 16, 12, memo=memo) == fresh
