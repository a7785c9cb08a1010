"""`servesim.runtime.paths`: every config knob is classified, the decision matches each knob's
classification, the router policies it names behave as it assumes, and the report records the
paths a run took."""

from __future__ import annotations

import copy
import typing
from typing import Any

import pytest
from conftest import CASES, without_host_fields
from pydantic import BaseModel

from servesim import simulate
from servesim.build import lower
from servesim.config import SimConfig, load_config, parse_config
from servesim.placement.base import StateFreeRouter
from servesim.placement.factory import RouterSpec, make_router
from servesim.runtime import paths
from servesim.runtime.paths import (
    BULK_ROUTING,
    COHORT,
    ISOLATED,
    KNOBS,
    PATHS,
    RUN_AHEAD,
    RUN_ON,
    STEADY,
    CallFacts,
    ReplayPaths,
    decide,
)


def _models(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models an annotation can hold (through unions, lists, dicts, Annotated)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _models(arg)]


def config_fields(model: type[BaseModel], prefix: str = "") -> set[str]:
    """Every leaf field of `model` by dotted path; a role's worker fields as `engine.workers.*.…`."""
    found: set[str] = set()
    for name, info in model.model_fields.items():
        path = prefix + name
        inner = _models(info.annotation)
        if not inner:
            found.add(path)
        for sub in inner:
            found |= config_fields(sub, path + ".")
    return found


def _by_role(path: str) -> str:
    head = "engine.workers."
    if not path.startswith(head):
        return path
    _, rest = path[len(head):].split(".", 1)
    return head + "*." + rest


def test_every_config_field_is_classified() -> None:
    fields = {_by_role(path) for path in config_fields(SimConfig)}
    assert len(fields) > 100  # the walk reached the sections' fields
    unclassified = sorted(fields - set(KNOBS))
    assert not unclassified, f"classify these config fields in servesim/runtime/paths.py KNOBS: {unclassified}"
    stale = sorted(set(KNOBS) - fields)
    assert not stale, f"KNOBS names fields the config does not have: {stale}"


def test_knobs_refuse_only_known_paths() -> None:
    for path, knob in KNOBS.items():
        assert knob.refuses <= set(PATHS), path
        assert knob.why and (knob.refuses or knob.why.startswith("neutral")), path


def test_the_walk_sees_a_new_knob() -> None:
    """The classification test would fail on a field nobody classified."""

    class Extra(BaseModel):
        brand_new_knob: int = 0

    class Patched(SimConfig):
        extra: Extra = Extra()

    assert "extra.brand_new_knob" in config_fields(Patched) - set(KNOBS)


@pytest.mark.parametrize("policy", ["round_robin", "random", "least_loaded", "kv_router"])
@pytest.mark.parametrize("ranks", [1, 2])
def test_the_router_policies_behave_as_the_decision_assumes(policy: str, ranks: int) -> None:
    router = make_router(RouterSpec(policy=policy), ranks=ranks, workers=3, block_size=16,
                         prefill_time=lambda b, i, p: 1.0)
    assert router.state_free == (policy in paths.STATE_FREE_POLICIES)
    in_bulk = isinstance(router, StateFreeRouter) and router.places_in_bulk and not router.wants_kv_events
    assert in_bulk == (policy in paths.BULK_POLICIES and ranks == 1)
    with_affinity = make_router(RouterSpec(policy=policy, session_affinity=True), ranks=ranks, workers=3,
                                block_size=16, prefill_time=lambda b, i, p: 1.0)
    assert with_affinity.state_free == router.state_free and not isinstance(with_affinity, StateFreeRouter)


def base() -> dict[str, Any]:
    """A run every fast path may take: alike synthetic requests on two vLLM replicas."""
    return {
        "engine": {"model": "m", "hardware": "h200_sxm", "backend": "vllm", "context_length": 32768,
                   "workers": {"aggregated": {
                       "parallelism": {"replicas": 2},
                       "scheduler": {"max_batched_tokens": 8192, "max_sequences": 256},
                       "kv_cache": {"block_size": 64, "capacity": {"type": "fixed", "blocks": 12000}},
                       "timing": {"type": "fixed", "prefill_ms": 20, "decode_ms": 10}}}},
        "traffic": {"source": {"type": "synthetic", "input_tokens": 128, "output_tokens": 16},
                    "load": {"type": "poisson", "requests_per_second": 200, "seed": 5},
                    "stop": {"requests": 50}},
    }


