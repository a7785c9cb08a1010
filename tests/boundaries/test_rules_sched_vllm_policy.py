"""vLLM admission rules at their edges (`engine.vllm.policy`): the pool-limit rejection counts
a hybrid model's state blocks, a preempted request is rejected only past the whole pool (with
speculative decoding: its tokens plus one full burst, within the output it has left), the fit
test counts state blocks and the blocks it shares with running requests once, and a cache hit
recomputes the last block while tokens remain to be generated."""

from __future__ import annotations

import pytest

from engine_helpers import vllm_request
from servesim.engine.cache.kv import BlockPool
from servesim.engine.rank import RankConfig, SpeculativeSettings
from servesim.engine.vllm.policy import VllmPolicy
from servesim.errors import RunError

BS = 16


def policy(**overrides) -> VllmPolicy:
    return VllmPolicy(RankConfig(**{"block_size": BS, "num_blocks": 10, **overrides}))


def preempted(length: int, output: int, generated: int = 0):
    r = vllm_request(1, length, output)
    r.generated = generated
    r.preempted = True
    return r


# -- must_reject: fresh requests -------------------------------------------------------------


@pytest.mark.parametrize("length, rejected", [(8 * BS, False), (8 * BS + 1, True)])
def test_a_fresh_prompt_needs_its_blocks_plus_the_state_blocks(length, rejected):
    """10 blocks, 2 state blocks: 8 token blocks fit exactly, one token more does not."""
    p = policy(state_blocks=2, prefix_caching=False)
    r = vllm_request(1, length, 4)
    assert p.must_reject(r) is rejected
    assert (r.reject_reason is not None) is rejected


def test_a_prebuilt_request_is_never_rejected_for_the_pool():
    p = policy()
    r = vllm_request(1, 20 * BS, 4)
    r.prebuilt = True
    assert p.must_reject(r) is False
    assert r.reject_reason is None


def test_a_prebuilt_request_still_meets_the_context_limit():
    p = policy(max_model_len=100)
    r = vllm_request(1, 100, 4)
    r.prebuilt = True
    assert p.must_reject(r) is True


# -- must_reject: preempted requests ---------------------------------------------------------


@pytest.mark.parametrize("length, rejected", [(10 * BS, False), (10 * BS + 1, True)])
def test_a_preempted_request_fits_while_its_tokens_fill_the_pool(length, rejected):
    """Prompt 100 + generated tokens: exactly 10 blocks is servable."""
    p = policy()
    r = preempted(100, 200, generated=length - 100)
    assert p.must_reject(r) is rejected


@pytest.mark.parametrize("length, rejected", [(8 * BS, False), (8 * BS + 1, True)])
def test_a_preempted_request_counts_the_state_blocks(length, rejected):
    p = policy(state_blocks=2, prefix_caching=False)
    r = preempted(100, 200, generated=length - 100)
    assert p.must_reject(r) is rejected


def spec_policy(nextn: int = 2, **overrides) -> VllmPolicy:
    return policy(speculative=SpeculativeSettings(nextn=nextn, acceptance_rates=(0.5,) * nextn), **overrides)


@pytest.mark.parametrize("length, rejected", [(10 * BS - 3, False), (10 * BS - 2, True)])
def test_a_preempted_request_with_drafts_needs_room_for_one_full_burst(length, rejected):
    """nextn 2: a burst is 3 tokens, so 157 tokens + 3 fill the 160 of the pool, 158 + 3 do not."""
    p = spec_policy()
    r = preempted(100, 1000, generated=length - 100)
    assert p.must_reject(r) is rejected
    if rejected:
        assert "speculative burst" in r.reject_reason and "161 tokens" in r.reject_reason


@pytest.mark.parametrize("left, rejected", [(1, False), (2, False), (3, True)])
def test_the_burst_room_is_cut_to_the_output_left(left, rejected):
    """158 tokens in a 160-token pool: with 1 or 2 output tokens left the room is at most 2."""
    length = 10 * BS - 2
    p = spec_policy()
    r = preempted(100, length - 100 + left, generated=length - 100)
    assert p.must_reject(r) is rejected


