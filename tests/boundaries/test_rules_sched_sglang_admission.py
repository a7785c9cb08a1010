"""SGLang's queue order and unservable test at their edges (`engine.sglang.admission`).

LPM: the longest radix match of a request's *full pages* goes first (stable); a request with at
most 32 tokens cached whose first 32 tokens (in whole pages) repeat an earlier such request's
goes last — a prompt shorter than that span never does; the queue is left alone above 128
waiting requests, below 2 and without caching. Never admissible: the next chunk (the whole rest
when at most `chunked_prefill_size`, else that size floored to pages), in whole pages, plus the
output reserve (min(remaining output, clip), only when the chunk completes the prompt) must be
strictly below the pool minus the pages already held, and within both prefill budgets."""

from __future__ import annotations

from collections import deque

import pytest

from engine_helpers import sglang_rank, sglang_request
from servesim.engine.cache.radix import RadixCache
from servesim.engine.cache.token_seq import TokenSeq
from servesim.engine.rank import SglangSettings
from servesim.engine.request import EngineRequest
from servesim.engine.sglang.admission import LPM_MAX_WAITING, lpm_order, never_admissible

assert LPM_MAX_WAITING == 128
from servesim.engine.sglang.kv import SgRequest
from servesim.traffic.workload import GENERATED_BASE


def request(rid: int, runs: list[tuple[int, int]], output: int = 4) -> SgRequest:
    n = sum(abs(c) for _, c in runs)
    return SgRequest(EngineRequest(rid, runs, n, output, GENERATED_BASE + 100_000 * rid))


