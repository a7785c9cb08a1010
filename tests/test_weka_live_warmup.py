"""`agentic_warmup_policy: live_trajectory_v1` (AISimulate 0.13), compared with 0.13's runs kept
in tests/cases/weka_live (written by `benchmarks/weka_traces.py`, recorded from the 0.13 build;
P/D pools, where 0.13's timing and servesim's agree: no shift). servesim must match them field
for field; the rules read from them (docs/traffic.md, `servesim.traffic.live_warmup`) are also
checked on 0.13's records, so the cases say what each rule is.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from conftest import CASES, reference_config

from servesim import simulate

LIVE = sorted((CASES / "weka_live").glob("*/config.yaml"))
HOST_FIELDS = {"wall_time_ms", "processed_tokens_per_s", "processed_output_tokens_per_s"}
RECORD_FIELDS = ("play_id", "session_id", "input_length", "output_length", "reused_input_tokens", "uuid",
                 "dispatched_at_ms", "ttft_ms", "itl_ms", "e2e_latency_ms", "terminal_time_ms",
                 "prefill_worker_idx", "decode_worker_idx", "terminal_status")


def _recorded(config: Path) -> tuple[dict, list[dict], float]:
    report = json.loads((config.parent / "report.json").read_text())
    records = [json.loads(line) for line in (config.parent / "requests.jsonl").read_text().splitlines()]
    return report, records, yaml.safe_load(config.read_text())["traffic"]["load"]["speedup"]


def test_there_are_live_cases() -> None:
    assert len(LIVE) >= 3


def _close(a: object, b: object) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return a == pytest.approx(b, rel=1e-12, abs=1e-9)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b, strict=True))
    return a == b


@pytest.mark.parametrize("config", LIVE, ids=[c.parent.name for c in LIVE])
def test_live_warmup_matches_upstream_field_for_field(config: Path) -> None:
    """Every summary field both report (host timings aside; floats at 1e-12), the
    `agentic_phases` (primers and trajectory requests, in 0.13's order), `agentic_profile` and
    `agentic_snapshots` blocks included, and every measured request."""
    report = simulate(reference_config(config), capture_per_request=True).to_dict()
    expected, theirs, _ = _recorded(config)
    common = sorted(k for k in report if k in expected and k not in HOST_FIELDS)
    assert len(common) > 80 and {"agentic_phases", "agentic_profile", "agentic_snapshots"} <= set(common)
    for key in common:
        assert _close(report[key], expected[key]), key
    mine = {(r["play_id"], r["request_id"]): r for r in report["per_request"]}
    assert sorted(mine) == sorted((r["play_id"], r["request_id"]) for r in theirs)
    for r in theirs:
        for key in RECORD_FIELDS:
            assert _close(mine[r["play_id"], r["request_id"]][key], r[key]), (r["request_id"], key)


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
    top = max(leads.values(), default=0.0)
    for r in phases["requests"]:
        if r["phase"] == "primer":
            assert r["dispatched_at_ms"] == pytest.approx(top - leads[r["uuid"]], rel=1e-12, abs=1e-9)


@pytest.mark.parametrize("config", LIVE, ids=[c.parent.name for c in LIVE])
def test_warmup_plays_the_trajectories_then_hands_off(config: Path) -> None:
    """After the last primer ends every lane plays its trajectory (the snapshot play's replayed
    requests, then the corpus' next plays) with one-token answers and no delays, ten requests a
    lane; at the barrier the plays go on as if cut there: a request then ready, or with a parent
    the warm-up sent, waits (recorded start − T0) / speedup (T0 the earliest recorded start
    among them, the root of a play the warm-up started but could not send included) and its
    parents still to come; a ready one goes exactly then."""
    report, records, speedup = _recorded(config)
    phases = report["agentic_phases"]
    primers = [r for r in phases["requests"] if r["phase"] == "primer"]
    warm = [r for r in phases["requests"] if r["phase"] == "warmup"]
    start = max((r["causal_terminal_at_ms"] for r in primers), default=0.0)
    assert min(r["dispatched_at_ms"] for r in warm) == start
    for lane in phases["lanes"]:
        assert lane["warmup_expected"] == lane["warmup_completed"] == 10
        assert sum(1 for r in warm if r["lane_id"] == lane["lane_id"]) == 10
    assert all(r["max_output_tokens"] == r["observed_output_tokens"] == 1 for r in warm)
    assert phases["finished_at_ms"] == phases["profile_start_ms"] == max(r["quiescent_at_ms"] for r in warm)
    sent = {r["identity"]["request_id"] for r in warm}
    held: dict[tuple[str, str], tuple[float, bool]] = {}
    for play, snap in ((s["play_id"], s) for s in report["agentic_snapshots"]):
        if not any(q["identity"]["request_id"] in sent for q in snap["requests"]):
            continue
        rid = {q["source_request_id"]: q for q in snap["requests"]}
        for q in snap["requests"]:
            if q["historical"] or q["identity"]["request_id"] in sent:
                continue
            parents = [rid[p.split(":request:", 1)[1]]["identity"]["request_id"] for p in q["pending_dependencies"]]
            ready = all(p in sent for p in parents)
            if ready or any(p in sent for p in parents):
                held[play, q["source_request_id"]] = (q["recorded_start_ms"], ready)
    assert any(ready for _, ready in held.values())
    sent_at = {(r["play_id"], r["request_id"]): r["dispatched_at_ms"] for r in records}
    # one T0 for all (the root of a play the warm-up started but could not send counts too, at 0)
    origins = [t - sent_at[key] * speedup for key, (t, ready) in held.items() if ready and key in sent_at]
    origin = origins[0]
    assert origins == pytest.approx([origin] * len(origins), abs=1e-6) and origin <= min(t for t, _ in held.values())
    for key, (recorded, ready) in held.items():
        if key not in sent_at:  # not due before the cutoff
            continue
        hold = (recorded - origin) / speedup
        if ready:
            assert sent_at[key] == pytest.approx(hold, rel=1e-12, abs=1e-9), key
        else:
            assert sent_at[key] >= hold - 1e-9, key
