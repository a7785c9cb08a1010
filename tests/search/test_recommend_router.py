"""The `router:` section of a recommend config as upstream AISimulate 0.13 reads it: the policy
and the KV router's knobs are domains, omitted ones searched over upstream's defaults."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from search_helpers import config
from servesim.search.run import Search
from servesim.search.schema import ROUTER_KV_DEFAULTS, RecommendConfig
from servesim.search.space import build_branches

ONE_SHAPE = {"engine.workers.aggregated.parallelism": {"preset": [{"replicas": 2, "tensor": 1, "pipeline": 1,
                                                                   "attention_data": 1, "moe_tensor": 1,
                                                                   "moe_expert": 1}]},
             "engine.workers.aggregated.scheduler.max_sequences": 16}


def _dims(router: dict) -> dict:
    cfg = RecommendConfig.model_validate(config(router=router, **ONE_SHAPE))
    (branch,) = build_branches(cfg, False, lambda *args: True)
    return {d.name: d.values for d in branch.dims} | {k: v for k, v in branch.fixed.items() if k.startswith("router")}


def test_omitted_policy_searches_round_robin_and_kv_router_with_upstream_defaults() -> None:
    dims = _dims({})
    assert dims["router.policy"] == ("round_robin", "kv_router")
    assert dims["router.prefill_load_model.type"] == ("none", "ais")
    for knob, values in ROUTER_KV_DEFAULTS.items():
        assert dims[f"router.{knob}"] == values
    assert dims["router.prefill_load_scale"] == (0.0, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0)


def test_round_robin_only_has_no_kv_router_knobs() -> None:
    assert _dims({"policy": "round_robin"}) == {"router.policy": "round_robin"}


def test_given_values_and_ranges_are_kept() -> None:
    dims = _dims({"policy": "kv_router", "overlap_score_credit": {"choices": [0.0, 1.0]},
                  "prefill_load_scale": {"range": {"min": 0.5, "max": 1.5, "step": 0.5}}, "temperature": 0.0,
                  "prefill_load_model": {"type": "ais"}})
    assert dims == {"router.overlap_score_credit": (0.0, 1.0), "router.prefill_load_scale": (0.5, 1.0, 1.5),
                    "router.policy": "kv_router", "router.prefill_load_model.type": "ais",
                    "router.temperature": 0.0}


@pytest.mark.parametrize("router, message", [
    ({"policy": "round_robin", "temperature": 0.5}, "rejects the KV-router knobs"),
    ({"policy": "round_robin", "prefill_load_model": {"type": "ais"}}, "only 'none' is allowed"),
    ({"policy": {"choices": ["round_robin", "kv_router"]}, "prefill_load_model": {"type": "ais"}},
     "include 'none'"),
    ({"policy": "kv_router", "overlap_score_credit": -1.0}, ">= 0"),
    ({"policy": {"choices": ["round_robin", "fastest"]}}, "must be one of"),
    ({"policy": "kv_router", "prefill_load_model": {"type": "linear"}}, "must be one of"),
])
def test_upstream_rules(router: dict, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        RecommendConfig.model_validate(config(router=router))


def test_search_replays_each_policy_and_kv_knobs_only_for_kv_router() -> None:
    data = config(router={"policy": {"choices": ["round_robin", "kv_router"]},
                          "overlap_score_credit": {"choices": [0.0, 1.0]}, "prefill_load_scale": 1.0,
                          "temperature": 0.0, "prefill_load_model": {"type": "none"}, "seed": 5},
                  **ONE_SHAPE, **{"optimizer.algorithm": "grid", "optimizer.max_trials": 20})
    result = Search(RecommendConfig.model_validate(data)).run()
    routers = [result.configs[e["trial"]]["router"] for e in result.entries if e["trial"] in result.configs]
    # round_robin x {0, 1} credit is one configuration (the credit is a kv_router knob): three in all
    assert sorted(routers, key=repr) == sorted([
        {"policy": "round_robin", "seed": 5},
        {"policy": "kv_router", "seed": 5, "prefill_load_model": {"type": "none"}, "overlap_score_credit": 0.0,
         "prefill_load_scale": 1.0, "temperature": 0.0},
        {"policy": "kv_router", "seed": 5, "prefill_load_model": {"type": "none"}, "overlap_score_credit": 1.0,
         "prefill_load_scale": 1.0, "temperature": 0.0},
    ], key=repr)
    replayed = [e for e in result.entries if e["eval_seconds"] is not None]
    assert len(replayed) == 3 and all(e["status"] in ("feasible", "misses_target") for e in replayed)
    assert {e["knobs"]["router.policy"] for e in replayed} == {"round_robin", "kv_router"}
    round_robin = next(e for e in replayed if e["knobs"]["router.policy"] == "round_robin")
    assert not [k for k in round_robin["knobs"] if k.startswith("router.") and k != "router.policy"]
