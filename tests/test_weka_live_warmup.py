"""`agentic_warmup_policy: live_trajectory_v1` (AISimulate 0.13): not built in servesim, refused
as a config error; 0.13's outputs are kept in tests/cases/weka_live (written by
`benchmarks/weka_traces.py`, recorded from the 0.13 build) for when it is built. The rules read
from them (docs/traffic.md, "live_trajectory_v1") are checked here on 0.13's records, so the
cases say what a build has to reproduce.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import CASES

LIVE = sorted((CASES / "weka_live").glob("*/config.yaml"))


def _recorded(config: Path) -> tuple[dict, list[dict], float]:
    report = json.loads((config.parent / "report.json").read_text())
    records = [json.loads(line) for line in (config.parent / "requests.jsonl").read_text().splitlines()]
    return report, records, yaml.safe_load(config.read_text())["traffic"]["load"]["speedup"]


def test_there_are_live_cases() -> None:
    assert len(LIVE) >= 3


@pytest.mark.parametrize("config", LIVE, ids=[c.parent.name for c in LIVE])
def test_servesim_refuses_the_live_policy(config: Path, tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "servesim", "predict", "-c", str(config), "--format", "json",
                             "--compat", "reference", "--output-dir", str(tmp_path / "out")],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stderr
    assert "agentic_warmup_policy" in result.stderr and "live_trajectory_v1 is not built" in result.stderr


@pytest.mark.parametrize("config", LIVE, ids=[c.parent.name for c in LIVE])
def test_primers_replay_live_against_one_cut_instant(config: Path) -> None:
    """Primer k of a lane cut at t* is sent at T − (t* − its recorded start) / speedup, T the
    largest such lead over all primers (the earliest primer goes at 0)."""
    report, _, speedup = _recorded(config)
    phases = report["agentic_phases"]
    assert phases["warmup_policy"] == "live_trajectory_v1"
    snaps = {s["play_id"]: s for s in report["agentic_snapshots"]}
    leads = {}
    for r in phases["requests"]:
        if r["phase"] != "primer":
            continue
        snap = snaps[r["identity"]["play_id"]]
        start = next(q["recorded_start_ms"] for q in snap["requests"] if q["source_request_id"] == r["source_request_id"])
        leads[r["uuid"]] = (snap["t_star_ms"] - start) / speedup
    top = max(leads.values())
    for r in phases["requests"]:
        if r["phase"] == "primer":
            assert r["dispatched_at_ms"] == pytest.approx(top - leads[r["uuid"]], rel=1e-12, abs=1e-9)


@pytest.mark.parametrize("config", LIVE, ids=[c.parent.name for c in LIVE])
def test_warmup_plays_the_trajectories_then_hands_off(config: Path) -> None:
    """After the last primer ends every lane plays its trajectory (the snapshot play's replayed
    requests, then the corpus' next plays) with one-token answers and no delays, ten requests a
    lane; at the barrier the plays go on: each request then ready waits (recorded start − T0) /
    speedup, T0 the earliest recorded start among them."""
    report, records, speedup = _recorded(config)
    phases = report["agentic_phases"]
    primers = [r for r in phases["requests"] if r["phase"] == "primer"]
    warm = [r for r in phases["requests"] if r["phase"] == "warmup"]
    start = max(r["causal_terminal_at_ms"] for r in primers)
    assert min(r["dispatched_at_ms"] for r in warm) == start
    for lane in phases["lanes"]:
        assert lane["warmup_expected"] == lane["warmup_completed"] == 10
        assert sum(1 for r in warm if r["lane_id"] == lane["lane_id"]) == 10
    assert all(r["max_output_tokens"] == r["observed_output_tokens"] == 1 for r in warm)
    assert phases["finished_at_ms"] == phases["profile_start_ms"] == max(r["quiescent_at_ms"] for r in warm)
    sent = {r["identity"]["request_id"] for r in warm}
    snaps = {s["play_id"]: s for s in report["agentic_snapshots"]}
    ready: dict[tuple[str, str], float] = {}
    for play, snap in snaps.items():
        rid = {q["source_request_id"]: q for q in snap["requests"]}
        if not any(q["identity"]["request_id"] in sent for q in snap["requests"]):
            continue
        for q in snap["requests"]:
            if q["historical"] or q["identity"]["request_id"] in sent:
                continue
            parents = [p.split(":request:", 1)[1] for p in q["pending_dependencies"]]
            if all(rid[p]["identity"]["request_id"] in sent for p in parents):
                ready[play, q["source_request_id"]] = q["recorded_start_ms"]
    assert ready
    origin = min(ready.values())
    sent_at = {(r["play_id"], r["request_id"]): r["dispatched_at_ms"] for r in records}
    for key, recorded in ready.items():
        assert sent_at[key] == pytest.approx((recorded - origin) / speedup, rel=1e-12, abs=1e-9), key
