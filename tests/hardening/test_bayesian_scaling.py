"""The model-guided (Optuna) search costs about the same per trial at trial 500 as at trial 50."""

from __future__ import annotations

import time

import pytest

from search_helpers import config
from servesim.search.algorithms import BayesianStrategy, optuna_available
from servesim.search.schema import RecommendConfig
from servesim.search.score import Objective
from servesim.search.space import build_branches

pytestmark = pytest.mark.skipif(not optuna_available(), reason="needs Optuna (servesim[search])")

BIG = {"engine.workers.aggregated.scheduler.max_sequences": {"range": {"min": 1, "max": 1024, "step": 1}},
       "engine.workers.aggregated.scheduler.max_batched_tokens": {"range": {"min": 1024, "max": 16384, "step": 2}},
       "traffic.load.concurrency": {"range": {"min": 1, "max": 64, "step": 1}}}


def _strategy(budget: int) -> BayesianStrategy:
    cfg = RecommendConfig.model_validate(config(**BIG, **{"optimizer.algorithm": "bayesian"}))
    branch = build_branches(cfg, moe=False, shape_ok=lambda *_: True)[0]
    return BayesianStrategy(branch, budget, 7, Objective("throughput"))


def test_a_large_integer_range_is_one_ordered_parameter() -> None:
    strategy = _strategy(40)
    cands = strategy.ask(strategy.round_size(True))
    trial = strategy._pending[cands[0]][0]
    dist = trial.distributions["engine.workers.aggregated.scheduler.max_batched_tokens"]
    assert type(dist).__name__ == "IntDistribution" and dist.step == 2 and dist.high == 16384


def test_trials_late_in_a_long_search_cost_what_early_ones_do() -> None:
    strategy = _strategy(240)  # the last quarter polishes the best so far
    spans = []
    for _ in range(3):
        started, asked = time.perf_counter(), 0
        while asked < 80:
            cands = strategy.ask(strategy.round_size(asked == 0 and not spans))
            for cand in cands:
                strategy.tell(cand, {"score": float(cand.knob("traffic.load.concurrency", 1))})
            asked += len(cands)
        spans.append(time.perf_counter() - started)
    # deep copies of every trial per proposal made the last 80 cost many times the first 80
    assert spans[-1] < 4 * spans[0] + 5, spans
