"""SLA verdicts (report/sla.py) and the report's headline, from real runs.

Percentile targets (`ttft_ms: {p90: 500}`) parse beside the reference's per-request numbers and
bad ones are config errors naming the key; every target's verdict is checked against the run's
own per-request records and summary statistics; the table, the JSON and `--compat reference`
(where nothing of this may appear) are checked through the CLI.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

import servesim
from servesim.cli import main
from servesim.config import load_config, parse_config
from servesim.errors import ConfigError
from servesim.report.headline import headline_lines

CASES = Path(__file__).resolve().parents[1] / "cases"
CASE02 = CASES / "replay/02-polynomial-poisson-sla/config.yaml"
"""30 Poisson requests with an SLA of ttft_ms 60 + itl_ms 20 that most requests miss."""


def _case02(sla: dict[str, Any] | None = None, **top: Any) -> dict[str, Any]:
    config = yaml.safe_load(CASE02.read_text())
    if sla is not None:
        config["evaluation"] = {"sla": sla}
    return {**config, **top}


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _write(tmp_path: Path, config: dict[str, Any]) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


# -- configuration ----------------------------------------------------------------------------


def test_percentile_targets_parse_beside_per_request_numbers() -> None:
    sla = parse_config(_case02({"ttft_ms": 500, "itl_ms": {"p99": 50, "p50": 20}, "e2e_ms": {"mean": 900}})
                       ).evaluation.sla
    assert sla is not None
    assert sla.per_request("ttft_ms") == 500.0 and sla.per_request("itl_ms") is None
    # Report order: metric, then p50 p90 p95 p99 mean, whatever order the YAML had.
    assert sla.run_targets() == [("itl_ms", "p50", 20.0), ("itl_ms", "p99", 50.0), ("e2e_ms", "mean", 900.0)]


def test_reference_form_keeps_the_reference_combination_rules() -> None:
    with pytest.raises(ConfigError, match="evaluation.sla.itl_ms: is required"):
        parse_config(_case02({"ttft_ms": 60}))
    # With a percentile target (servesim's form) a per-request ttft_ms may stand alone.
    assert parse_config(_case02({"ttft_ms": 60, "e2e_ms": {"p90": 400}})).evaluation.sla is not None


@pytest.mark.parametrize(("sla", "message"), [
    ({"ttft_ms": {"p85": 500}}, "evaluation.sla.ttft_ms.p85: unknown statistic; use one of p50, p90, p95, p99, mean"),
    ({"itl_ms": {"p99": 0}}, "evaluation.sla.itl_ms.p99: must be a finite number > 0 (got 0)"),
    ({"itl_ms": {"p99": "50"}}, "evaluation.sla.itl_ms.p99: must be a finite number > 0 (got '50')"),
    ({"e2e_ms": {"mean": True}}, "evaluation.sla.e2e_ms.mean: must be a finite number > 0 (got true)"),
    ({"e2e_ms": {}}, "evaluation.sla.e2e_ms: a mapping of percentile targets must name at least one"),
    ({"e2e_ms": [100]}, "evaluation.sla.e2e_ms: must be a finite number > 0 (a per-request threshold) or a mapping"),
    ({"e2e_ms": -5}, "evaluation.sla.e2e_ms: must be a finite number > 0"),
])
def test_bad_targets_are_config_errors_naming_the_key(sla: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        parse_config(_case02(sla))


def test_bad_target_exits_2_naming_the_key(tmp_path, capsys) -> None:
    code, _, err = _run(capsys, "predict", "-c", str(CASE02), "--output-dir", str(tmp_path / "o"),
                        "--set", "evaluation.sla={ttft_ms: {p999: 5}}")
    assert code == 2 and "evaluation.sla.ttft_ms.p999: unknown statistic" in err


def test_planner_throughput_scaling_needs_per_request_numbers() -> None:
    config = _case02({"ttft_ms": {"p90": 500}, "itl_ms": {"p90": 50}},
                     planner={"policy": "enabled", "target": "sla", "enable_throughput_scaling": True,
                              "enable_load_scaling": False})
    with pytest.raises(ConfigError, match="planner.enable_throughput_scaling: needs .* \\(per-request numbers\\)"):
        parse_config(config)


# -- verdicts from real runs ------------------------------------------------------------------


def _within(records: list[dict[str, Any]], metric: str, bound: float) -> int:
    """Requests within a per-request bound, judged from the records (completed ones only)."""
    done = [r for r in records if r["terminal_status"] == "completed"]
    if metric == "ttft_ms":
        return sum(r["ttft_ms"] <= bound for r in done)
    if metric == "e2e_ms":
        return sum(r["e2e_latency_ms"] <= bound for r in done)
    return sum(r["output_length"] < 2 or r["itl_ms"] <= bound for r in done)


def test_verdicts_of_a_run_with_met_and_missed_targets() -> None:
    sla = {"ttft_ms": 60, "itl_ms": 20, "e2e_ms": {"p90": 100, "mean": 1000}}
    report = servesim.simulate(_case02(sla), capture_per_request=True)
    summary, records = report.summary, report.per_request
    assert records is not None
    block = summary["sla"]
    ttft, itl, e2e_p90, e2e_mean = block["targets"]
    assert [(t["metric"], t["statistic"]) for t in block["targets"]] == [
        ("ttft_ms", "per_request"), ("itl_ms", "per_request"), ("e2e_ms", "p90"), ("e2e_ms", "mean")]
    # Per-request targets: the worst request, and how many were within, from the records.
    assert ttft["achieved"] == max(r["ttft_ms"] for r in records) == summary["max_ttft_ms"]
    assert itl["achieved"] == pytest.approx(max(r["itl_ms"] for r in records if r["output_length"] >= 2),
                                            rel=1e-12)
    assert ttft["requests_within"] == _within(records, "ttft_ms", 60) and 0 < ttft["requests_within"] < 30
    assert itl["requests_within"] == _within(records, "itl_ms", 20)
    assert ttft["share_within"] == ttft["requests_within"] / 30
    assert block["requests_within_all"] == summary["goodput_completed_requests"] == 2
    # Run-level targets read the summary's own statistics.
    assert e2e_p90["achieved"] == summary["p90_e2e_latency_ms"] > 100
    assert e2e_mean["achieved"] == summary["mean_e2e_latency_ms"] < 1000
    # Met and missed, with the margin's sign: target − achieved (headroom is positive).
    assert [t["met"] for t in block["targets"]] == [False, False, False, True]
    for target in block["targets"]:
        assert target["margin_ms"] == target["target"] - target["achieved"]
        assert target["margin_pct"] == pytest.approx(100 * target["margin_ms"] / target["target"])
        assert (target["margin_ms"] >= 0) == target["met"]
    assert block["met"] is False and block["targets_met"] == 1
    assert (block["num_requests"], block["completed_requests"]) == (30, 30)


def test_a_run_meeting_every_target_is_met() -> None:
    loose = servesim.simulate(_case02({"ttft_ms": 10_000, "itl_ms": {"p99": 1000}, "e2e_ms": {"p50": 5000}}))
    block = loose.summary["sla"]
    assert block["met"] is True and block["targets_met"] == 3
    assert all(t["margin_ms"] > 0 for t in block["targets"])
    assert block["targets"][0]["requests_within"] == 30
    assert block["targets"][1]["achieved"] == loose.summary["p99_itl_ms"]
    assert block["targets"][2]["achieved"] == loose.summary["median_e2e_latency_ms"]
    # ttft_ms alone per request (servesim's form): goodput counts the requests within it.
    assert loose.summary["goodput_completed_requests"] == 30


def test_percentile_targets_alone_leave_goodput_out() -> None:
    summary = servesim.simulate(_case02({"ttft_ms": {"p90": 500}})).summary
    assert "goodput_completed_requests" not in summary and "requests_within_all" not in summary["sla"]
    assert summary["sla"]["met"] is True


@settings(max_examples=15, deadline=None)
@given(bound=st.floats(min_value=20.0, max_value=140.0, allow_nan=False))
def test_per_request_verdict_agrees_with_the_records(bound: float) -> None:
    """For any threshold: the count within it is the records', and it is met exactly when the
    worst request is within it."""
    report = servesim.simulate(_case02({"ttft_ms": bound, "itl_ms": 1000}), capture_per_request=True)
    assert report.per_request is not None
    ttft = report.summary["sla"]["targets"][0]
    assert ttft["requests_within"] == _within(report.per_request, "ttft_ms", bound)
    assert ttft["met"] == (ttft["achieved"] <= bound) == (ttft["requests_within"] == 30)


def test_no_completed_request_misses_every_target() -> None:
    """A run whose only request is rejected: within no per-request target, and no sample for a
    run-level one — nothing is met (an empty distribution's zeros are not a pass)."""
    config = load_config(CASES / "engine/05-trtllm-no-evict/config-vllm-overlong.yaml",
                         ["evaluation.sla={e2e_ms: 1000000000, ttft_ms: {p99: 1000000000}}"])
    block = servesim.simulate(config).summary["sla"]
    assert block["completed_requests"] == 0 and block["num_requests"] == 1
    e2e, ttft = block["targets"]
    assert (e2e["requests_within"], e2e["met"]) == (0, False)
    assert (ttft["achieved"], ttft["met"], ttft["margin_ms"]) == (None, False, None)
    assert block["met"] is False


# -- outputs ----------------------------------------------------------------------------------


def test_table_says_missed_when_no_request_meets_the_sla(tmp_path, capsys) -> None:
    config = _write(tmp_path, _case02({"ttft_ms": 1, "itl_ms": 1, "e2e_ms": {"p99": 5000}}))
    code, out, _ = _run(capsys, "predict", "-c", str(config), "--output-dir", str(tmp_path / "o"))
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "servesim: Qwen/Qwen3-8B on h200_sxm · vllm · aggregated, 1 × (tp 1, pp 1, dp 1) · 1 GPU"
    assert lines[1] == "Load: Poisson 40 req/s · 30 requests · synthetic 700 → 6 tokens"
    verdict = lines.index("SLA: 0 of 30 requests met all per-request targets; 1 of 3 targets met — MISSED")
    assert lines[verdict + 1].split()[:6] == ["TTFT", "≤", "1", "ms", "per", "request"]
    assert "MISSED" in lines[verdict + 1] and "0 requests within (0.0%)" in lines[verdict + 1]
    assert lines[verdict + 3].startswith("  E2E p99 ≤ 5000 ms") and " MET " in lines[verdict + 3]
    assert lines[-1].startswith("Saved full report to:")


def test_json_has_the_sla_block(tmp_path, capsys) -> None:
    config = _write(tmp_path, _case02({"ttft_ms": 60, "itl_ms": {"p99": 50}}))
    code, out, _ = _run(capsys, "predict", "-c", str(config), "--output-dir", str(tmp_path / "o"), "--format", "json")
    assert code == 0
    line = json.loads(out)
    saved = json.loads((tmp_path / "o" / "prediction.json").read_text())
    assert line["sla"] == saved["sla"]
    block = saved["sla"]
    assert set(block) == {"met", "targets_met", "num_requests", "completed_requests", "targets",
                          "requests_within_all"}
    per_request, run_level = block["targets"]
    common = {"metric", "statistic", "target", "achieved", "met", "margin_ms", "margin_pct"}
    assert set(per_request) == common | {"requests_within", "share_within"} and set(run_level) == common
    assert isinstance(per_request["requests_within"], int) and isinstance(per_request["met"], bool)
    assert (run_level["metric"], run_level["statistic"], run_level["target"]) == ("itl_ms", "p99", 50.0)


def test_compat_reference_output_is_the_reference_one(tmp_path, capsys) -> None:
    """Under --compat reference neither the headline nor the verdicts appear: stdout is the
    reference's recorded table (apart from its wall time and folder) and prediction.json has
    exactly its fields; --reference-fields leaves the `sla` block out too."""
    out_dir = tmp_path / "ref"
    code, out, _ = _run(capsys, "predict", "-c", str(CASE02), "--output-dir", str(out_dir), "--compat", "reference")
    assert code == 0
    expected = CASE02.with_name("stdout.txt").read_text().replace("<output-dir>", str(out_dir))

    def no_wall(text: str) -> list[str]:
        return [line for line in text.splitlines() if not line.startswith("Wall Time (ms):")]

    assert no_wall(out) == no_wall(expected) and out.endswith("\n") == expected.endswith("\n")
    reference = json.loads(CASE02.with_name("report.json").read_text())
    reference.pop("per_request", None)
    assert set(json.loads((out_dir / "prediction.json").read_text())) == set(reference)
    code, out, _ = _run(capsys, "predict", "-c", str(CASE02), "--output-dir", str(tmp_path / "rf"),
                        "--reference-fields", "--format", "json")
    assert code == 0 and "sla" not in json.loads(out) and "goodput_completed_requests" in json.loads(out)


def test_headline_of_a_disaggregated_run_and_provenance() -> None:
    config = yaml.safe_load((CASES / "replay/11-disagg-kv-transfer/config.yaml").read_text())
    config["engine"]["backend_version"] = "0.19.0"
    report = servesim.simulate(copy.deepcopy(config))
    workers = config["engine"]["workers"]
    gpus = sum(w.get("parallelism", {}).get("replicas", 1) * w.get("parallelism", {}).get("tensor", 1)
               for w in workers.values())
    lines = headline_lines(report.deployment, report.summary, {"timing": "aic", "version": "0.3.0"})
    assert lines[0].startswith(f"servesim: {config['engine']['model']} on {config['engine']['hardware']} · vllm 0.19.0 · "
                               "disaggregated, prefill ")
    assert " + decode " in lines[0] and lines[0].endswith(f" · {gpus} GPU" + ("s" if gpus > 1 else ""))
    assert f"{report.summary['num_requests']:,} requests" in lines[1]
    assert lines[2] == "Provenance: timing aic · version 0.3.0"
