"""The scheduler's prefill intervals (issue 34): `prefill_schedule_interval` (vLLM, attention DP)
and `prefill_decode_interval` (SGLang), checked against AISimulate 0.13's recorded runs
(`tests/cases/upstream013/intervals.json`, recorded by
`benchmarks/record_013_power_prefix_intervals.py`; the reference is never run here)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from cases013 import assert_reports_match, recorded, run, with_trace, assert_verdict_matches


RECORDED = recorded("intervals")
RUNS = RECORDED["cases"]
RECORD_FIELDS = ("output_length", "first_admit_ms", "first_token_ms", "last_token_ms", "ttft_ms", "e2e_latency_ms")


def _report(name: str, tmp_path: Path) -> dict[str, Any]:
    case = RUNS[name]
    return run(with_trace(case["config"], case["trace"], tmp_path))


def _run(name: str, tmp_path: Path) -> list[dict[str, Any]]:
    return _ordered(_report(name, tmp_path)["per_request"])


def _ordered(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(records, key=lambda r: (r["arrival_time_ms"], r["session_id"]))


@pytest.mark.parametrize("name", sorted(RUNS))
def test_runs_match_013_field_for_field(name: str, tmp_path: Path) -> None:
    """Under 0.13's pass convention, with the interval on or off: every summary field both
    report, and every request's rank, admission and token times, equal 0.13's."""
    ours, theirs = _report(name, tmp_path), RUNS[name]["report"]
    assert_reports_match(ours, theirs, RECORD_FIELDS)
    for mine, record in zip(_ordered(ours["per_request"]), _ordered(theirs["per_request"]), strict=True):
        assert mine["routing_history"][0]["dp_rank"] == record["routing_history"][0]["dp_rank"]


def _admissions(records: list[dict[str, Any]]) -> list[float]:
    return [r["first_admit_ms"] for r in _ordered(records)]


@pytest.mark.parametrize("family, same, different", [
    ("vllm-dp2-gap", None, ("n2", "n3")),
    ("vllm-dp2-queued", ("n1", "n3"), None),
    ("vllm-dp4-queued", ("n1", "n3"), None),
    ("vllm-dp1-queued", ("n1", "n3"), None),
    ("sglang-gap", ("n0", "n1"), ("n1", "n2")),
    ("sglang-staggered", None, ("n1", "n2")),
])
def test_interval_matters_where_it_does_in_013(family: str, same: tuple[str, str] | None,
                                              different: tuple[str, str] | None, tmp_path: Path) -> None:
    """Where 0.13's interval changes the admissions, servesim's does; where it does not (all
    requests queued at once; no attention DP; an interval the decode rounds cover), neither
    does servesim's."""
    def theirs(n: str) -> list[float]:
        return _admissions(RUNS[f"{family}-{n}"]["report"]["per_request"])

    def ours(n: str) -> list[float]:
        return _admissions(_run(f"{family}-{n}", tmp_path))

    if same is not None:
        assert theirs(same[0]) == theirs(same[1])
        assert ours(same[0]) == ours(same[1])
    if different is not None:
        assert theirs(different[0]) != theirs(different[1])
        assert ours(different[0]) != ours(different[1])


NAMED = {
    "vllm-interval-zero": "prefill_schedule_interval: must be > 0",
    "vllm-interval-float": "prefill_schedule_interval: must be an integer",
    "vllm-with-decode-interval": "scheduler.prefill_decode_interval: is supported only for backend 'sglang'",
    "sglang-with-schedule-interval": "scheduler.prefill_schedule_interval: is supported only for backend 'vllm'",
    "sglang-decode-interval-negative": "prefill_decode_interval: must be >= 0",
    "sglang-decode-interval-bool": "prefill_decode_interval: must be an integer",
    "trtllm-with-schedule-interval": "scheduler.prefill_schedule_interval: is supported only for backend 'vllm'",
}


@pytest.mark.parametrize("name", sorted(RECORDED["verdicts"]))
def test_config_verdict_matches_013(name: str, tmp_path: Path) -> None:
    """Accepted where 0.13 exits 0, refused (exit 2) where it does, naming the key and the rule."""
    verdict = RECORDED["verdicts"][name]
    config = with_trace(verdict["config"], RUNS["vllm-dp2-gap-n1"]["trace"], tmp_path)
    assert_verdict_matches(verdict["exit_code"], config, NAMED.get(name))
