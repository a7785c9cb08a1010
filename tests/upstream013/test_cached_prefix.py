"""Synthetic `cached_prefix_tokens` (issue 34), checked against AISimulate 0.13's recorded runs
(`tests/cases/upstream013/cached-prefix.json`, recorded by
`benchmarks/record_013_power_prefix_intervals.py`; the reference is never run here)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from cases013 import assert_reports_match, recorded, run, assert_verdict_matches

from servesim.config.load import parse_config
from servesim.errors import ConfigError

RECORDED = recorded("cached-prefix")
CASES_013 = RECORDED["cases"]
RECORD_FIELDS = ("reused_input_tokens", "input_length", "output_length", "admission_count", "readmission_count",
                 "terminal_status", "first_admit_ms", "ttft_ms", "e2e_latency_ms", "itl_ms", "ttst_ms")


@pytest.mark.parametrize("name", sorted(CASES_013))
def test_prefix_reuse_matches_013_field_for_field(name: str) -> None:
    """Under 0.13's pass convention every summary field both report, and every request's reuse
    (per admission) and times, equal 0.13's."""
    case = CASES_013[name]
    ours, theirs = run(case["config"]), case["report"]
    assert_reports_match(ours, theirs, RECORD_FIELDS)
    assert theirs["prefix_cache_reused_ratio"] > 0
    mine = {r["session_id"]: r for r in ours["per_request"]}
    for record in theirs["per_request"]:
        assert [h["reused_input_tokens"] for h in mine[record["session_id"]]["admission_history"]] == \
            [h["reused_input_tokens"] for h in record["admission_history"]]


def _renamed(report: dict[str, Any]) -> dict[str, Any]:
    """A trace run's report with its `request_N` sessions named as synthetic ones."""
    for key in ("wall_time_ms", "processed_tokens_per_s", "processed_output_tokens_per_s", "provenance"):
        report.pop(key, None)
    for record in report["per_request"]:
        record.pop("uuid", None)
        if record["session_id"].startswith("request_"):
            record["session_id"] = f"session_{int(record['session_id'].split('_')[1]) - 1}"
    report["per_request"].sort(key=lambda r: (r["arrival_time_ms"], r["session_id"]))
    return report


@pytest.mark.parametrize("name", sorted(CASES_013))
def test_synthetic_prefix_runs_like_the_trace_holding_it_as_in_013(name: str, tmp_path: Path) -> None:
    """0.13's report of the synthetic source equals its report of a mooncake trace whose prompts
    share exactly the prefix; servesim's reports relate the same way (token-exact sharing, so
    the block holding the prefix's end is nobody's hit)."""
    case = CASES_013[name]
    assert case["same_as_trace"] is True
    (tmp_path / "trace.jsonl").write_text(case["trace"])
    traced = copy.deepcopy(case["trace_config"])
    traced["traffic"]["source"]["paths"] = [str(tmp_path / "trace.jsonl")]
    assert _renamed(run(case["config"])) == _renamed(run(traced))


NAMED = {
    "over-input": "cached_prefix_tokens: must be <= input_tokens (1000); got 1001",
    "negative": "cached_prefix_tokens: must be >= 0",
    "float": "cached_prefix_tokens: must be an integer",
    "string": "cached_prefix_tokens: must be an integer",
    "bool": "cached_prefix_tokens: must be an integer",
}


@pytest.mark.parametrize("name", sorted(RECORDED["verdicts"]))
def test_config_verdict_matches_013(name: str) -> None:
    """Accepted where 0.13 exits 0, refused (exit 2) where it does, naming the key and the rule."""
    verdict = RECORDED["verdicts"][name]
    assert_verdict_matches(verdict["exit_code"], copy.deepcopy(verdict["config"]), NAMED.get(name))


def test_only_single_turn_synthetic_sources_take_it() -> None:
    config = copy.deepcopy(CASES_013["vllm-600-of-1000-bs16"]["config"])
    config["traffic"]["source"] = {"type": "synthetic-session", "session": {"turns": 2}, "cached_prefix_tokens": 1}
    with pytest.raises(ConfigError, match="cached_prefix_tokens"):
        parse_config(config)


def test_zero_changes_nothing() -> None:
    config = copy.deepcopy(CASES_013["vllm-600-of-1000-bs16"]["config"])
    config["traffic"]["source"]["cached_prefix_tokens"] = 0
    plain = copy.deepcopy(config)
    del plain["traffic"]["source"]["cached_prefix_tokens"]
    assert _renamed(run(config)) == _renamed(run(plain))
