"""servesim's per-trajectory account (summary `trajectories`, docs/traffic.md): E2E, model time
and wait per play, checked against the per-request records of agentic runs, and its HTML table."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import CASES

from servesim import load_config, simulate
from servesim.report.html.page import Page
from servesim.report.html.run import trajectories_section

RUNS = [CASES / "weka" / name / "config.yaml" for name in ("lanes2-three-plays", "snap-lanes3-boundaries")]


def _union(intervals: list[tuple[float, float]]) -> float:
    """Length of the union of intervals (an independent sweep, not the product code)."""
    total, end = 0.0, -1.0
    for a, b in sorted(intervals):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


@pytest.mark.parametrize("config", RUNS, ids=[c.parent.name for c in RUNS])
def test_breakdown_matches_the_records(config: Path) -> None:
    report = simulate(load_config(config), capture_per_request=True).to_dict()
    block = report["trajectories"]
    assert [p["play_id"] for p in block["plays"]] == list(dict.fromkeys(r["play_id"] for r in report["per_request"]))
    snapshot = "agentic_snapshots" in report
    for play in block["plays"]:
        records = [r for r in report["per_request"] if r["play_id"] == play["play_id"]]
        assert play["status"] == "completed" and play["requests"] == len(records)
        start = 0.0 if snapshot else min(r["dispatched_at_ms"] for r in records)
        end = max(r["terminal_time_ms"] for r in records)
        assert play["e2e_ms"] == pytest.approx(end - start, rel=1e-12)
        model = _union([(r["dispatched_at_ms"], r["terminal_time_ms"]) for r in records])
        assert play["model_ms"] == pytest.approx(model, rel=1e-9)
        assert play["wait_ms"] == pytest.approx(play["e2e_ms"] - model, rel=1e-9, abs=1e-9)
        assert 0 < play["model_ms"] < play["e2e_ms"]
    assert block["mean_e2e_ms"] == pytest.approx(report["mean_trajectory_e2e_latency_ms"], rel=1e-12)
    assert block["mean_model_ms"] + block["mean_wait_ms"] == pytest.approx(block["mean_e2e_ms"], rel=1e-12)


def test_reference_fields_leave_it_out() -> None:
    from conftest import reference_config

    report = simulate(reference_config(RUNS[0])).to_dict()
    assert "trajectories" not in report


def test_html_table_lists_every_play() -> None:
    block = simulate(load_config(RUNS[0])).to_dict()["trajectories"]
    page = Page("t")
    trajectories_section(page, block)
    html = page.render()
    assert "Trajectories" in html
    for play in block["plays"]:
        assert play["play_id"] in html and f"{play['wait_ms']:,.1f}" in html