def cached(cache: RadixCache, runs: list[tuple[int, int]]) -> None:
    """Put the full pages of `runs` into the tree the way a finished request does."""
    s = TokenSeq(runs)
    end = s.length - s.length % cache.page
    matched, node = cache.match_lock(s, end)
    assert cache.reserve((end - matched) // cache.page)
    _, new = cache.insert(node, s, matched, end)
    cache.give_back((end - matched - new) // cache.page)
    cache.dec_lock(node)


def order(waiting: list[SgRequest], cache: RadixCache) -> list[int]:
    return [r.req.rid for r in lpm_order(deque(waiting), cache)]


# -- LPM order ---------------------------------------------------------------------------------


def test_the_longest_match_goes_first_and_ties_keep_their_order():
    cache = RadixCache(1000, 1)
    cached(cache, [(1000, -100)])
    waiting = [request(1, [(5000, -50)]), request(2, [(1000, -40), (7000, -5)]),
               request(3, [(1000, -80), (8000, -5)]), request(4, [(6000, -50)])]
    assert order(waiting, cache) == [3, 2, 1, 4]


def test_the_match_counts_only_full_pages():
    """Page 16, 48 tokens cached: a 47-token prompt sharing 40 of them matches 32 (two full
    pages), a 49-token one sharing all 48 matches 48 and goes first."""
    cache = RadixCache(1000, 16)
    cached(cache, [(1000, -48)])
    short = request(1, [(1000, -40), (9000, -7)])
    long_ = request(2, [(1000, -48), (9100, -1)])
    assert order([short, long_], cache) == [2, 1]


def test_the_match_never_reaches_into_the_output_to_come():
    """Page 16: the tree holds a 40-token prompt and 24 tokens of the output its request will
    generate. The request matches its two full prompt pages (32, so its first span counts as
    a repeat of the earlier request's and it goes last), not the 48 its sequence would give."""
    cache = RadixCache(1000, 16)
    again = request(2, [(1000, -40)])
    cached(cache, [(1000, -40), (GENERATED_BASE + 200_000, -24)])
    first = request(1, [(1000, -40), (2000, -8)])
    assert order([first, again], cache) == [1, 2]
    assert order([again, first], cache) == [2, 1]


def test_the_first_span_compares_every_token_from_the_first():
    """Prompts equal but in their first token are no repeats."""
    cache = RadixCache(1000, 1)
    a = request(1, [(5, 1), (1001, -39)])
    b = request(2, [(6, 1), (1001, -39)])
    c = request(3, [(9000, -40)])
    assert order([a, b, c], cache) == [1, 2, 3]


def test_a_repeated_first_span_goes_last_with_at_most_32_cached():
    cache = RadixCache(1000, 1)
    cached(cache, [(1000, -32)])
    head = [(1000, -32)]
    a, b = request(1, head + [(2000, -10)]), request(2, head + [(3000, -10)])
    other = request(3, [(4000, -42)])
    # a and b match exactly 32 (= LPM_PREFIX): b repeats a's first 32 tokens and goes last
    assert order([a, b, other], cache) == [1, 3, 2]


def test_more_than_32_cached_never_goes_last():
    cache = RadixCache(1000, 1)
    cached(cache, [(1000, -33)])
    head = [(1000, -33)]
    a, b = request(1, head + [(2000, -10)]), request(2, head + [(3000, -10)])
    other = request(3, [(4000, -43)])
    assert order([a, b, other], cache) == [1, 2, 3]


@pytest.mark.parametrize("length, late", [(31, False), (32, True)])
def test_a_prompt_shorter_than_the_span_is_never_late(length, late):
    """Nothing cached; two prompts with the same first tokens, the second of `length` tokens."""
    cache = RadixCache(1000, 1)
    a = request(1, [(1000, -40)])
    b = request(2, [(1000, -length)])
    c = request(3, [(5000, -40)])
    assert order([a, b, c], cache) == ([1, 3, 2] if late else [1, 2, 3])


def test_the_span_is_rounded_up_to_whole_pages():
    """Page 16: the span is 32 tokens; page 20: 40 — prompts equal in their first 32 tokens
    but not in tokens 32..40 are then no repeats."""
    for page, late in ((16, True), (20, False)):
        cache = RadixCache(1000, page)
        a = request(1, [(1000, -32), (2000, -20)])
        b = request(2, [(1000, -32), (3000, -20)])
        c = request(3, [(5000, -52)])
        assert order([a, b, c], cache) == ([1, 3, 2] if late else [1, 2, 3]), page


@pytest.mark.parametrize("count, reordered", [(128, True), (129, False)])
def test_lpm_falls_back_to_fifo_above_128_waiting(count, reordered):
    cache = RadixCache(100_000, 1)
    cached(cache, [(1000, -64)])
    waiting = [request(i, [(10_000 * i, -40)]) for i in range(1, count)]
    waiting.append(request(count, [(1000, -64), (9, -1)]))
    ids = order(waiting, cache)
    assert ids[0] == (count if reordered else 1)


def test_lpm_leaves_the_queue_alone_without_caching():
    cache = RadixCache(1000, 1, caching=False)
    waiting = [request(1, [(5000, -50)]), request(2, [(5000, -50)]), request(3, [(6000, -50)])]
    assert order(waiting, cache) == [1, 2, 3]


def test_two_waiting_requests_are_reordered():
    cache = RadixCache(1000, 1)
    cached(cache, [(1000, -64)])
    assert order([request(1, [(5000, -50)]), request(2, [(1000, -64), (9, -1)])], cache) == [2, 1]


# -- never admissible --------------------------------------------------------------------------

PAGE, TOTAL = 16, 160


def verdict(prompt: int, output: int, *, clip: int = 4096, pages: int = 0, materialized: int = 0,
            **knobs) -> str | None:
    r = request(1, [(1000, -prompt)], output)
    r.pages, r.materialized = pages, materialized
    return never_admissible(r, SglangSettings(**knobs), PAGE, clip, TOTAL)


@pytest.mark.parametrize("output, ok", [(47, True), (48, False)])
def test_the_chunk_in_whole_pages_plus_the_output_must_be_below_the_pool(output, ok):
    """100 prompt tokens are charged 112; 112 + 47 < 160, 112 + 48 is not."""
    assert (verdict(100, output) is None) is ok


@pytest.mark.parametrize("clip, ok", [(47, True), (48, False)])
def test_the_output_reserve_is_clipped(clip, ok):
    assert (verdict(100, 1000, clip=clip) is None) is ok


@pytest.mark.parametrize("pages, output, ok", [(2, 15, True), (2, 16, False), (3, 1, False)])
def test_the_pages_already_held_leave_the_room(pages, output, ok):
    """Holding 2 pages (32 tokens), the room is 128: 112 + 15 fits, 112 + 16 does not."""
    assert (verdict(100, output, pages=pages) is None) is ok


def test_a_chunk_that_does_not_complete_the_prompt_reserves_no_output():
    """300 tokens, chunk size 64: the chunk is 64 tokens and reserves nothing however long the output."""
    assert verdict(300, 10_000, chunked_prefill_size=64) is None


def test_a_partial_chunk_reserves_not_even_one_output_token():
    """Page 1, a 65-token pool, chunk size 64 of a 300-token prompt: 64 + 0 < 65."""
    r = request(1, [(1000, -300)], 50)
    assert never_admissible(r, SglangSettings(chunked_prefill_size=64), 1, 4096, 65) is None
    assert never_admissible(r, SglangSettings(chunked_prefill_size=64), 1, 4096, 64) is not None


def test_a_long_prompt_chunk_is_floored_to_pages():
    """Chunk size 70, page 16: the chunk is 64 (not 70 rounded up to 80): within the 70."""
    assert verdict(300, 4, chunked_prefill_size=70) is None


@pytest.mark.parametrize("size, ok", [(100, False), (111, False), (112, True)])
def test_a_whole_prompt_chunk_in_pages_must_fit_the_chunk_size(size, ok):
    """A 100-token rest is one chunk when the size is ≥ 100, charged 112 pages' tokens."""
    assert (verdict(100, 4, chunked_prefill_size=size) is None) is ok


@pytest.mark.parametrize("size, ok", [(111, False), (112, True)])
def test_the_chunk_must_fit_max_prefill_tokens(size, ok):
    assert (verdict(100, 4, max_prefill_tokens=size) is None) is ok


@pytest.mark.parametrize("size, ok", [(15, False), (16, True)])
def test_a_chunk_size_below_one_page_is_never_admissible(size, ok):
    reason = verdict(100, 4, chunked_prefill_size=size)
    assert (reason is None) is ok
    if not ok:
        assert "smaller than one page" in reason


def test_the_rest_after_materialized_tokens_is_the_chunk():
    """60 of 160 prompt tokens are in: the rest (100) completes the prompt in one chunk."""
    assert verdict(160, 47, materialized=60) is None
    assert verdict(160, 48, materialized=60) is not None


# -- admission on the rank -------------------------------------------------------------------


def test_a_last_chunk_of_one_token_is_admitted():
    """Chunk size 64, a 65-token prompt: 64 tokens, then the last one (and the first output)."""
    rank = sglang_rank(chunked_prefill_size=64)
    r = sglang_request(1, 65, 2)
    rank.enqueue(r)
    first = rank.run_pass(0)
    assert first.scheduled_tokens == 64 and r.generated == 0
    second = rank.run_pass(1)
    assert [x for x, _ in second.admitted] == [r] and second.first_tokens == [r]


def test_a_partial_chunk_is_admitted_into_a_room_one_token_larger():
    """Page 1, 65 pages, chunk size 64: the first chunk of a 300-token prompt reserves no
    output, so 64 + 0 < 65 admits it."""
    rank = sglang_rank(num_blocks=65, chunked_prefill_size=64)
    r = sglang_request(1, 300, 5)
    rank.enqueue(r)
    result = rank.run_pass(0)
    assert result.admitted == [(r, 0)] and result.scheduled_tokens == 64
