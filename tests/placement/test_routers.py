"""Routing policies: the KV router's indexer, ledger and cost, selection, and the simple policies."""

from __future__ import annotations

import pytest

from servesim.placement.base import RouteRequest
from servesim.placement.round_robin import FlatRoundRobin, RoundRobin
from servesim.placement.routers import KvRouter, KvRouterSettings, LeastLoaded, RandomRouter, SessionAffinity


def _router(cls, workers=4, ranks=1, **kw):
    router = cls(ranks, **kw)
    for w in range(workers):
        router.worker_added(w)
    return router


def _kv(workers=2, **settings) -> KvRouter:
    return _router(KvRouter, workers, settings=KvRouterSettings(block_size=64, **settings))


def _req(rid, keys, private=0, session="s", prompt=None):
    return RouteRequest(rid, session, prompt if prompt is not None else 64 * (len(keys) + private), list(keys), private)


def test_indexer_follows_store_and_remove_events():
    router = _kv(3)
    router.on_kv_events((0, 0), [("stored", k) for k in (1, 2, 3)], 0.0)
    router.on_kv_events((1, 0), [("stored", k) for k in (1, 2)], 0.0)
    assert router.overlaps([1, 2, 3, 4]) == {(0, 0): 3, (1, 0): 2}
    router.on_kv_events((0, 0), [("removed", 2)], 1.0)
    assert router.overlaps([1, 2, 3]) == {(0, 0): 1, (1, 0): 2}, "a hole ends the prefix"
    router.on_kv_events((1, 0), [("removed", 1), ("removed", 2)], 2.0)
    assert router.overlaps([1, 2, 3]) == {(0, 0): 1}
    assert router.overlaps([9]) == {}


def test_removing_a_worker_clears_its_blocks():
    router = _kv(2)
    router.on_kv_events((1, 0), [("stored", 7)], 0.0)
    router.worker_removed(1)
    assert router.overlaps([7]) == {} and router.cached == {}


def test_cost_matches_dynamos_worked_example():
    """The reference's worked example : B = 64, isl = 2560, c = s = 1."""
    router = _kv(2)
    prefix = list(range(100, 132))              # 32 shared blocks
    request = _req(99, prefix + list(range(200, 208)))
    router.on_kv_events((0, 0), [("stored", k) for k in prefix], 0.0)
    a, b = router.load[(0, 0)], router.load[(1, 0)]
    a.blocks.update({k: 1 for k in prefix})      # worker A: 100 active blocks, 32 of them this prefix
    a.private_blocks = 68
    b.private_blocks = 60                        # worker B: 60 active blocks, 1024 tokens prefilling
    from servesim.placement.routers import _Prefill
    b.prefills[1] = _Prefill(1024, 0.0, None)
    costs = router.costs(request, 0.0)
    assert costs[(0, 0)] == (116.0, 32) and costs[(1, 0)] == (156.0, 0)
    assert router.place(request, 0.0).worker == 0


def test_ledger_tracks_active_blocks_and_prefill_until_terminal():
    router = _kv(2, overlap_credit=0.0)
    first = _req(1, [1, 2, 3], private=1)
    assert router.place(first, 0.0).worker in (0, 1)
    slot = router._tracked[1].slot
    load = router.load[slot]
    assert (len(load.blocks), load.private_blocks, load.prefills[1].tokens) == (3, 1, 256)
    router.on_first_token(1, 5.0)
    assert not load.prefills
    second = _req(2, [1, 2, 3], private=1)
    other = (1 - slot[0], 0)
    costs = router.costs(second, 6.0)
    assert costs[slot][0] == 4 + (3 + 1) + 1 and costs[other][0] == 4 + 4, "in-flight prefix is cheaper"
    router.on_terminal(1, 9.0)
    assert load.blocks == {} and load.private_blocks == 0 and load.requests == 0


def test_selection_is_reproducible_with_a_seed():
    picks = []
    for _ in range(2):
        router = _kv(4)
        picks.append([router.place(_req(i, [i]), 0.0).worker for i in range(20)])
    assert picks[0] == picks[1]
    assert len(set(picks[0])) > 1, "ties are broken at random, not always the first worker"


def test_temperature_spreads_choices():
    router = _kv(2, temperature=1.0)
    router.on_kv_events((0, 0), [("stored", k) for k in range(10)], 0.0)
    chosen = {router.place(_req(i, list(range(10))), 0.0).worker for i in range(60)}
    assert chosen == {0, 1}


def test_round_robin_rotates_workers_then_ranks():
    rr = _router(RoundRobin, 2, ranks=2)
    slots = [(p.worker, p.rank) for p in (rr.place(_req(i, []), 0.0) for i in range(6))]
    assert slots == [(0, 0), (1, 0), (0, 1), (1, 1), (0, 0), (1, 0)]
    flat = _router(FlatRoundRobin, 2, ranks=2)
    assert [(p.worker, p.rank) for p in (flat.place(_req(i, []), 0.0) for i in range(5))] == \
        [(0, 0), (0, 1), (1, 0), (1, 1), (0, 0)]


def test_least_loaded_prefers_idle_workers():
    router = _router(LeastLoaded, 3, seed=1)
    first = {router.place(_req(i, []), 0.0).worker for i in range(3)}
    assert first == {0, 1, 2}
    freed = router._slot_of[1]
    router.on_terminal(1, 1.0)
    assert (router.place(_req(9, []), 1.0).worker, 0) == freed, "the only idle worker wins"


@pytest.mark.parametrize("cls", [RandomRouter, LeastLoaded])
def test_session_affinity_keeps_turns_together(cls):
    router = SessionAffinity(_router(cls, 4, seed=3))
    first = router.place(_req(1, [], session="A"), 0.0)
    for rid in range(2, 8):
        assert router.place(_req(rid, [], session="A"), float(rid)).worker == first.worker
    router.inner.worker_removed(first.worker)
    assert router.place(_req(9, [], session="A"), 9.0).worker != first.worker
