"""The search space: parallel pools, knob domains, grid enumeration and random draws."""

from __future__ import annotations

import math
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from search_helpers import config, disaggregated
from servesim.search.schema import Choices, Range, RangeSpec, RecommendConfig
from servesim.search.space import Shape, build_branches, dim_from_domain, ladder_shapes


def _branches(data: dict, moe: bool = False):
    return build_branches(RecommendConfig.model_validate(data), moe, lambda *args: True)


def test_dense_ladder_is_tensor_parallel_times_replicas_within_budget() -> None:
    shapes = ladder_shapes(False, "vllm", 4)
    assert {(s.tensor, s.replicas) for s in shapes} == {(1, 1), (1, 2), (1, 3), (1, 4), (2, 1), (2, 2), (4, 1)}
    assert all(s.gpus <= 4 for s in shapes)


def test_moe_ladder_keeps_the_real_silicon_patterns_and_backend_filters() -> None:
    vllm = {(s.tensor, s.attention_data, s.moe_tensor, s.moe_expert) for s in ladder_shapes(True, "vllm", 4)}
    assert (2, 1, 1, 2) in vllm and (1, 2, 1, 2) in vllm and (2, 1, 2, 1) in vllm   # TEP, DEP, MoE-TP
    assert all(tp * dp == mtp * ep for tp, dp, mtp, ep in vllm)
    trt = {(s.tensor, s.attention_data) for s in ladder_shapes(True, "trtllm", 8)}
    assert not any(tp > 1 and dp > 1 for tp, dp in trt)


def test_domains_become_dimensions() -> None:
    step = dim_from_domain("k", Range(range=RangeSpec(min=2048, max=8192, step=2048)), integer=True)
    assert step.values == (2048, 4096, 6144, 8192)
    log = dim_from_domain("k", Range(range=RangeSpec(min=8, max=64, scale="log")), integer=True)
    assert log.values == tuple(range(8, 65)) and log.log
    cont = dim_from_domain("k", Range(range=RangeSpec(min=0.5, max=0.9)), integer=False)
    assert not cont.finite and (cont.low, cont.high) == (0.5, 0.9)
    assert dim_from_domain("k", Choices(choices=[3]), integer=True) is None   # one value: fixed
    assert dim_from_domain("k", 5, integer=True) is None


def test_grid_is_the_product_of_deployments_and_knobs() -> None:
    data = config(**{"engine.backend": {"choices": ["vllm", "sglang"]}})
    [branch] = _branches(data)
    cands = list(branch.grid())
    assert len(cands) == branch.grid_size() == 2 * 7 * 2
    assert len(set(cands)) == len(cands)
    assert {c.backend for c in cands} == {"vllm", "sglang"}


def test_disaggregated_deployments_share_the_budget() -> None:
    [branch] = _branches(disaggregated(**{"optimization.constraints": {"min_candidate_gpus": 3,
                                                                          "max_candidate_gpus": 4}}))
    deployments = branch.deployments("vllm")
    assert deployments and all(3 <= sum(s.gpus for s in d) <= 4 for d in deployments)
    assert len(deployments) == len(set(deployments))


def test_independent_knobs_span_their_product_and_default_pool_values() -> None:
    data = config(**{"engine.workers.aggregated.parallelism": {"preset": False, "tensor": {"choices": [1, 2, 3]}}})
    [branch] = _branches(data)
    pool = branch.pools["aggregated"]
    assert pool.kind == "independent"
    assert {s.tensor for s in pool.by_backend["vllm"]} == {1, 2, 3}
    assert {s.replicas for s in pool.by_backend["vllm"]} == {1, 2, 3, 4}  # from the default pool


def test_preset_list_is_the_pool() -> None:
    shapes = [dict(replicas=2, tensor=1, pipeline=1, attention_data=1, moe_tensor=1, moe_expert=1),
              dict(replicas=1, tensor=2, pipeline=1, attention_data=1, moe_tensor=1, moe_expert=1)]
    [branch] = _branches(config(**{"engine.workers.aggregated.parallelism": {"preset": shapes}}))
    assert branch.pools["aggregated"].by_backend["vllm"] == [Shape(**s) for s in shapes]


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), backends=st.sampled_from([["vllm"], ["vllm", "sglang"]]),
       budget=st.integers(1, 6))
def test_every_random_draw_is_a_grid_point(seed: int, backends: list[str], budget: int) -> None:
    data = config(**{"engine.backend": {"choices": backends}, "optimization.constraints.max_candidate_gpus": budget})
    [branch] = _branches(data)
    grid = set(branch.grid())
    rng = random.Random(seed)
    for _ in range(20):
        cand = branch.sample(rng)
        assert cand in grid
        assert cand.used_gpus <= budget
    assert branch.sample(random.Random(seed)) == branch.sample(random.Random(seed))


def test_continuous_knobs_are_sampled_within_bounds() -> None:
    data = config(**{"engine.workers.aggregated.kv_cache.capacity": {"type": "default",
                                                                      "memory_fraction": {"range": {"min": 0.5,
                                                                                                    "max": 0.9,
                                                                                                    "scale": "log"}}}})
    [branch] = _branches(data)
    assert not branch.finite
    rng = random.Random(1)
    values = [branch.sample(rng).knob("engine.workers.aggregated.kv_cache.capacity.memory_fraction")
              for _ in range(50)]
    assert all(0.5 <= v <= 0.9 for v in values) and len(set(values)) == 50
    assert not math.isclose(min(values), max(values))