@pytest.mark.parametrize("length, rejected", [(10 * BS - 3, False), (10 * BS - 2, True)])
def test_the_burst_room_is_cut_to_the_context_limit(length, rejected):
    """max_model_len 170: a request 1 token from it has a burst of 1 only."""
    p = spec_policy(max_model_len=length + 1)
    r = preempted(100, 1000, generated=length - 100)
    # the burst is min(3, 1) = 1: the tokens (length + 1) fit 160 unless length = 160
    assert p.must_reject(r) is False
    p = spec_policy(max_model_len=length + 10)
    r = preempted(100, 1000, generated=length - 100)
    assert p.must_reject(r) is rejected


@pytest.mark.parametrize("length, rejected", [(8 * BS - 3, False), (8 * BS - 2, True)])
def test_a_preempted_request_with_drafts_counts_the_state_blocks(length, rejected):
    p = spec_policy(state_blocks=2, prefix_caching=False)
    r = preempted(100, 1000, generated=length - 100)
    assert p.must_reject(r) is rejected


def test_without_rejection_a_burst_that_cannot_fit_fails_the_run():
    p = spec_policy(reject_unservable=False)
    r = preempted(100, 1000, generated=10 * BS - 2 - 100)
    with pytest.raises(RunError, match="never complete"):
        p.must_reject(r)


def test_without_rejection_a_request_past_the_pool_waits():
    """No drafts: the reference stalls (the request is kept, not rejected) and no error yet."""
    p = policy(reject_unservable=False)
    r = preempted(100, 1000, generated=10 * BS + 1 - 100)
    assert p.must_reject(r) is False
    assert r.reject_reason is None


def test_without_rejection_drafts_that_fit_without_their_burst_fail_too():
    """Exactly the pool in tokens but no room for the burst: the reference readmits for ever."""
    p = spec_policy(reject_unservable=False)
    r = preempted(100, 1000, generated=10 * BS - 100)
    with pytest.raises(RunError):
        p.must_reject(r)


# -- fits --------------------------------------------------------------------------------------


@pytest.mark.parametrize("active, fits", [(2, True), (3, False)])
def test_the_fit_counts_state_blocks_next_to_the_active_ones(active, fits):
    """10 blocks, a 5-block prompt + 3 state blocks = 8: fits next to 2 active blocks, not 3."""
    p = policy(state_blocks=3, prefix_caching=False)
    pool = BlockPool(10, caching=False)
    assert pool.allocate(active)
    r = vllm_request(1, 5 * BS, 4)
    assert p.fits(r, [], pool, {}) is fits


@pytest.mark.parametrize("length, fits", [(8 * BS, True), (8 * BS + 1, False)])
def test_the_fit_rounds_a_partial_block_up(length, fits):
    p = policy()
    pool = BlockPool(10, caching=False)
    assert pool.allocate(2)
    assert p.fits(vllm_request(1, length, 4), [], pool, {}) is fits


# -- cache_limit and victim --------------------------------------------------------------------


@pytest.mark.parametrize("length, generated, output, limit", [
    (64, 0, 4, 3), (65, 0, 4, 4), (64, 4, 4, 4), (63, 4, 4, 3), (80, 3, 4, 4)])
def test_a_cache_hit_leaves_the_last_token_to_compute_while_output_remains(length, generated, output, limit):
    p = policy()
    r = vllm_request(1, length - generated, output)
    r.generated = generated
    assert p.cache_limit(r) == limit


def test_the_victim_is_the_last_running_request_or_the_first_with_fifo():
    a, b, c = (vllm_request(i, 10, 2) for i in (1, 2, 3))
    running = dict.fromkeys([a, b, c])
    assert policy().victim(running) is c
    assert policy(preempt_first=True).victim(running) is a
    assert policy().victim({}) is None
