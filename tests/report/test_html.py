"""The three HTML report kinds, opened in a real headless Chromium (see chromium.py).

Each must draw every chart (a `.main-svg` per Plotly graph, with its traces), log no script
error and load nothing from outside the file. With SERVESIM_SCREENSHOT_DIR set (e.g. docs/img),
the screenshots are written there; otherwise to a temporary folder.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

import servesim
from servesim.cli import main

pytest.importorskip("plotly")

CASES = Path(__file__).resolve().parents[1] / "cases"
VALIDATION = Path(__file__).resolve().parents[3] / "shared" / "data" / "llmservingsim-vllm-validation"


def _engine(workers: dict, mode: str = "aggregated") -> dict:
    return {"mode": mode, "model": "Qwen/Qwen3-8B", "hardware": "h200_sxm", "backend": "vllm",
            "context_length": 32768, "workers": workers}


def _pool(replicas: int, blocks: int = 3000, decode_ms: float = 8.0) -> dict:
    return {"parallelism": {"replicas": replicas, "tensor": 1},
            "scheduler": {"max_batched_tokens": 4096, "max_sequences": 64},
            "kv_cache": {"block_size": 32, "capacity": {"type": "fixed", "blocks": blocks}},
            "timing": {"type": "fixed", "prefill_ms": 25, "decode_ms": decode_ms}}


AGGREGATED = {
    "engine": _engine({"aggregated": _pool(3, blocks=900)}),
    "traffic": {"source": {"type": "synthetic-session", "new_input_tokens_per_turn": 512,
                           "output_tokens_per_turn": 64,
                           "session": {"turns": 3, "shared_prefix_ratio": 0.5, "prefix_groups": 4}},
                "load": {"type": "poisson", "sessions_per_second": 4, "seed": 11}, "stop": {"sessions": 200}},
    "router": {"policy": "kv_router"},
    "evaluation": {"sla": {"ttft_ms": 45, "itl_ms": 9.5}},
}
DISAGGREGATED = {
    "engine": {**_engine({"prefill": _pool(2), "decode": _pool(3)}, mode="disaggregated"),
               "kv_transfer": {"bandwidth_gb_per_second": 25}},
    "traffic": {"source": {"type": "synthetic", "input_tokens": 1024, "output_tokens": 96},
                "load": {"type": "poisson", "requests_per_second": 20, "seed": 3}, "stop": {"requests": 400}},
    "evaluation": {"sla": {"e2e_ms": 1200}},
}
WIDE = {  # more workers than the per-worker line limit
    "engine": _engine({"aggregated": _pool(20)}),
    "traffic": {"source": {"type": "synthetic", "input_tokens": 256, "output_tokens": 32},
                "load": {"type": "poisson", "requests_per_second": 150, "seed": 5}, "stop": {"requests": 2000}},
}


@pytest.fixture(scope="module")
def shots(tmp_path_factory) -> Path:
    folder = os.environ.get("SERVESIM_SCREENSHOT_DIR")
    return Path(folder) if folder else tmp_path_factory.mktemp("screenshots")


def _predict(config: dict | Path, out: Path, *extra: str) -> Path:
    if isinstance(config, dict):
        path = out.parent / f"{out.name}-config" / "config.json"  # JSON is YAML
        path.parent.mkdir()
        path.write_text(json.dumps(config))
        config = path
    assert main(["predict", "-c", str(config), "--output-dir", str(out), "--format", "json", "--report", *extra]) == 0
    return out / "report.html"


def _assert_clean(verdict: dict, charts: int) -> None:
    assert verdict["errors"] == []
    assert verdict["external"] == []
    assert verdict["plotly"]
    assert verdict["charts"] == charts
    assert verdict["rendered"] == charts, verdict
    assert all(n >= 1 for n in verdict["drawn"]), verdict


def _assert_screenshot(png: Path) -> None:
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000
    if os.environ.get("SERVESIM_SCREENSHOT_DIR") and shutil.which("pngquant"):  # small files for docs/img
        subprocess.run(["pngquant", "--quality", "60-85", "--speed", "1", "--force", "--ext", ".png", str(png)],
                       check=True)


def test_run_report_renders(browser, tmp_path, shots, capsys):
    page = _predict(AGGREGATED, tmp_path / "agg")
    verdict = browser.check(page)
    # 4 latency CDFs, traffic, and waiting / running / KV use / prefix hits of the one pool.
    _assert_clean(verdict, 9)
    assert verdict["titles"][:4] == ["Time to first token (ms)", "Time per output token (ms)",
                                     "Inter-token latency (ms)", "End-to-end latency (ms)"]
    assert verdict["drawn"][5:9] == [3, 3, 3, 3]  # one line per worker
    text = page.read_text()
    assert "Goodput (every per-request SLA target met)" in text and "SLA 45 ms" in text
    assert len(page.read_bytes()) < 6_000_000
    browser.screenshot(page, shots / "report-run.png", height=2300)
    _assert_screenshot(shots / "report-run.png")
    # Same config, same bytes.
    assert _predict(AGGREGATED, tmp_path / "again").read_bytes() == page.read_bytes()


def test_run_report_says_what_was_simulated_and_every_sla_verdict(browser, tmp_path):
    """The headline names the deployment and the load; each SLA target has a row saying met or
    missed, as prediction.json does, with its margin."""
    config = json.loads(json.dumps(AGGREGATED))
    config["evaluation"]["sla"]["e2e_ms"] = {"p90": 100_000, "p99": 1}
    page = _predict(config, tmp_path / "verdicts")
    _assert_clean(browser.check(page), 9)
    text = page.read_text()
    block = json.loads((tmp_path / "verdicts" / "prediction.json").read_text())["sla"]
    assert "<h2>What was simulated</h2>" in text and "<h2>SLA verdicts</h2>" in text
    for label, value in (("Model", "Qwen/Qwen3-8B"), ("GPU", "h200_sxm"), ("Deployment", "aggregated, 3 × (tp 1, pp 1, dp 1)"),
                         ("GPUs", "3"), ("Offered load", "Poisson 4 sessions/s"), ("Requests", "600")):
        cell = '<td class="num">' if value[0].isdigit() else "<td>"
        assert f"<td>{label}</td>{cell}{value}</td>" in text, label
    assert [(t["metric"], t["statistic"], t["met"]) for t in block["targets"]][2:] == [
        ("e2e_ms", "p90", True), ("e2e_ms", "p99", False)]
    assert block["met"] is False  # the p99 target cannot be met
    assert (f'<td>SLA verdict</td><td class="bad">MISSED — {block["targets_met"]} of 4 targets met '
            "(see SLA verdicts)</td>") in text
    assert '<td>E2E p90 ≤ 100000 ms</td><td class="good">MET</td>' in text
    assert '<td>E2E p99 ≤ 1 ms</td><td class="bad">MISSED</td>' in text
    for target in block["targets"][:2]:
        word = "MET" if target["met"] else "MISSED"
        assert f'ms per request</td><td class="{"good" if target["met"] else "bad"}">{word}</td>' in text
    assert f"{block['requests_within_all']:,} of {block['num_requests']:,} requests met all per-request targets" in text


def test_disaggregated_report_has_a_panel_set_per_pool(browser, tmp_path):
    verdict = browser.check(_predict(DISAGGREGATED, tmp_path / "disagg"))
    _assert_clean(verdict, 4 + 1 + 2 * 4)
    assert "prefill pool: waiting requests" in verdict["titles"]
    assert "decode pool: KV-cache use" in verdict["titles"]


def test_planner_report_shows_workers_and_decisions(browser, tmp_path):
    page = _predict(CASES / "dynamo" / "planner-load-kv-burst" / "config.yaml", tmp_path / "planner")
    verdict = browser.check(page)
    _assert_clean(verdict, 10)
    assert verdict["titles"][-1] == "Workers over time"
    prediction = json.loads((tmp_path / "planner" / "prediction.json").read_text())
    text = page.read_text()
    for event in prediction["planner"]["scaling_events"]:
        assert f"{event['from_count']} → {event['to_count']}" in text
    assert "kv_utilization" in text  # the diagnostics behind each decision


def test_large_pools_are_summarised(browser, tmp_path):
    page = _predict(WIDE, tmp_path / "wide")
    verdict = browser.check(page)
    _assert_clean(verdict, 9)
    assert verdict["drawn"][5] == 2  # pool total and busiest worker, not 20 lines
    assert "busiest worker" in page.read_text()


def test_python_api_writes_the_same_report(tmp_path):
    _predict(AGGREGATED, tmp_path / "cli")
    report = servesim.simulate(AGGREGATED, timeseries=True)
    report.write_html(tmp_path / "api.html", title="servesim prediction: config.json")
    assert (tmp_path / "api.html").read_bytes() == (tmp_path / "cli" / "report.html").read_bytes()
    with pytest.raises(ValueError, match="timeseries=True"):
        servesim.simulate(AGGREGATED).write_html(tmp_path / "x.html")


def _aiperf_export(path: Path, run: Path) -> Path:
    """An AIPerf-shaped export of a servesim run's records (send = arrival)."""
    rows = [json.loads(line) for line in (run / "requests.jsonl").read_text().splitlines()]
    with path.open("w") as out:
        for r in rows:
            start = int(r["arrival_time_ms"] * 1e6) + 1_700_000_000_000_000_000
            out.write(json.dumps({"metadata": {"request_start_ns": start}, "error": None, "metrics": {
                "time_to_first_token": {"value": r["ttft_ms"] * 1.1, "unit": "ms"},
                "request_latency": {"value": r["e2e_latency_ms"] * 1.1, "unit": "ms"},
                "output_sequence_length": {"value": r["output_length"], "unit": "tokens"}}}) + "\n")
    return path