def paths_of(config: dict[str, Any] | SimConfig, call: CallFacts | None = None) -> ReplayPaths:
    """The decision for `config`, with the driver `simulate` would build."""
    run = lower(config if isinstance(config, SimConfig) else parse_config(config))
    rank = run.pools[0].rank_config
    driver = run.traffic.driver(run.traffic.workload(rank.block_size), prompt_limit=rank.prompt_content_limit)
    return decide(run, driver, call or CallFacts())


def _set(config: dict[str, Any], dotted: str, value: Any) -> dict[str, Any]:
    out = copy.deepcopy(config)
    *parents, leaf = dotted.split(".")
    node = out
    for key in parents:
        node = node.setdefault(key, {})
    node[leaf] = value
    return out


def test_the_base_run_may_take_every_path() -> None:
    decided = paths_of(base())
    assert decided.allowed == set(PATHS) and not decided.refused
    assert decided.loop == STEADY and decided.cohort("aggregated")


W = "engine.workers.aggregated."
VARIATIONS: list[tuple[str, Any, set[str]]] = [
    # neutral knobs: nothing changes
    (W + "timing.decode_ms", 7, set()),
    (W + "kv_cache.prefix_caching", False, set()),
    (W + "parallelism.replicas", 3, set()),
    (W + "startup_seconds", 5, set()),
    ("traffic.load.requests_per_second", 50, set()),
    ("traffic.stop.requests", 30, set()),
    ("router.seed", 3, set()),
    ("evaluation.sla.e2e_ms", 1000, set()),
    # knobs that refuse paths
    ("traffic.client_timeout_seconds", 10, {ISOLATED, RUN_ON, BULK_ROUTING, STEADY}),
    ("router.policy", "kv_router", {ISOLATED, RUN_ON, BULK_ROUTING, STEADY}),
    ("router.policy", "least_loaded", {ISOLATED, RUN_ON, BULK_ROUTING, STEADY}),
    ("router.policy", "random", set()),
    ("router.session_affinity", True, {BULK_ROUTING, STEADY}),
    (W + "parallelism.attention_data", 2, {RUN_AHEAD, RUN_ON, BULK_ROUTING, STEADY}),
    (W + "scheduler.preemption_mode", "fifo", {COHORT}),
    (W + "scheduler.max_batched_tokens", 128, {STEADY}),
    (W + "scheduler.async_scheduling", True, {STEADY}),
    (W + "kv_cache.capacity.blocks", 100, {STEADY}),
    ("engine.context_length", 140, {STEADY}),
    ("traffic.source.input_tokens", 40000, {STEADY}),
    ("traffic.load", {"type": "concurrency", "concurrency": 4}, {RUN_AHEAD, ISOLATED, RUN_ON, BULK_ROUTING, STEADY}),
    ("engine.backend", "trtllm", {STEADY}),
    ("engine.backend", "sglang", {COHORT, STEADY}),
]


@pytest.mark.parametrize("field, value, refused", VARIATIONS, ids=[f"{f}={v}" for f, v, _ in VARIATIONS])
def test_a_knob_refuses_what_its_classification_says(field: str, value: Any, refused: set[str]) -> None:
    config = _set(base(), field, value)
    if field == "engine.backend" and value == "sglang":
        del config["engine"]["context_length"]
    decided = paths_of(config)
    assert set(PATHS) - decided.allowed == refused
    knob = KNOBS[_by_role(field if field != "traffic.load" else "traffic.load.concurrency")]
    assert refused <= knob.refuses
    for path in PATHS:
        assert (decided.reason(path) is None) == (path not in refused), path


def test_speculative_decoding_refuses_the_cohort_and_the_steady_lane() -> None:
    config = _set(base(), W + "speculative", {"num_speculative_tokens": 2, "acceptance_rates": [0.7, 0.4]})
    decided = paths_of(config)
    assert set(PATHS) - decided.allowed == {COHORT, STEADY}
    assert "speculative" in (decided.reason(COHORT) or "")


