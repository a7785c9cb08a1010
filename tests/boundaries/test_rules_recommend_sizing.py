"""Rules of recommend's sizing phase (search/sizing.py): a fifth of the budget, none below 10
trials; per shape and role, bisect the replica count between the largest count that misses
below the smallest that qualifies, double a count that only misses (within the GPU budget, the
other roles' GPUs counted), stop when the two are adjacent; only the best SIZED_SHAPES shapes,
best = meets the target with the highest score, else the smallest shortfall; the table's
fewest GPUs and the most GPUs below them that missed."""

from __future__ import annotations

import pytest

from servesim.search import sizing
from servesim.search.deployments import Shape
from servesim.search.space import Candidate


def _agg(replicas: int, tensor: int = 1, knobs: tuple = ()) -> Candidate:
    return Candidate("aggregated", "vllm", (("aggregated", Shape(replicas=replicas, tensor=tensor)),), knobs)


def _disagg(decode: int, prefill: int = 1) -> Candidate:
    return Candidate("disaggregated", "vllm", (("prefill", Shape(replicas=prefill)),
                                               ("decode", Shape(replicas=decode, tensor=2))), ())


_TRIAL = iter(range(10_000))


def _entry(cand: Candidate, feasible: bool, score: float = 1.0, shortfall: float = 0.5) -> dict:
    return {"metrics": {"goodput_request_throughput_rps": 1.0}, "objectives": {"x": 1.0}, "feasible": feasible,
            "score": score, "shortfall": 0.0 if feasible else shortfall, "used_gpus": cand.used_gpus,
            "trial": next(_TRIAL)}


def _known(*pairs: tuple[Candidate, bool]) -> dict:
    return {cand: _entry(cand, ok) for cand, ok in pairs}


def _next(known: dict, max_gpus: int = 64, tried=lambda c: False) -> list[int]:
    return [dict(c.shapes)[c.shapes[-1][0]].replicas for c in sizing.proposals(known, max_gpus, tried)]


@pytest.mark.parametrize(("trials", "reserved"), [(9, 0), (10, 2), (14, 2), (15, 3), (100, 20)])
def test_the_sizing_budget_is_a_fifth_from_ten_trials(trials, reserved):
    assert sizing.sizing_budget(trials) == reserved


def test_bisect_between_the_largest_miss_and_the_smallest_qualifier():
    assert _next(_known((_agg(2), False), (_agg(7), True))) == [4]
    assert _next(_known((_agg(2), False), (_agg(3), False), (_agg(6), True), (_agg(9), True))) == [4]
    assert _next(_known((_agg(2), False), (_agg(4), False), (_agg(8), True))) == [6], "the largest miss"


def test_adjacent_counts_end_the_bisection():
    assert _next(_known((_agg(3), False), (_agg(4), True))) == []
    assert _next(_known((_agg(3), False), (_agg(5), True))) == [4]


def test_a_qualifier_alone_bisects_down_from_it():
    assert _next(_known((_agg(4), True))) == [2]
    assert _next(_known((_agg(2), True))) == [1]
    assert _next(_known((_agg(1), True))) == [], "one replica is the fewest"


def test_a_miss_above_the_smallest_qualifier_is_not_the_lower_end():
    assert _next(_known((_agg(2), False), (_agg(4), True), (_agg(8), False))) == [3]


def test_a_count_that_only_misses_doubles_within_the_gpu_budget():
    assert _next(_known((_agg(3), False)), max_gpus=64) == [6]
    assert _next(_known((_agg(3), False)), max_gpus=5) == [5]
    assert _next(_known((_agg(3), False)), max_gpus=3) == [], "no room above the miss"
    assert _next(_known((_agg(2, tensor=2), False)), max_gpus=7) == [3], "7 GPUs hold three tp2 workers"


