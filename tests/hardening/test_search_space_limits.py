"""Search spaces are counted before they are built: absurd domains are refused naming the key,
large GPU budgets enumerate in time, and the grid counts each distinct candidate once."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from pydantic import ValidationError

from search_helpers import config
from servesim.errors import ConfigError
from servesim.search.run import Search
from servesim.search.schema import RecommendConfig
from servesim.search.space import build_branches

ONE_SHAPE = {"engine.workers.aggregated.parallelism": {"preset": [{"replicas": 2, "tensor": 1, "pipeline": 1,
                                                                   "attention_data": 1, "moe_tensor": 1,
                                                                   "moe_expert": 1}]},
             "engine.workers.aggregated.scheduler.max_sequences": 16}
DISAGG = {"engine.mode": {"choices": ["aggregated", "disaggregated"]},
          "engine.workers.prefill": {"parallelism": {"preset": "default"}},
          "engine.workers.decode": {"parallelism": {"preset": "default"}}}


def _refused(data: dict[str, Any]) -> str:
    started = time.perf_counter()
    with pytest.raises((ValidationError, ConfigError)) as info:
        Search(RecommendConfig.model_validate(data))
    assert time.perf_counter() - started < 10
    return str(info.value)


@pytest.mark.parametrize("key, domain", [
    ("engine.workers.aggregated.scheduler.max_sequences", {"range": {"min": 1, "max": 10**12, "step": 1}}),
    ("engine.workers.aggregated.kv_cache.capacity.memory_fraction",
     {"range": {"min": 0.1, "max": 0.9, "step": 1e-12}}),
    ("traffic.load.concurrency", {"range": {"min": 1, "max": 10**9, "scale": "log"}}),
])
def test_a_range_of_too_many_values_is_refused_naming_the_key(key: str, domain: dict[str, Any]) -> None:
    message = _refused(config(**{key: domain}))
    assert key.rsplit(".", 1)[1] in message and "at most 100,000 values" in message


def test_a_preset_false_pool_too_large_is_refused_before_it_is_built() -> None:
    data = config(**{"engine.workers.aggregated.parallelism": {
        "preset": False, "replicas": {"range": {"min": 1, "max": 100_000, "step": 1}},
        "tensor": {"choices": [1, 2, 4]}}})
    message = _refused(data)
    assert "engine.workers.aggregated.parallelism" in message and "300,000 shapes" in message


def test_a_gpu_budget_beyond_the_limit_is_refused() -> None:
    message = _refused(config(**{"optimization.constraints.max_candidate_gpus": 10**9}))
    assert "max_candidate_gpus" in message


@pytest.mark.parametrize("gpus", [10_000, 100_000])
def test_large_gpu_budgets_enumerate_quickly(gpus: int) -> None:
    started = time.perf_counter()
    search = Search(RecommendConfig.model_validate(config(**DISAGG, **{
        "optimization.constraints.max_candidate_gpus": gpus})))
    disaggregated = search.branches[1]
    size = disaggregated.grid_size()
    deployments = disaggregated.deployments("vllm")
    last = deployments[len(deployments) - 1]
    assert time.perf_counter() - started < 20  # 10,000 GPUs took 59 s
    assert size > gpus**2 and sum(s.gpus for s in last) <= gpus


def test_deployments_index_as_the_filtered_product() -> None:
    search = Search(RecommendConfig.model_validate(config(**DISAGG, **{
        "optimization.constraints.max_candidate_gpus": 24, "optimization.constraints.min_candidate_gpus": 6})))
    branch = search.branches[1]
    pools = [branch.pools[role].by_backend["vllm"] for role in branch.roles]
    expected = [(p, d) for p in pools[0] for d in pools[1] if 6 <= p.gpus + d.gpus <= 24]
    deployments = branch.deployments("vllm")
    assert list(deployments) == expected and [deployments[i] for i in range(len(expected))] == expected
    assert len(deployments) == len(expected)


def _grid_is_distinct(**changes: Any) -> int:
    cfg = RecommendConfig.model_validate(config(**ONE_SHAPE, **changes))
    branch = build_branches(cfg, moe=False, shape_ok=lambda *_: True)[0]
    grid = list(branch.grid())
    keys = {json.dumps(c.flat_knobs(), sort_keys=True, default=str) for c in grid}
    assert len(keys) == len(grid) == branch.grid_size()
    return len(grid)


def test_router_knobs_of_round_robin_candidates_are_not_counted_twice() -> None:
    # round_robin once, kv_router over 2 models x 3 x 9 x 4 knob values
    assert _grid_is_distinct(router={}) == 1 + 2 * 3 * 9 * 4


def test_planner_knobs_unused_by_their_policy_are_not_counted_twice() -> None:
    # disabled (= enabled with a policy that scales nothing) once, load scaling x 3 sensitivities
    assert _grid_is_distinct(planner={}) == 1 + 2 * 3
    goodput = {"optimization.target": "goodput", "evaluation.sla": {"ttft_ms": 400, "itl_ms": 20}}
    assert _grid_is_distinct(planner={"min_workers": {"choices": [1, 2]}}, **goodput) > 1
    assert _grid_is_distinct(planner={"policy": "disabled"}, router={"policy": "round_robin"}) == 1