def test_what_the_caller_adds_refuses_paths() -> None:
    config = base()
    assert paths_of(config, CallFacts(fast=False)).allowed == set()
    assert set(PATHS) - paths_of(config, CallFacts(watched=True)).allowed == {RUN_ON, STEADY}
    assert set(PATHS) - paths_of(config, CallFacts(scaling=True)).allowed == {ISOLATED, RUN_ON, BULK_ROUTING, STEADY}
    assert set(PATHS) - paths_of(config, CallFacts(whole_records=True)).allowed == {STEADY}
    assert paths_of(config, CallFacts(fast=False)).reason(COHORT) == "fast paths turned off (fast=False)"


def test_multi_turn_sessions_close_the_loop() -> None:
    config = base()
    config["traffic"]["source"] = {"type": "synthetic-session", "new_input_tokens_per_turn": 128,
                                   "output_tokens_per_turn": 16, "session": {"turns": 2}}
    config["traffic"]["stop"] = {"sessions": 20}
    config["traffic"]["load"] = {"type": "poisson", "sessions_per_second": 20, "seed": 5}
    decided = paths_of(config)
    assert decided.allowed == {COHORT}
    assert "not fixed in advance" in (decided.reason(ISOLATED) or "")
    assert KNOBS["traffic.source.session.turns"].refuses >= set(PATHS) - {COHORT}


def test_disaggregated_serving_keeps_only_the_cohort() -> None:
    decided = paths_of(load_config(CASES / "replay" / "11-disagg-kv-transfer" / "config.yaml"))
    assert decided.allowed == {COHORT} and decided.loop == paths.SHARED
    assert "disaggregated" in (decided.reason(RUN_AHEAD) or "")
    assert set(PATHS) - {COHORT} <= KNOBS["engine.mode"].refuses


def test_a_time_cap_refuses_running_on_and_the_steady_lane() -> None:
    decided = paths_of(TIME_CAP)
    assert set(PATHS) - decided.allowed == {RUN_ON, STEADY}
    assert decided.reason(STEADY) == "a time cap" and "time cap" in (decided.reason(RUN_ON) or "")
    assert KNOBS["traffic.stop.max_virtual_time_seconds"].refuses == {RUN_ON, STEADY}


TIME_CAP = load_config(CASES / "replay" / "10-max-virtual-time-cap" / "config.yaml")


def test_the_report_records_the_paths_it_took() -> None:
    steady = simulate(parse_config(base()))
    assert steady.provenance["replay_loop"] == STEADY and steady.provenance["fast_paths"] == "none"
    plain = simulate(parse_config(base()), fast=False)
    assert plain.provenance["replay_loop"] == paths.SHARED and plain.provenance["fast_paths"] == "none"
    capped = simulate(TIME_CAP)
    assert capped.provenance["replay_loop"] == ISOLATED
    assert capped.provenance["fast_paths"] == "decode cohort, run ahead, bulk routing"
    assert without_host_fields(plain.to_dict()) == without_host_fields(steady.to_dict())


def test_a_steady_run_that_leaves_the_lane_says_why() -> None:
    """A pass computing only part of a prompt with no prefill cost takes no time: the steady
    lane stops and the per-worker replay runs the whole run again."""
    config = _set(_set(_set(base(), W + "timing.prefill_ms", 0), W + "scheduler.max_batched_tokens", 100),
                  W + "scheduler.max_sequences", 1)
    config["traffic"]["source"]["input_tokens"] = 300
    report = simulate(parse_config(config))
    assert report.provenance["replay_loop"].startswith(f"{ISOLATED} (left the steady lane: ")


def test_compat_reference_reports_leave_the_paths_out(tmp_path: Any) -> None:
    import json

    import yaml

    from servesim.cli import main

    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(base()))
    assert main(["predict", "-c", str(path), "--output-dir", str(tmp_path / "plain")]) == 0
    assert "replay_loop" in json.loads((tmp_path / "plain" / "prediction.json").read_text())["provenance"]
    assert main(["--compat", "reference", "predict", "-c", str(path), "--output-dir", str(tmp_path / "ref")]) == 0
    assert "provenance" not in json.loads((tmp_path / "ref" / "prediction.json").read_text())