def test_the_doubling_counts_the_other_roles_gpus():
    # 1 prefill GPU and 2 tp2 decode replicas miss. Prefill doubles to 2; decode to 4 in 9 GPUs
    # ((9 - 1) // 2), to 3 in 8.
    def both(max_gpus):
        return [tuple(s.replicas for _, s in c.shapes)
                for c in sizing.proposals(_known((_disagg(2), False)), max_gpus, lambda c: False)]
    assert both(9) == [(2, 2), (1, 4)]
    assert both(8) == [(2, 2), (1, 3)]
    assert both(6) == [(2, 2)], "(6 - 1) // 2 = 2 decode replicas: no room to double"
    assert both(5) == [], "nor for a second prefill worker beside 4 decode GPUs"


def test_a_tried_candidate_is_not_proposed_again():
    known = _known((_agg(2), False), (_agg(8), True))
    assert _next(known, tried=lambda c: c.shapes[0][1].replicas == 5) == []


def test_only_the_best_shapes_are_sized():
    known = {}
    for tensor in (1, 2, 4, 8, 16):  # five shapes; tensor 16 qualifies with the lowest score
        cand = _agg(4, tensor=tensor)
        known[cand] = _entry(cand, True, score=100.0 - tensor)
    picked = sorted(c.shapes[0][1].tensor for c in sizing.proposals(known, 1024, lambda c: False))
    assert len(picked) == sizing.SIZED_SHAPES and picked == [1, 2, 4, 8]


def test_a_shape_that_qualifies_beats_one_that_misses_by_little():
    known = {}
    hit, near, far = _agg(4, tensor=1), _agg(4, tensor=2), _agg(4, tensor=4)
    known[far] = _entry(far, False, shortfall=0.5)
    known[near] = _entry(near, False, shortfall=0.01)
    known[hit] = _entry(hit, True, score=-1e9)
    rows = sizing.sizing_table(known)
    assert [row["shape"] for row in rows] == ["vllm tp1", "vllm tp2", "vllm tp4"]


def test_the_table_reads_the_fewest_gpus_and_the_miss_below_them():
    known = _known((_agg(2), False), (_agg(3), False), (_agg(4), True), (_agg(6), True), (_agg(8), False))
    (row,) = sizing.sizing_table(known)
    assert row["fewest_gpus"] == 4 and row["misses_at"] == 3
    assert [p["gpus"] for p in row["curve"]] == [2, 3, 4, 6, 8]
    assert [p["meets_target"] for p in row["curve"]] == [False, False, True, True, False]
    (row,) = sizing.sizing_table(_known((_agg(2), False), (_agg(3), False)))
    assert row["fewest_gpus"] is None and row["misses_at"] == 3


def test_the_curve_keeps_the_best_replay_per_gpu_count():
    a, b = _agg(4, knobs=(("k", 1),)), _agg(4, knobs=(("k", 2),))
    known = {a: _entry(a, False, shortfall=0.3), b: _entry(b, True, score=2.0)}
    (row,) = sizing.sizing_table(known)
    assert row["curve"] == [{"gpus": 4, "trial": known[b]["trial"], "meets_target": True,
                             "goodput_request_throughput_rps": 1.0, "request_throughput_rps": None}]
    assert row["fewest_gpus"] == 4 and row["misses_at"] is None


def test_labels_name_the_split_not_the_replicas():
    assert sizing.shape_label(_agg(3, tensor=2)) == "vllm tp2"
    assert sizing.shape_label(_disagg(3)) == "vllm P tp1 / D tp2"
    assert sizing.shape_key(_agg(3)) == sizing.shape_key(_agg(5))


def _unreplayed(cand: Candidate) -> dict:
    return {**_entry(cand, False), "metrics": None}


def test_a_candidate_without_a_replay_is_neither_a_miss_nor_a_point():
    known = _known((_agg(2), False), (_agg(8), True))
    known[_agg(4)] = _unreplayed(_agg(4))
    assert _next(known) == [5]
    known[_agg(6)] = {**_entry(_agg(6), False), "objectives": None}
    assert _next(known) == [5]
    (row,) = sizing.sizing_table(known)
    assert [p["gpus"] for p in row["curve"]] == [2, 8]