def test_compare_renders(browser, tmp_path, shots, capsys):
    _predict(AGGREGATED, tmp_path / "a", "--capture-per-request")
    faster = json.loads(json.dumps(AGGREGATED))
    faster["engine"]["workers"]["aggregated"]["timing"]["decode_ms"] = 6.0
    _predict(faster, tmp_path / "b")  # no per-request records: drawn from its percentiles
    runs = [str(tmp_path / "a"), str(tmp_path / "b"), str(_aiperf_export(tmp_path / "bench.jsonl", tmp_path / "a"))]
    if VALIDATION.is_dir():
        runs.append(str(VALIDATION / "examples" / "RTXPRO6000" / "Llama-3.1-8B" / "vllm" / "requests.jsonl"))
    out = tmp_path / "compare.html"
    assert main(["compare", *runs, "-o", str(out), "--sla-ttft-ms", "300"]) == 0
    verdict = browser.check(out)
    _assert_clean(verdict, 4)
    assert verdict["drawn"] == [len(runs)] * 4
    text = out.read_text()
    assert "bench vs a" in text and "+10.0%" in text  # the AIPerf copy is 10 % slower in TTFT
    browser.screenshot(out, shots / "report-compare.png", height=1500)
    _assert_screenshot(shots / "report-compare.png")


