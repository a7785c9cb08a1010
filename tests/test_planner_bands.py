"""The planner against the Dynamo reference stack's burst case (5 → 40 → 2 req/s, load target,
10 s startup): peak workers within ±1, GPU-hours within ±20 % and mean TTFT within ±30 % of
the reference's runs, and the same scale-up steps."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from servesim import simulate
from servesim.config import load_config

CASE = Path(__file__).parent / "cases" / "dynamo" / "planner-load-kv-burst"


@pytest.fixture(scope="module")
def report() -> dict:
    return simulate(load_config(CASE / "config.yaml")).to_dict()


@pytest.fixture(scope="module")
def runs() -> list[dict]:
    return json.loads((CASE / "runs.json").read_text())["runs"]


def test_peak_workers_gpu_hours_and_ttft_are_in_band(report, runs):
    reference_peak = max(max(e["to_count"] for e in run["scaling_events"]) for run in runs)
    assert abs(report["planner"]["peak_workers"]["decode"] - reference_peak) <= 1
    assert report["gpu_hours"] == pytest.approx(statistics.mean(r["gpu_hours"] for r in runs), rel=0.20)
    assert report["mean_ttft_ms"] == pytest.approx(statistics.mean(r["mean_ttft_ms"] for r in runs), rel=0.30)


def test_scale_ups_match_the_reference(report, runs):
    ups = [(e["at_s"], e["from_count"], e["to_count"]) for e in report["planner"]["scaling_events"]
           if e["reason"] == "scale_up"]
    reference = [(e["at_s"], e["from_count"], e["to_count"]) for e in runs[0]["scaling_events"]
                 if e["reason"] == "scale_up"]
    assert ups == reference == [(5.0, 1, 2), (35.0, 2, 3), (50.0, 3, 4)]


def test_fleet_returns_to_one_worker_and_the_timeline_follows(report):
    planner = report["planner"]
    downs = [e for e in planner["scaling_events"] if e["reason"] == "scale_down"]
    assert [e["to_count"] for e in downs] == [3, 2, 1]
    assert all(80.0 <= e["at_s"] <= 115.0 for e in downs)
    final = planner["timeline"][-1]["decode"]
    assert final == {"active": 1, "starting": 0, "draining": 0}
    assert planner["total_ticks"] == len(planner["ticks"]) > 30
