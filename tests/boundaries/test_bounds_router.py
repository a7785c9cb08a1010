"""Router boundaries (router-planner spec §1.4-1.6): the KV router's cost with the credit decay
``1 / (1 + d · ((P_i − min_j P_j) / B) / ceil(isl / B))``, the prefill term floored at 0, linear
prefill aging that stops at 0, argmin at T = 0 and exact ties broken uniformly at random (also
for least-loaded)."""

from __future__ import annotations

import math

import pytest

from servesim.placement.base import RouteRequest
from servesim.placement.routers import KvRouter, KvRouterSettings, LeastLoaded, _Prefill, _SlotLoad

B = 16


def _router(workers=3, seed=0, **knobs) -> KvRouter:
    router = KvRouter(1, KvRouterSettings(block_size=B, track_blocks=False, **knobs), seed)
    for w in range(workers):
        router.worker_added(w)
    return router


def _request(isl: int, keys: list[int] | None = None, rid: int = 1) -> RouteRequest:
    keys = keys if keys is not None else list(range(900, 900 + isl // B))
    return RouteRequest(rid, f"s{rid}", isl, keys, 0)


def _queue(router: KvRouter, worker: int, tokens: int) -> None:
    router.load[(worker, 0)].prefills[1000 + worker] = _Prefill(tokens, 0.0, None)


def _cache(router: KvRouter, worker: int, keys: list[int]) -> None:
    router.on_kv_events((worker, 0), [("stored", k) for k in keys], 0.0)


def _expected(prefill: float, least: float, isl: int, overlap: int, d: float, c: float = 1.0) -> float:
    decay = 1 / (1 + d * ((prefill - least) / B) / math.ceil(isl / B)) if d else 1.0
    return max(0.0, (prefill + isl) / B - c * decay * overlap)


@pytest.mark.parametrize("isl", [40, 48, 33])
def test_credit_decay_follows_the_spec_formula(isl):
    router = _router(credit_decay=1.0)
    keys = list(range(500, 500 + isl // B))
    _queue(router, 0, 160)
    _queue(router, 1, 32)
    _queue(router, 2, 8)
    for w in range(3):
        _cache(router, w, keys)
    costs = router.costs(_request(isl, keys), 0.0)
    overlap = len(keys)
    for w, prefill in enumerate((160, 32, 8)):
        assert costs[(w, 0)] == (pytest.approx(_expected(prefill, 8, isl, overlap, 1.0)), overlap)


def test_the_least_loaded_rank_keeps_its_full_credit():
    router = _router(credit_decay=5.0)
    keys = [1, 2]
    _queue(router, 0, 64)
    _queue(router, 1, 64)
    _queue(router, 2, 640)
    for w in range(3):
        _cache(router, w, keys)
    costs = router.costs(_request(32, keys), 0.0)
    assert costs[(0, 0)][0] == pytest.approx((64 + 32) / B - 2), "excess 0: decay 1"
    assert costs[(2, 0)][0] > costs[(0, 0)][0] + (640 - 64) / B - 1e-9


def test_the_prefill_term_is_floored_at_zero():
    router = _router(overlap_credit=3.0)
    keys = [1, 2]
    _cache(router, 0, keys)
    costs = router.costs(_request(32, keys), 0.0)
    assert costs[(0, 0)] == (0.0, 2) and costs[(1, 0)] == (2.0, 0)


def test_prefill_load_ages_linearly_to_zero_and_no_further():
    load = _SlotLoad()
    load.prefills[1] = _Prefill(64, 0.0, 10_000.0)
    assert [load.prefill_tokens(t) for t in (0.0, 5_000.0, 10_000.0, 15_000.0)] == [64.0, 32.0, 0.0, 0.0]


def test_without_durations_prefill_counts_in_full():
    load = _SlotLoad()
    load.prefills[1] = _Prefill(64, 0.0, None)
    assert load.prefill_tokens(1e9) == 64.0


def test_temperature_zero_takes_the_argmin():
    for seed in range(10):
        router = _router(seed=seed)
        _queue(router, 0, 32)
        _queue(router, 2, 16)
        assert router.place(_request(32), 0.0).worker == 1


@pytest.mark.parametrize("make", [lambda s: _router(seed=s), lambda s: _least_loaded(s)], ids=["kv", "least_loaded"])
def test_exact_ties_are_broken_at_random(make):
    chosen = {make(seed).place(_request(32), 0.0).worker for seed in range(40)}
    assert chosen == {0, 1, 2}


def _least_loaded(seed: int) -> LeastLoaded:
    router = LeastLoaded(1, seed)
    for w in range(3):
        router.worker_added(w)
    return router


def test_least_loaded_never_picks_a_busier_rank():
    for seed in range(10):
        router = _least_loaded(seed)
        for rid in range(1, 7):  # two rounds: the counts stay within one of each other
            router.place(_request(32, rid=rid), 0.0)
            counts = sorted(router.in_flight.values())
            assert counts[-1] - counts[0] <= 1
        assert sorted(router.in_flight.values()) == [2, 2, 2]


def test_potential_decode_blocks_are_the_active_plus_the_new_ones():
    router = KvRouter(1, KvRouterSettings(block_size=B, track_prefill=False), 0)
    for w in range(2):
        router.worker_added(w)
    router._commit((0, 0), _request(32, [1, 2], rid=1), 0, 0.0)
    costs = router.costs(_request(48, [1, 2, 3], rid=2), 0.0)
    assert costs[(0, 0)][0] == 3.0, "2 active + 1 new"
    assert costs[(1, 0)][0] == 3.0, "0 active + 3 new"


def test_softmax_sampling_matches_the_spec_example():
    """T = 0.5, normalised costs 0 and 1: p(A) = 1 / (1 + e^-2) ≈ 0.881."""
    router = _router(workers=2, temperature=0.5, seed=7)
    costs = {(0, 0): (1.0, 0), (1, 0): (3.0, 0)}
    draws = [router._select(costs) for _ in range(4000)]
    share = draws.count((0, 0)) / len(draws)
    assert abs(share - 1 / (1 + math.exp(-2))) < 0.03


def test_prefill_aging_spills_over_to_the_next_entry():
    load = _SlotLoad()
    load.prefills[1] = _Prefill(64, 0.0, 10.0)
    load.prefills[2] = _Prefill(64, 2.0, 10.0)
    assert load.prefill_tokens(5.0) == pytest.approx(32.0 + 64.0), "the anchor half done, the next untouched"
    assert load.prefill_tokens(15.0) == pytest.approx(0.0 + 32.0), "5 ms past the anchor age the next"


def test_a_prefill_of_no_expected_duration_is_charged_nothing():
    """Linear aging over a zero duration: the prefill is done the moment it starts."""
    load = _SlotLoad()
    load.prefills[1] = _Prefill(64, 0.0, 0.0)
    assert [load.prefill_tokens(t) for t in (0.0, 1.0)] == [0.0, 0.0]


def test_a_zero_duration_prefill_ages_nothing_after_it():
    load = _SlotLoad()
    load.prefills[1] = _Prefill(64, 0.0, 0.0)
    load.prefills[2] = _Prefill(32, 0.0, 10.0)
    assert load.prefill_tokens(5.0) == pytest.approx(0.0 + 16.0), "its zero span leaves 5 ms for the next"


def test_one_unknown_duration_charges_every_prefill_in_full():
    load = _SlotLoad()
    load.prefills[1] = _Prefill(64, 0.0, 0.0)
    load.prefills[2] = _Prefill(32, 0.0, None)
    assert load.prefill_tokens(5.0) == 96.0
