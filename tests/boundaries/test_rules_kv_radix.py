"""The radix cache's page rules at their edges (`engine.cache.radix`): a reservation succeeds
with exactly free + evictable pages and fails one page beyond; eviction takes least recently used
unlocked leaves first, cuts a leaf by the ceiling of the pages still wanted (whole pages, never
more than asked when a leaf is longer), frees a whole leaf that is not longer than that, and a
parent left without children becomes a candidate; matching counts whole pages only."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from servesim.engine.cache.radix import RadixCache
from servesim.engine.cache.token_seq import TokenSeq


def seq(first: int, n: int) -> TokenSeq:
    return TokenSeq([(first, -n)])


def cached(cache: RadixCache, s: TokenSeq) -> None:
    """Put the full pages of `s` into the tree unlocked, as a finished request leaves them."""
    end = s.length - s.length % cache.page
    matched, node = cache.match_lock(s, end)
    assert cache.reserve((end - matched) // cache.page)
    _, new = cache.insert(node, s, matched, end)
    cache.give_back((end - matched - new) // cache.page)
    cache.dec_lock(node)


def test_a_reservation_of_exactly_free_plus_evictable_succeeds():
    cache = RadixCache(10, 4)
    cached(cache, seq(1000, 24))  # 6 pages evictable, 4 free
    assert (cache.free_pages, cache.evictable_tokens) == (4, 24)
    assert cache.reserve(10)
    assert (cache.free_pages, cache.evictable_tokens) == (0, 0)


def test_a_reservation_one_page_beyond_fails_and_changes_nothing():
    cache = RadixCache(10, 4)
    cached(cache, seq(1000, 24))
    assert not cache.reserve(11)
    assert (cache.free_pages, cache.evictable_tokens) == (4, 24)
    assert cache.match_len(seq(1000, 24), 24) == 24


def test_a_reservation_within_the_free_pages_evicts_nothing():
    cache = RadixCache(10, 4)
    cached(cache, seq(1000, 24))
    assert cache.reserve(4)
    assert (cache.free_pages, cache.evictable_tokens) == (0, 24)


def test_locked_pages_are_no_room():
    cache = RadixCache(10, 4)
    cached(cache, seq(1000, 24))
    _, node = cache.match_lock(seq(1000, 24), 24)
    assert cache.protected_tokens == 24 and cache.evictable_tokens == 0
    assert cache.reserve(4) and not cache.reserve(1)
    cache.dec_lock(node)
    assert cache.reserve(1)


def test_eviction_cuts_a_longer_leaf_by_the_pages_wanted_rounded_up():
    """Page 4, a 24-token leaf: asking for 5 tokens evicts 2 pages (8 tokens), the tail."""
    cache = RadixCache(10, 4)
    cached(cache, seq(1000, 24))
    assert cache.evict(5) == 8
    assert (cache.free_pages, cache.evictable_tokens) == (6, 16)
    assert cache.match_len(seq(1000, 24), 24) == 16


def test_eviction_of_exactly_a_leaf_frees_it_whole():
    cache = RadixCache(10, 4)
    cached(cache, seq(1000, 8))
    assert cache.evict(8) == 8
    assert cache.match_len(seq(1000, 8), 8) == 0
    assert (cache.free_pages, cache.evictable_tokens) == (10, 0)


def test_eviction_takes_the_least_recently_used_leaf_first():
    cache = RadixCache(20, 4)
    old, new = seq(1000, 8), seq(2000, 8)
    cached(cache, old)
    cached(cache, new)
    assert cache.evict(8) == 8
    assert cache.match_len(old, 8) == 0 and cache.match_len(new, 8) == 8


def test_a_match_refreshes_a_leaf():
    cache = RadixCache(20, 4)
    old, new = seq(1000, 8), seq(2000, 8)
    cached(cache, old)
    cached(cache, new)
    cache.dec_lock(cache.match_lock(old, 8)[1])
    assert cache.evict(8) == 8
    assert cache.match_len(old, 8) == 8 and cache.match_len(new, 8) == 0


def test_a_parent_left_without_children_is_evicted_next():
    """A shared 8-token prefix with two 4-token branches: evicting 12 tokens takes both
    branches and then the prefix (once it is a leaf)."""
    cache = RadixCache(20, 4)
    a = TokenSeq([(1000, -8), (5000, -4)])
    b = TokenSeq([(1000, -8), (6000, -4)])
    cached(cache, a)
    cached(cache, b)
    assert cache.evictable_tokens == 16
    assert cache.evict(12) == 12
    assert cache.evictable_tokens == 4
    assert cache.evict(4) == 4
    assert cache.evictable_tokens == 0 and cache.free_pages == 20


def test_eviction_stops_once_enough_is_evicted():
    cache = RadixCache(20, 4)
    cached(cache, seq(1000, 8))
    cached(cache, seq(2000, 8))
    assert cache.evict(8) == 8 and cache.evictable_tokens == 8
    assert cache.evict(0) == 0 and cache.evictable_tokens == 8


def test_a_match_counts_whole_pages_only():
    cache = RadixCache(20, 4)
    cached(cache, seq(1000, 16))
    partial = TokenSeq([(1000, -10), (9, -6)])  # 10 common tokens: 2 whole pages
    assert cache.match_len(partial, 16) == 8
    assert cache.match_len(seq(1000, 16), 12) == 12
    assert cache.match_len(seq(1000, 16), 16) == 16


@settings(max_examples=40)
@given(st.lists(st.integers(1, 12), min_size=1, max_size=6), st.integers(0, 60), st.sampled_from([1, 2, 4]))
def test_eviction_frees_whole_pages_at_least_as_asked_while_it_can(lengths, ask, page):
    cache = RadixCache(200, page)
    for i, n in enumerate(lengths):
        cached(cache, seq(1000 * (i + 1), n * page))
    before = cache.evictable_tokens
    evicted = cache.evict(ask)
    assert evicted % page == 0
    assert evicted >= min(ask, before)
    assert evicted <= -(-ask // page) * page
    assert cache.evictable_tokens == before - evicted
    assert cache.free_pages * page + cache.evictable_tokens == 200 * page
    cache.check()
