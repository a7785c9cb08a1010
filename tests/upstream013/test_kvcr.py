"""The peer G2 fetch (`kv_cache.kvcr`, issue 34), checked against AISimulate 0.13's recorded runs
(`tests/cases/upstream013/kvcr.json`, recorded by `benchmarks/record_013_kvcr.py`; the reference
is never run here). 0.13's predict authors no KV hints, so no pull happens: a run with kvcr is the
run without it plus an all-zero `kvcr` summary section — in 0.13 and in servesim."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from cases013 import assert_verdict_matches
from conftest import CASES

from servesim import simulate
from servesim.config.load import parse_config

RECORDED = json.loads((CASES / "upstream013" / "kvcr.json").read_text())
SCENARIOS = RECORDED["scenarios"]
FIELDS = ("arrival_time_ms", "input_length", "first_admit_ms", "ttft_ms", "e2e_latency_ms", "reused_input_tokens",
          "first_admission_g1_reused_input_tokens", "first_admission_host_reused_input_tokens", "admission_count",
          "admission_history")
PACERS = 2


def _config(scenario: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(json.dumps(r) + "\n" for r in scenario["trace"]))
    config = copy.deepcopy(scenario["config"])
    config["traffic"]["source"]["paths"] = [str(trace)]
    return config


def _run(scenario: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    return simulate(parse_config(_config(scenario, tmp_path)), capture_per_request=True).to_dict()


def _records(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The compared fields of every request but the pacers (one per rank), as recorded."""
    ordered = sorted(report["per_request"], key=lambda r: (r["arrival_time_ms"], r["input_length"],
                                                          r.get("first_admit_ms") or 0.0))
    return [{k: r.get(k) for k in FIELDS} for r in ordered[PACERS:]]


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_requests_and_kvcr_section_match_013(name: str, tmp_path: Path) -> None:
    """Every request's admissions, times and reused tokens per tier, and the `kvcr` section
    (present exactly when kvcr is configured), equal 0.13's."""
    scenario = SCENARIOS[name]
    report = _run(scenario, tmp_path)
    assert _records(report) == scenario["requests"]
    assert report.get("kvcr") == scenario["kvcr"]


@pytest.mark.parametrize("name", ["replicas", "attention-dp"])
def test_kvcr_changes_nothing_but_its_section(name: str) -> None:
    """In 0.13's own records: kvcr on two workers or two DP ranks, whose prefixes come back from
    host memory (so the tier matters), gives the records of the run without it, and no pulls."""
    with_kvcr, plain = SCENARIOS[name], SCENARIOS[f"{name}-plain"]
    assert sum(r["first_admission_host_reused_input_tokens"] for r in plain["requests"]) == 1280
    assert with_kvcr["requests"] == plain["requests"]
    assert with_kvcr["kvcr"]["pulls"] == {"partial": 0, "success": 0} and plain["kvcr"] is None


NAMED = {
    "no-host-tier": "kvcr: requires host_offload",
    "with-g3": "kvcr: cannot be combined with g3_offload",
    "pipeline": "kvcr: requires parallelism.pipeline: 1",
    "negative-bandwidth": "bandwidth_gbps: must be >= 0",
    "unknown-key": "bandwidth",
}


def _verdict_config(changes: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    config = _config(SCENARIOS["replicas-plain"], tmp_path)
    config["engine"]["workers"]["aggregated"].pop("parallelism")
    for path, value in changes.items():
        node = config["engine"]["workers"]["aggregated"]
        parts = path.split(".")
        for part in parts[:-1]:
            node = node[part]
        if value is None:
            node.pop(parts[-1], None)
        else:
            node[parts[-1]] = value
    return config


@pytest.mark.parametrize("name", sorted(RECORDED["verdicts"]))
def test_config_verdict_matches_013(name: str, tmp_path: Path) -> None:
    """Refused (exit 2) where 0.13 refuses, naming the key and the rule; accepted where it accepts."""
    verdict = RECORDED["verdicts"][name]
    config = _verdict_config(verdict["changes"], tmp_path)
    assert_verdict_matches(verdict["exit_code"], config, NAMED.get(name))