def test_compare_rejects_bad_input(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"send_ts": 1}\n')
    assert main(["compare", str(bad), "-o", str(tmp_path / "c.html")]) == 1
    assert "bad.jsonl:1: no end time" in capsys.readouterr().err
    assert not (tmp_path / "c.html").exists()


def _ledger(tmp_path: Path) -> Path:
    """A search ledger from real replays of a small space (replicas × batch limit), with an
    over-budget candidate that never ran and one that misses the SLA."""
    out = tmp_path / "search"
    (out / "recommendations").mkdir(parents=True)
    sla = {"ttft_ms": 500.0, "itl_ms": 10.0}
    candidates, number = [], 0
    for replicas in (1, 2, 3, 4, 8):
        for max_sequences in (4, 16, 64):
            number += 1
            knobs = {"replicas": replicas, "max_sequences": max_sequences}
            if replicas == 8:
                candidates.append({"id": number, "knobs": knobs, "gpus": 8, "metrics": None, "score": None,
                                   "feasible": False, "reason": "over budget: 8 GPUs > max_candidate_gpus 4"})
                continue
            config = json.loads(json.dumps(DISAGGREGATED))
            config["engine"] = _engine({"aggregated": _pool(replicas)})
            config["engine"]["workers"]["aggregated"]["scheduler"]["max_sequences"] = max_sequences
            config["traffic"]["load"]["requests_per_second"] = 30
            metrics = servesim.simulate(config).summary
            ok = metrics["p90_ttft_ms"] <= sla["ttft_ms"] and metrics["p90_itl_ms"] <= sla["itl_ms"]
            candidates.append({"id": number, "knobs": knobs, "gpus": replicas, "metrics": metrics,
                               "score": metrics["output_throughput_tok_s"] / replicas if ok else None,
                               "feasible": ok, "reason": None if ok else "SLA: p90 TTFT or ITL over target"})
    feasible = sorted((c for c in candidates if c["feasible"]), key=lambda c: -c["score"])
    for rank, c in enumerate(feasible, 1):
        c["rank"] = rank
        c["recommendation"] = f"recommendations/{rank:04d}.yaml"
        (out / c["recommendation"]).write_text(json.dumps(c["knobs"]))
    ledger = out / "recommendation.json"
    ledger.write_text(json.dumps({"target": "throughput_per_gpu", "algorithm": "grid", "sla": sla,
                                  "constraints": {"max_candidate_gpus": 4}, "candidates": candidates}))
    return ledger


def test_search_report_renders(browser, tmp_path, shots):
    from servesim.report.html.search import write_search_report

    ledger = _ledger(tmp_path)
    page = ledger.parent / "report.html"
    write_search_report(ledger, page)
    verdict = browser.check(page)
    _assert_clean(verdict, 1)
    assert verdict["titles"] == ["Throughput per GPU vs per user"]
    candidates = json.loads(ledger.read_text())["candidates"]
    text = page.read_text()
    ranked = [c for c in candidates if c.get("rank")]
    assert ranked and all(f'href="{c["recommendation"]}"' in text for c in ranked)
    assert all((ledger.parent / c["recommendation"]).is_file() for c in ranked)
    assert "over budget: 8 GPUs" in text
    infeasible_ran = [c for c in candidates if not c["feasible"] and c["metrics"]]
    assert verdict["drawn"][0] == (1 if infeasible_ran else 0) + 2  # infeasible, feasible, Pareto front
    browser.screenshot(page, shots / "report-search.png", height=1300)
    _assert_screenshot(shots / "report-search.png")
