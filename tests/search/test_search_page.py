"""The search page of a real `recommend` run, opened in a real headless Chromium at 1400 px:
the capacity curve per shape, misses drawn as misses, the answer and nothing cut off."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from search_helpers import config

pytest.importorskip("plotly")

SPACE = config(**{
    "optimization.sla_attainment": 0.9,
    "engine.backend": {"choices": ["vllm", "sglang"]},
    "engine.workers.aggregated.parallelism": {"preset": False, "tensor": {"choices": [1, 2]},
                                               "replicas": {"range": {"min": 1, "max": 8, "step": 1}}},
    "engine.workers.aggregated.scheduler.max_sequences": {"choices": [8, 16]},
    "optimization.constraints.max_candidate_gpus": 8,
    "traffic.load": {"type": "poisson", "requests_per_second": 50.0, "seed": 2}, "traffic.stop.requests": 300,
    "optimizer.algorithm": "bayesian", "optimizer.max_trials": 30})


def _recommend(tmp_path: Path, data: dict) -> tuple[subprocess.CompletedProcess, Path]:
    path = tmp_path / "recommend.yaml"
    path.write_text(yaml.safe_dump(data))
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "servesim", "recommend", "-c", str(path), "--output-dir", str(out),
                           "--report"], capture_output=True, text=True, timeout=300)
    return done, out


def test_the_search_page_shows_the_capacity_curve_and_fits_1400_px(browser, tmp_path: Path) -> None:
    done, out = _recommend(tmp_path, SPACE)
    assert done.returncode == 0, done.stderr
    ledger = json.loads((out / "recommendation.json").read_text())
    page = out / "report.html"
    verdict = browser.check(page, width=1400)
    assert verdict["errors"] == [] and verdict["external"] == []
    assert verdict["titles"] == ["Capacity curve: SLA-meeting request rate against GPUs", "Throughput per GPU vs per user"]
    assert verdict["rendered"] == 2
    # one line per sized shape; on the Pareto chart misses, qualifying candidates and the front
    assert verdict["traces"][0] == len(ledger["sizing"]) >= 2
    missed = [c for c in ledger["candidates"] if c["status"] == "misses_target"]
    assert missed and verdict["traces"][1] == 3
    assert verdict["viewport"] == 1400 and verdict["page_width"] <= 1400 and verdict["cut_off"] == [], verdict
    text = page.read_text()
    for row in ledger["sizing"]:  # the sizing table: "4 fails, 6 holds" per shape
        assert f"<td>{row['mode'][:5]} {row['shape']}</td><td class=\"num\">{row['fewest_gpus']}</td>" in text
    assert f"{ledger['coverage']['evaluated']} of {ledger['coverage']['space']} candidates evaluated" in text
    assert all(f"<td>#{c['trial']}</td>" in text for c in missed)
    assert "Missed the target" in text and "SLA met" in text
    shots = Path(os.environ.get("SERVESIM_SCREENSHOT_DIR") or tmp_path)
    browser.screenshot(page, shots / "report-search-sizing.png", width=1400, height=2400)
    assert (shots / "report-search-sizing.png").stat().st_size > 20_000


def test_with_no_qualifying_candidate_the_page_names_the_closest(browser, tmp_path: Path) -> None:
    data = config(SPACE, **{"evaluation.sla": {"ttft_ms": 1, "itl_ms": 1}, "optimizer.max_trials": 8})
    done, out = _recommend(tmp_path, data)
    assert done.returncode == 1
    ledger = json.loads((out / "recommendation.json").read_text())
    text = (out / "report.html").read_text()
    assert "No candidate meets the target" in text
    assert f"closest: #{ledger['closest']} " in text
    verdict = browser.check(out / "report.html", width=1400)
    assert verdict["errors"] == [] and verdict["cut_off"] == [] and "Top" not in text.split("<main>")[1].split("Missed")[0]
