"""The vLLM block pool's eviction order (`engine.cache.kv.BlockPool`): free cached blocks are
evicted least recently released first, and of one released request the last block first, so
a prefix keeps its leading blocks longest; a block revived by a hit leaves the LRU."""

from __future__ import annotations

import pytest

from engine_helpers import vllm_rank, vllm_request


def finish(rank, r, at: int) -> int:
    rank.enqueue(r)
    while rank.has_work():
        rank.run_pass(at)
        at += 1
    return at


@pytest.mark.parametrize("fresh_blocks, a_hits, b_hits", [(2, 2, 2), (3, 1, 2), (4, 0, 2), (5, 0, 1)])
def test_eviction_takes_the_oldest_release_and_its_last_block_first(fresh_blocks, a_hits, b_hits):
    """6 blocks: a's two blocks are released before b's; a private prompt of k blocks then
    takes the 2 never-used blocks and evicts k − 2: a's second, a's first, b's second."""
    rank = vllm_rank(prefix_caching=True, num_blocks=6)
    at = finish(rank, vllm_request(1, 32, 1, [1, 2]), 0)
    at = finish(rank, vllm_request(2, 32, 1, [3, 4]), at)
    assert rank.pool.active_blocks == 0
    hog = vllm_request(3, 16 * fresh_blocks, 50)
    rank.enqueue(hog)
    rank.run_pass(at)
    assert rank.pool.active_blocks == fresh_blocks
    keys_a = vllm_request(4, 32, 1, [1, 2]).full_block_keys(2, 16)
    keys_b = vllm_request(5, 32, 1, [3, 4]).full_block_keys(2, 16)
    assert len(rank.pool.prefix_hits(keys_a, 2)) == a_hits
    assert len(rank.pool.prefix_hits(keys_b, 2)) == b_hits


def test_a_hit_revives_its_blocks_out_of_the_lru():
    """a's blocks are reused by a running request: they are active, so the next allocation
    evicts b's blocks although a's were released first."""
    rank = vllm_rank(prefix_caching=True, num_blocks=6)
    at = finish(rank, vllm_request(1, 32, 1, [1, 2]), 0)
    at = finish(rank, vllm_request(2, 32, 1, [3, 4]), at)
    again = vllm_request(3, 40, 50, [1, 2, 9])
    rank.enqueue(again)
    result = rank.run_pass(at)
    assert result.admitted == [(again, 32)] and rank.pool.active_blocks == 3
    hog = vllm_request(4, 48, 50)
    rank.enqueue(hog)
    rank.run_pass(at + 1)
    keys_b = vllm_request(5, 32, 1, [3, 4]).full_block_keys(2, 16)
    assert len(rank.pool.prefix_hits(keys_b, 2)) == 0
    keys_a = vllm_request(6, 32, 1, [1, 2]).full_block_keys(2, 16)
    assert len(rank.pool.prefix_hits(keys_a, 2)) == 2
