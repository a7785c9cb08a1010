"""recommend's answer when no candidate meets the target (`search.run.SearchResult.closest`): the
replayed miss with the smallest shortfall, then the fewest GPUs, then the earliest trial."""

from __future__ import annotations

from servesim.search.run import SearchResult


def _miss(trial: int, shortfall: float, gpus: int, feasible: bool = False) -> dict:
    return {"trial": trial, "shortfall": shortfall, "used_gpus": gpus, "feasible": feasible,
            "metrics": {"x": 1.0}, "objectives": [1.0]}


def _closest(entries: list[dict]) -> int | None:
    found = SearchResult(config=None, algorithm="grid", entries=entries, configs={}).closest()  # type: ignore[arg-type]
    return None if found is None else found["trial"]


def test_the_smallest_shortfall_wins_over_fewer_gpus():
    assert _closest([_miss(1, 0.30, 1), _miss(2, 0.05, 8), _miss(3, 0.20, 2)]) == 2


def test_equal_shortfalls_take_the_fewest_gpus_then_the_earliest_trial():
    assert _closest([_miss(1, 0.1, 4), _miss(2, 0.1, 2), _miss(3, 0.1, 2)]) == 2


def test_feasible_and_unreplayed_candidates_are_never_the_closest_miss():
    unreplayed = {**_miss(2, 0.0, 1), "metrics": None}
    assert _closest([_miss(1, 0.0, 1, feasible=True), unreplayed, _miss(3, 0.4, 9)]) == 3
    assert _closest([_miss(1, 0.0, 1, feasible=True)]) is None
