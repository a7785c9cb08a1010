"""Per-role hardware in disaggregated serving (`workers.prefill.hardware`, `workers.decode.hardware`,
issue 34), checked against AISimulate 0.13's recorded block counts (`tests/cases/upstream013/roles.json`,
recorded by `benchmarks/record_013_roles.py`; the reference is never run here)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from cases013 import recorded
from conftest import CASES

from servesim.build.perf import num_blocks, timing_model
from servesim.config.load import parse_config
from servesim.errors import ConfigError

RECORDED = recorded("roles")
TRACE = CASES / "upstream013" / "one-request.jsonl"


def _config(engine: dict[str, Any]) -> Any:
    return parse_config({"engine": copy.deepcopy(engine),
                         "traffic": {"source": {"type": "trace", "paths": [str(TRACE)], "format": "mooncake",
                                                "block_size": 512},
                                     "load": {"type": "trace_timestamps"}}})


def _blocks(engine: dict[str, Any]) -> dict[str, int]:
    config = _config(engine)
    return {role: num_blocks(config.engine.for_role(worker), worker, role)
            for role, worker in config.engine.roles.items()}


def _label(row: dict[str, Any]) -> str:
    c = row["config"]
    return f"{c['backend']}-{c['hardware']}-" + "-".join(
        f"{role}:{c['workers'][role].get('hardware', '=')}" for role in ("prefill", "decode"))


@pytest.mark.parametrize("row", [r for r in RECORDED["cases"] if r["config"]["backend"] == "vllm"], ids=_label)
def test_each_role_sizes_its_pool_on_its_own_hardware_as_013(row: dict[str, Any]) -> None:
    """vLLM: each role's block count equals 0.13's estimate for it."""
    assert _blocks(row["config"]) == row["estimated_num_gpu_blocks"]
    assert len(set(row["estimated_num_gpu_blocks"].values())) == 2  # the roles do differ


@pytest.mark.parametrize("row", RECORDED["cases"], ids=_label)
def test_a_role_on_other_hardware_is_that_hardware_s_pool(row: dict[str, Any]) -> None:
    """Every backend: a role naming a GPU gets the pool (and pass times) it gets when the whole
    engine runs on that GPU. (SGLang's 0.13 estimate is not servesim's 0.1.0.dev2 pool, see
    docs/upstream013.md; the per-role rule is the same.)"""
    engine = row["config"]
    mixed = _config(engine)
    for role, worker in mixed.engine.roles.items():
        alone = copy.deepcopy(engine)
        alone["hardware"] = worker.hardware or engine["hardware"]
        for spec in alone["workers"].values():
            spec.pop("hardware", None)
        plain = _config(alone)
        plain_worker = getattr(plain.engine.workers, role)
        assert _blocks(engine)[role] == num_blocks(plain.engine, plain_worker, role)
        mine = timing_model(mixed.engine.for_role(worker), worker, role)
        theirs = timing_model(plain.engine, plain_worker, role)
        assert mine.prefill(1, 300, 0) == theirs.prefill(1, 300, 0)
        assert mine.decode(1, 300, 300, 10_000) == theirs.decode(1, 300, 300, 10_000)


NAMED = {
    "aggregated-with-hardware": "workers.aggregated.hardware: only allowed for prefill and decode workers",
    "auto-hardware": "'auto' is recommendation-only",
    "empty-hardware": "workers.prefill.hardware",
}


@pytest.mark.parametrize("name", sorted(RECORDED["verdicts"]))
def test_config_verdict_matches_013(name: str) -> None:
    """Refused (exit 2) where 0.13 refuses, naming the key and the rule."""
    verdict = RECORDED["verdicts"][name]
    assert verdict["exit_code"] == 2
    with pytest.raises(ConfigError) as info:
        _config(verdict["config"])
    assert NAMED[name] in str(info.value)
