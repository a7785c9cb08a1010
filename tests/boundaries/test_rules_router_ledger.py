"""Router rules beyond the cost formula (placement/base.py, routers.py, round_robin.py, factory.py):
the active-worker list stays sorted and a drain removes exactly its worker, bulk placement equals
one-by-one placement, the KV router's ledger (prefill charged only for uncached tokens, shared
blocks reference-counted, private blocks counted, everything released at the terminal state), the
indexer's leading-prefix overlap, the decode-block cost's switches, softmax ties, session
affinity, and the factory's decode/flat settings."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servesim.placement.base import Placement, Router, RouteRequest
from servesim.placement.factory import RouterSpec, make_router
from servesim.placement.round_robin import FlatRoundRobin, RoundRobin
from servesim.placement.routers import (
    KvRouter,
    KvRouterSettings,
    LeastLoaded,
    RandomRouter,
    SessionAffinity,
    _Prefill,
    _SlotLoad,
)

B = 16


def _req(rid: int, keys: list[int], private: int = 0, prompt: int | None = None, session: str = "s") -> RouteRequest:
    return RouteRequest(rid, session, prompt if prompt is not None else B * (len(keys) + private), list(keys), private)


def _kv(workers: int = 2, ranks: int = 1, seed: int = 0, **knobs) -> KvRouter:
    router = KvRouter(ranks, KvRouterSettings(block_size=B, **knobs), seed)
    for w in range(workers):
        router.worker_added(w)
    return router


# -- the active workers ----------------------------------------------------------------------

def test_workers_stay_sorted_when_a_lower_id_joins_late():
    router = LeastLoaded(1)
    for w in (0, 2, 5, 1, 3):
        router.worker_added(w)
    assert router.workers == [0, 1, 2, 3, 5]
    router.worker_added(6)
    assert router.workers[-1] == 6


def test_draining_removes_exactly_its_worker():
    router = LeastLoaded(2)
    for w in (0, 1, 3):
        router.worker_added(w)
    router.worker_draining(2)
    assert router.workers == [0, 1, 3], "an id not present removes nothing (not its neighbour)"
    router.worker_draining(4)
    assert router.workers == [0, 1, 3], "an id past the end removes nothing"
    router.worker_draining(1)
    assert router.workers == [0, 3]
    assert router.slots() == [(0, 0), (0, 1), (3, 0), (3, 1)]
    router.worker_draining(0)
    router.worker_draining(3)
    assert router.workers == []


def test_the_routers_defaults():
    assert Placement(3, 1) == (3, 1, 0), "no overlap credited unless said"
    assert [LeastLoaded(1).rng.random() for _ in range(3)] == [LeastLoaded(1, 0).rng.random() for _ in range(3)]
    assert not LeastLoaded.state_free and not KvRouter.state_free and not Router.state_free
    assert not LeastLoaded.wants_kv_events and not RandomRouter.wants_kv_events and not RoundRobin.wants_kv_events
    assert KvRouter.wants_kv_events
    assert not Router.wants_kv_events


def test_in_flight_counts_a_placement_until_its_terminal_state():
    router = LeastLoaded(1)
    for w in range(2):
        router.worker_added(w)
    slot = (router.place(_req(1, []), 0.0).worker, 0)
    assert router.in_flight[slot] == 1
    router.on_terminal(1, 1.0)
    assert router.in_flight[slot] == 0
    router.on_terminal(1, 2.0)
    assert router.in_flight[slot] == 0, "a second terminal state of one request changes nothing"


def test_state_free_routers_place_without_overlap_and_keep_no_counts():
    for router in (RandomRouter(1, 3), RoundRobin(1), FlatRoundRobin(1)):
        for w in range(3):
            router.worker_added(w)
        placements = [router.place(_req(i, [1, 2]), 0.0) for i in range(6)]
        assert all(p.overlap_tokens == 0 and p.rank == 0 for p in placements)
        assert set(router.in_flight.values()) == {0}
        assert router.state_free


@pytest.mark.parametrize("cls", [RandomRouter, RoundRobin])
def test_bulk_placement_needs_one_rank_and_a_worker(cls):
    def make(ranks: int, workers: int) -> Router:
        router = cls(ranks, 0) if cls is RandomRouter else cls(ranks)
        for w in range(workers):
            router.worker_added(w)
        return router

    assert make(1, 1).places_in_bulk and make(1, 3).places_in_bulk
    assert not make(2, 3).places_in_bulk and not make(1, 0).places_in_bulk


@settings(max_examples=40, deadline=None)
@given(size=st.integers(1, 5), before=st.integers(0, 7), counts=st.lists(st.integers(0, 9), max_size=4))
def test_round_robin_in_bulk_equals_one_by_one(size, before, counts):
    one, bulk = RoundRobin(1), RoundRobin(1)
    for router in (one, bulk):
        for w in range(size):
            router.worker_added(w)
        for i in range(before):
            router.place(_req(i, []), 0.0)
    for count in counts:
        assert bulk.place_many(count) == [one.place(_req(i, []), 0.0).worker for i in range(count)]
    assert bulk.place(_req(99, []), 0.0) == one.place(_req(99, []), 0.0), "the rotation resumes alike"


@pytest.mark.parametrize("count", [0, 1, 5])
def test_random_in_bulk_equals_one_by_one(count):
    one, bulk = RandomRouter(1, 11), RandomRouter(1, 11)
    for router in (one, bulk):
        for w in range(4):
            router.worker_added(w)
    assert bulk.place_many(count) == [one.place(_req(i, []), 0.0).worker for i in range(count)]
    assert bulk.place(_req(99, []), 0.0) == one.place(_req(99, []), 0.0)


def test_random_router_reaches_every_rank():
    router = RandomRouter(2, 5)
    for w in range(2):
        router.worker_added(w)
    assert {(p.worker, p.rank) for p in (router.place(_req(i, []), 0.0) for i in range(60))} == \
        {(0, 0), (0, 1), (1, 0), (1, 1)}


def test_round_robin_keeps_its_index_over_the_shrunk_list_and_each_workers_rank():
    rr = RoundRobin(2)
    for w in range(3):
        rr.worker_added(w)
    assert [rr.place(_req(i, []), 0.0).worker for i in range(2)] == [0, 1]
    rr.worker_draining(1)
    # next index 2 wraps to 0 over [0, 2]; worker 0 resumes at its second rank
    assert [(p.worker, p.rank) for p in (rr.place(_req(i, []), 0.0) for i in range(4))] == \
        [(0, 1), (2, 0), (0, 0), (2, 1)]


# -- the KV router's indexer and ledger ------------------------------------------------------

def test_overlap_counts_leading_blocks_only():
    router = _kv(3)
    router.on_kv_events((0, 0), [("stored", k) for k in (1, 2, 3)], 0.0)
    router.on_kv_events((1, 0), [("stored", k) for k in (1, 3)], 0.0)
    router.on_kv_events((2, 0), [("stored", k) for k in (2, 3)], 0.0)
    assert router.overlaps([1, 2, 3]) == {(0, 0): 3, (1, 0): 1}, "a rank without the first block is absent"
    assert router.overlaps([]) == {}
    assert router.overlaps([1]) == {(0, 0): 1, (1, 0): 1}


def test_removing_a_block_one_rank_holds_keeps_the_others():
    router = _kv(2)
    router.on_kv_events((0, 0), [("stored", 5)], 0.0)
    router.on_kv_events((1, 0), [("stored", 5)], 0.0)
    router.on_kv_events((0, 0), [("removed", 5), ("removed", 77)], 1.0)
    assert router.cached == {5: {(1, 0)}}
    router.on_kv_events((1, 0), [("removed", 5)], 2.0)
    assert router.cached == {}


def test_prefill_is_charged_for_uncached_tokens_only():
    router = _kv(1)
    router._commit((0, 0), _req(1, [1, 2, 3], prompt=50), 32, 0.0)
    assert router.load[(0, 0)].prefills[1].tokens == 18
    router._commit((0, 0), _req(2, [1, 2, 3], prompt=48), 48, 0.0)
    assert 2 not in router.load[(0, 0)].prefills, "a fully cached prompt has no prefill to charge"
    router._commit((0, 0), _req(3, [1, 2, 3], prompt=47), 64, 0.0)
    assert 3 not in router.load[(0, 0)].prefills, "an overlap past the prompt charges nothing, not less"
    router._commit((0, 0), _req(4, [], prompt=1), 0, 0.0)
    assert router.load[(0, 0)].prefills[4].tokens == 1


def test_prefill_duration_is_asked_for_the_prompt_and_its_cached_part():
    asked = []

    def duration(isl: int, cached: int) -> float:
        asked.append((isl, cached))
        return 7.0

    router = _kv(1, prefill_duration=duration)
    router._commit((0, 0), _req(1, [1, 2], prompt=40), 16, 3.0)
    entry = router.load[(0, 0)].prefills[1]
    assert asked == [(40, 16)] and (entry.tokens, entry.start, entry.duration) == (24, 3.0, 7.0)


def test_shared_blocks_are_reference_counted_and_private_blocks_summed():
    router = _kv(1, track_prefill=False)
    load = router.load[(0, 0)]
    router._commit((0, 0), _req(1, [1, 2], private=1), 0, 0.0)
    router._commit((0, 0), _req(2, [1, 3], private=2), 0, 0.0)
    assert load.blocks == {1: 2, 2: 1, 3: 1} and load.private_blocks == 3 and load.requests == 2
    router.on_terminal(1, 1.0)
    assert load.blocks == {1: 1, 3: 1} and load.private_blocks == 2 and load.requests == 1
    router.on_terminal(2, 2.0)
    assert load.blocks == {} and load.private_blocks == 0 and load.requests == 0
    router.on_terminal(2, 3.0)
    assert load.requests == 0, "an unknown request changes nothing"


def test_without_assumed_reuse_every_block_is_private():
    router = _kv(1, track_prefill=False, assume_reuse=False)
    load = router.load[(0, 0)]
    router._commit((0, 0), _req(1, [1, 2], private=1), 0, 0.0)
    assert load.blocks == {} and load.private_blocks == 3
    assert router.costs(_req(2, [1, 2, 3]), 0.0)[(0, 0)] == (3 + 3, 0), "3 active + 3 new, none shared"
    router.on_terminal(1, 1.0)
    assert load.private_blocks == 0


def test_the_decode_block_cost_counts_the_requests_private_blocks():
    router = _kv(1, track_prefill=False)
    router._commit((0, 0), _req(1, [1, 2], private=2), 0, 0.0)
    assert router.costs(_req(2, [1, 2, 3], private=4), 0.0)[(0, 0)][0] == (2 + 2) + 1 + 4


def test_untracked_blocks_cost_nothing_and_are_not_kept():
    router = _kv(1, track_prefill=False, track_blocks=False)
    router._commit((0, 0), _req(1, [1, 2], private=2), 0, 0.0)
    load = router.load[(0, 0)]
    assert load.blocks == {} and load.private_blocks == 0 and load.requests == 1
    assert router.costs(_req(2, [1, 2, 3], private=4), 0.0)[(0, 0)] == (0.0, 0)
    router.on_terminal(1, 1.0)
    assert load.private_blocks == 0 and load.requests == 0


def test_untracked_prefill_keeps_no_prefill_and_charges_no_tokens():
    router = _kv(2, track_prefill=False, track_blocks=False, credit_decay=3.0)
    router._commit((0, 0), _req(1, [1, 2]), 0, 0.0)
    assert router.load[(0, 0)].prefills == {}
    router.on_kv_events((1, 0), [("stored", 1)], 0.0)
    costs = router.costs(_req(2, [1, 2]), 0.0)
    assert costs == {(0, 0): (0.0, 0), (1, 0): (0.0, 1)}


def test_the_request_weight_charges_requests_in_flight():
    router = _kv(2, track_prefill=False, track_blocks=False, request_weight=2.5)
    router._commit((0, 0), _req(1, []), 0, 0.0)
    router._commit((0, 0), _req(2, []), 0, 0.0)
    costs = router.costs(_req(3, []), 0.0)
    assert costs[(0, 0)][0] == 5.0 and costs[(1, 0)][0] == 0.0


def test_the_prefill_scale_multiplies_only_the_prefill_term():
    router = _kv(1, prefill_scale=3.0)
    router._commit((0, 0), _req(1, [1], private=1), 0, 0.0)
    # prefill: (32 charged + 32 new) / 16 = 4 blocks, x3; decode blocks: 2 active + 2 new
    assert router.costs(_req(2, [7, 8]), 0.0)[(0, 0)][0] == 3.0 * 4 + 4


def test_first_token_ends_the_prefill_charge_only():
    router = _kv(1)
    router._commit((0, 0), _req(1, [1, 2]), 0, 0.0)
    router.on_first_token(1, 1.0)
    load = router.load[(0, 0)]
    assert load.prefills == {} and load.blocks == {1: 1, 2: 1} and load.requests == 1
    router.on_first_token(42, 1.0)


def test_a_placement_reports_the_overlap_in_tokens():
    router = _kv(2)
    router.on_kv_events((1, 0), [("stored", k) for k in (1, 2, 3)], 0.0)
    placement = router.place(_req(1, [1, 2, 3, 4]), 0.0)
    assert placement == (1, 0, 3 * B)


# -- selection -------------------------------------------------------------------------------

def test_equal_costs_under_a_temperature_are_chosen_uniformly():
    chosen = {_kv(3, seed=s, temperature=2.0)._select({(w, 0): (4.0, 0) for w in range(3)}) for s in range(30)}
    assert chosen == {(0, 0), (1, 0), (2, 0)}


def test_a_negative_temperature_takes_the_argmin():
    for seed in range(10):
        router = _kv(3, seed=seed, temperature=-1.0)
        assert router._select({(0, 0): (2.0, 0), (1, 0): (1.0, 0), (2, 0): (3.0, 0)}) == (1, 0)


def test_softmax_prefers_the_cheaper_rank():
    router = _kv(2, seed=3, temperature=0.25)
    draws = [router._select({(0, 0): (10.0, 0), (1, 0): (2.0, 0)}) for _ in range(400)]
    assert draws.count((1, 0)) > 0.9 * len(draws)


# -- session affinity ------------------------------------------------------------------------

def test_affinity_credits_the_bound_ranks_overlap():
    inner = _kv(2)
    router = SessionAffinity(inner)
    first = router.place(_req(1, [1, 2], session="A"), 0.0)
    inner.on_kv_events((first.worker, 0), [("stored", 1), ("stored", 2)], 1.0)
    inner.on_kv_events((1 - first.worker, 0), [("stored", k) for k in (1, 2, 3)], 1.0)
    later = router.place(_req(2, [1, 2, 3], session="A"), 2.0)
    assert later == (first.worker, 0, 2 * B), "the bound rank, with its own overlap"
    assert inner.load[(first.worker, 0)].requests == 2
    router.on_terminal(1, 3.0)
    router.on_terminal(2, 3.0)
    assert inner.load[(first.worker, 0)].requests == 0


def test_affinity_releases_a_session_when_its_worker_drains():
    inner = RoundRobin(1)
    router = SessionAffinity(inner)
    router.worker_added(0)
    router.worker_added(1)
    assert router.place(_req(1, [], session="A"), 0.0).worker == 0
    assert router.place(_req(2, [], session="B"), 0.0).worker == 1
    router.worker_draining(0)
    assert router.place(_req(3, [], session="A"), 1.0).worker == 1
    assert router.place(_req(4, [], session="A"), 2.0).worker == 1, "rebound to its new worker"
    assert router.state_free and not router.wants_kv_events


# -- the factory -----------------------------------------------------------------------------

def _made(policy: str, **kw) -> KvRouter:
    router = make_router(RouterSpec(policy=policy, timed_prefill=True), ranks=1, workers=2, block_size=B,
                         prefill_time=lambda b, isl, cached: float(isl - cached), **kw)
    assert isinstance(router, KvRouter) and router.workers == [0, 1]
    return router


def test_the_decode_pools_kv_router_is_overlap_blind_and_untimed():
    s = _made("kv_router", flat=True, decode=True).settings
    assert (s.overlap_credit, s.track_prefill, s.track_blocks, s.assume_reuse, s.prefill_duration) == \
        (0.0, False, True, False, None)


def test_a_flat_prefill_pools_kv_router_tracks_no_blocks():
    s = _made("kv_router", flat=True).settings
    assert (s.track_prefill, s.track_blocks, s.assume_reuse) == (True, False, True)
    assert s.prefill_duration is not None
    assert s.prefill_duration(40, 16) == 24.0 and s.prefill_duration(40, 40) == 0.0


def test_an_aggregated_kv_router_tracks_everything():
    s = _made("kv_router").settings
    assert (s.overlap_credit, s.track_prefill, s.track_blocks, s.assume_reuse) == (1.0, True, True, True)


def test_the_factorys_policies():
    def made(**kw) -> Router:
        return make_router(RouterSpec(**kw), ranks=2, workers=3, block_size=B, prefill_time=lambda *a: 0.0)

    assert type(made()) is RoundRobin and made().workers == [0, 1, 2]
    assert type(make_router(RouterSpec(), ranks=2, workers=1, block_size=B, prefill_time=lambda *a: 0.0,
                            flat=True)) is FlatRoundRobin
    assert type(made(policy="random")) is RandomRouter and type(made(policy="least_loaded")) is LeastLoaded
    affine = made(policy="least_loaded", session_affinity=True)
    assert isinstance(affine, SessionAffinity) and type(affine.inner) is LeastLoaded
    untimed = made(policy="kv_router")
    assert isinstance(untimed, KvRouter) and untimed.settings.prefill_duration is None


# -- survivors of the sweep: offsets, small values and defaults ------------------------------

def test_prefill_ages_from_the_oldest_start_not_from_zero():
    load = _SlotLoad()
    load.prefills[1] = _Prefill(64, 100.0, 10.0)
    assert load.prefill_tokens(100.0) == 64.0
    assert load.prefill_tokens(105.0) == pytest.approx(32.0)
    assert load.prefill_tokens(110.0) == 0.0


def test_a_prefill_shorter_than_a_millisecond_still_ages_linearly():
    load = _SlotLoad()
    load.prefills[1] = _Prefill(64, 0.0, 0.5)
    assert load.prefill_tokens(0.0) == 64.0
    assert load.prefill_tokens(0.25) == pytest.approx(32.0)


def test_the_credit_decay_of_a_one_block_prompt_divides_by_one():
    router = _kv(2, track_blocks=False, credit_decay=1.0)
    router.load[(0, 0)].prefills[7] = _Prefill(32, 0.0, None)
    for w in range(2):
        router.on_kv_events((w, 0), [("stored", 5)], 0.0)
    costs = router.costs(_req(1, [5], prompt=16), 0.0)
    # rank 0 charges 2 blocks more than the least loaded: decay 1 / (1 + 2 / 1) = 1/3
    assert costs[(0, 0)][0] == pytest.approx((32 + 16) / B - 1 / 3)
    assert costs[(1, 0)][0] == pytest.approx(16 / B - 1)
    short = router.costs(_req(2, [5], prompt=1), 0.0)
    assert short[(0, 0)][0] == pytest.approx(max(0.0, (32 + 1) / B - 1 / 3)), "a partial block counts as one"


def test_more_defaults_the_sweep_found_unpinned():
    assert KvRouter(1, KvRouterSettings(block_size=B)).rng.random() == KvRouter(1, KvRouterSettings(B), 0).rng.random()
    s = KvRouterSettings(block_size=B)
    assert (s.overlap_credit, s.prefill_scale, s.temperature, s.credit_decay, s.request_weight) == (1.0, 1.0, 0.0, 0.0, 0.0)
    assert (s.track_prefill, s.track_blocks, s.assume_reuse, s.prefill_duration) == (True, True, True, None)
    assert not FlatRoundRobin(1).places_in_bulk
    least = LeastLoaded(1)
    least.worker_added(0)
    assert least.place(_req(1, [1]), 0.0) == (0, 0, 0)


def test_an_affine_later_turn_is_credited_only_what_its_rank_holds():
    plain = SessionAffinity(_kv(2, track_blocks=False))
    first = plain.place(_req(1, [1, 2], session="A"), 0.0)
    assert plain.place(_req(2, [1, 2], session="A"), 1.0) == (first.worker, 0, 0), "nothing cached yet"
    least = SessionAffinity(LeastLoaded(1))
    least.worker_added(0)
    least.place(_req(1, [1], session="B"), 0.0)
    assert least.place(_req(2, [1], session="B"), 1.0) == (0, 0, 0)


def test_round_robin_cycles_three_ranks_forward():
    rr = RoundRobin(3)
    rr.worker_added(0)
    assert [rr.place(_req(i, []), 0.0).rank for i in range(7)] == [0, 1, 2, 0, 1, 2, 0]
