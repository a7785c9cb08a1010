"""Parity of the `weka` trace reader and agentic replay with AISimulate 0.13 (tests/cases/weka).

Each case folder holds a config, its trace (written by `benchmarks/weka_traces.py`) and 0.13's
report.json and requests.jsonl, recorded by `benchmarks/weka_side_by_side.py --record`. Every
case runs under `compat: upstream-0.13` (0.13's pass convention, docs/timing.md). The reader's
fields must match exactly: the `agentic_graph` block (its `graph_digest` hashes the whole
lowered graph — every request id, session, length, block hash id, not-before time and dependency
with its trigger, delay and relation — and `source.digest` the corpus bytes and the resolved
basis), the nested timestamp basis, request, token and trajectory counts, and per request its
id, play, session and lengths; and so must every other summary field and every request's times
(`test_runs_match_upstream_field_for_field`), but for the warm-up case in `DISPATCHED_APART`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from conftest import CASES as ALL_CASES, HOST_FIELDS

from servesim import simulate
from servesim.config import SimConfig, load_config

CASES = sorted((ALL_CASES / "weka").glob("*/config.yaml"))
READER_FIELDS = ("agentic_graph", "agentic_lanes", "agentic_input_format", "weka_nested_timestamp_basis", "num_requests",
                 "completed_requests", "total_input_tokens", "total_output_tokens", "total_trajectories",
                 "completed_trajectories", "incomplete_trajectories", "prefill_gpus_per_worker",
                 "decode_gpus_per_worker")
RECORD_FIELDS = ("play_id", "session_id", "input_length", "output_length", "uuid")
TIMED_RECORD_FIELDS = ("play_id", "session_id", "input_length", "output_length", "reused_input_tokens",
                       "dispatched_at_ms", "first_admit_ms", "ttft_ms", "itl_ms", "e2e_latency_ms", "terminal_time_ms")


def upstream_config(config: Path) -> SimConfig:
    """The config file at `config` under 0.13's pass convention."""
    return load_config(config, ["compat=upstream-0.13"])


def _report(config: Path) -> dict:
    return simulate(upstream_config(config), capture_per_request=True).to_dict()


def _close(expected: object) -> object:
    """Floats at 1e-12 (a warm-up's times count from its barrier: one subtraction; means are
    summed in another order), everything else exactly."""
    return pytest.approx(expected, rel=1e-12, abs=1e-9) if isinstance(expected, float) else expected


def test_there_are_weka_cases() -> None:
    assert len(CASES) >= 4


@pytest.mark.parametrize("config", CASES, ids=[c.parent.name for c in CASES])
def test_weka_reader_matches_upstream(config: Path) -> None:
    report = _report(config)
    expected = json.loads((config.parent / "report.json").read_text())
    for key in READER_FIELDS:
        assert report[key] == expected[key], key
    theirs = [json.loads(line) for line in (config.parent / "requests.jsonl").read_text().splitlines()]
    mine = {(r["play_id"], r["request_id"]): r for r in report["per_request"]}
    assert sorted(mine) == sorted((r["play_id"], r["request_id"]) for r in theirs)
    for record in theirs:
        for key in RECORD_FIELDS:
            assert mine[record["play_id"], record["request_id"]][key] == record[key], (record["request_id"], key)


DISPATCHED_APART = {"warm-no-primers"}
"""A warm-up run on two aggregated replicas whose measured requests 0.13 dispatches later than
servesim after a tool wait (outer:1 of play gamma at 150 ms there, 139.9 ms — its parent's end
plus the recorded 100 ms wait — here): a rule of the warm-up's time basis, not of pass timing."""

TIMED = [c for c in CASES if c.parent.name not in DISPATCHED_APART]


@pytest.mark.parametrize("config", TIMED, ids=[c.parent.name for c in TIMED])
def test_runs_match_upstream_field_for_field(config: Path) -> None:
    """Aggregated and disaggregated, lanes, snapshots, warm-ups and profiles: every summary field
    both report (host timings aside) and the `agentic_*` blocks, and per request its identity,
    prompt reuse and every time, are 0.13's."""
    report = _report(config)
    expected = json.loads((config.parent / "report.json").read_text())
    common = sorted(k for k in report if k in expected and k not in HOST_FIELDS)
    assert len(common) > 80
    for key in common:
        if isinstance(expected[key], dict) and key.startswith("agentic_"):
            assert sorted(report[key]) == sorted(expected[key]), key
            for field, value in expected[key].items():
                assert report[key][field] == _close(value), (key, field)
        else:
            assert report[key] == _close(expected[key]), key
    theirs = [json.loads(line) for line in (config.parent / "requests.jsonl").read_text().splitlines()]
    mine = sorted(report["per_request"], key=lambda r: (r["play_id"], r["request_id"]))
    theirs.sort(key=lambda r: (r["play_id"], r["request_id"]))
    assert [r["request_id"] for r in mine] == [r["request_id"] for r in theirs]
    for a, b in zip(mine, theirs, strict=True):
        for key in TIMED_RECORD_FIELDS:
            assert a[key] == _close(b[key]), (b["request_id"], key)


def test_dispatched_apart_is_still_apart() -> None:
    """The warm-up case left out above still differs (when this fails, move it back in)."""
    for name in sorted(DISPATCHED_APART):
        config = ALL_CASES / "weka" / name / "config.yaml"
        expected = json.loads((config.parent / "report.json").read_text())
        assert _report(config)["duration_ms"] != expected["duration_ms"], name


LANE_CASES = [c for c in CASES if "agentic_lanes" in c.read_text() and "agentic_snapshot" not in c.read_text()]


def _play_starts(records: list[dict]) -> list[tuple[str, float]]:
    """(play, first dispatch) in start order."""
    first: dict[str, float] = {}
    for r in records:
        first[r["play_id"]] = min(first.get(r["play_id"], r["dispatched_at_ms"]), r["dispatched_at_ms"])
    return sorted(first.items(), key=lambda p: (p[1], p[0]))


@pytest.mark.parametrize("config", LANE_CASES, ids=[c.parent.name for c in LANE_CASES])
def test_lanes_start_plays_as_upstream(config: Path) -> None:
    """Plays start in 0.13's order; the first `lanes` at 0, every other one when a running play
    ends (its last request's terminal time), as in 0.13's records."""
    lanes = json.loads((config.parent / "report.json").read_text())["agentic_lanes"]
    theirs = [json.loads(line) for line in (config.parent / "requests.jsonl").read_text().splitlines()]
    mine = _report(config)["per_request"]
    assert [p for p, _ in _play_starts(mine)] == [p for p, _ in _play_starts(theirs)]
    for records in (theirs, mine):
        starts = _play_starts(records)
        ends = {}
        for r in records:
            ends[r["play_id"]] = max(ends.get(r["play_id"], 0.0), r["terminal_time_ms"])
        assert [t for _, t in starts[:lanes]] == [0.0] * min(lanes, len(starts))  # more lanes than plays: some idle
        for play, start in starts[lanes:]:
            assert any(ends[p] == start for p, _ in starts if p != play), play


def test_the_digest_sees_every_byte(tmp_path: Path) -> None:
    """A changed byte of the trace changes the source digest; a changed time changes the graph."""
    case = next(c.parent for c in CASES if c.parent.name == "chain-json")
    expected = json.loads((case / "report.json").read_text())["agentic_graph"]
    text = (case / "alpha.json").read_text()
    edited = tmp_path / "alpha.json"
    edited.write_text(text.replace('"t": 0.4', '"t": 0.45'))
    config = (case / "config.yaml").read_text().replace("- alpha.json", f"- {edited}")
    (tmp_path / "config.yaml").write_text(config)
    block = simulate(upstream_config(tmp_path / "config.yaml")).to_dict()["agentic_graph"]
    assert block["source"]["digest"] != expected["source"]["digest"]
    assert block["graph_digest"] != expected["graph_digest"]
    assert block["node_count"] == expected["node_count"]


SNAPSHOT_CASES = [c for c in CASES if "agentic_snapshot" in c.read_text() and "agentic_profile" not in c.read_text()]
PROFILE_CASES = [c for c in CASES if "agentic_profile" in c.read_text()]


def test_there_are_snapshot_cases() -> None:
    assert len(SNAPSHOT_CASES) >= 4


@pytest.mark.parametrize("config", SNAPSHOT_CASES + PROFILE_CASES, ids=[c.parent.name for c in SNAPSHOT_CASES + PROFILE_CASES])
def test_snapshots_match_upstream(config: Path) -> None:
    """The `agentic_snapshots` block is 0.13's, entry for entry: every request of each lane's
    source play, history or replayed, its identity, recorded start and end, pending replayed
    parents, remaining delay, and the primers."""
    report = _report(config)
    expected = json.loads((config.parent / "report.json").read_text())
    assert report["agentic_snapshots"] == expected["agentic_snapshots"]
    plays = len(expected["agentic_snapshots"]) if config in PROFILE_CASES else expected["agentic_lanes"]
    assert report["total_trajectories"] == plays


@pytest.mark.parametrize("config", SNAPSHOT_CASES, ids=[c.parent.name for c in SNAPSHOT_CASES])
def test_snapshot_release_and_trajectory_rules(config: Path) -> None:
    """In 0.13's records and in servesim's: a replayed request with no replayed parent is
    dispatched its remaining delay (divided by the speedup) after the start, and a snapshot
    play's trajectory latency counts from the cut (time 0) to its last terminal time."""
    expected = json.loads((config.parent / "report.json").read_text())
    speedup = yaml.safe_load(config.read_text())["traffic"]["load"]["speedup"]
    free = {(s["play_id"], r["source_request_id"]): r["remaining_delay_ms"] / speedup
            for s in expected["agentic_snapshots"] for r in s["requests"]
            if not r["historical"] and not r["pending_dependencies"]}
    assert free
    theirs = [json.loads(line) for line in (config.parent / "requests.jsonl").read_text().splitlines()]
    report = _report(config)
    for summary, records in ((expected, theirs), (report, report["per_request"])):
        for r in records:
            if (r["play_id"], r["request_id"]) in free:
                assert r["dispatched_at_ms"] == pytest.approx(free[r["play_id"], r["request_id"]], rel=1e-12, abs=1e-9)
        ends: dict[str, float] = {}
        for r in records:
            ends[r["play_id"]] = max(ends.get(r["play_id"], 0.0), r["terminal_time_ms"])
        assert summary["max_trajectory_e2e_latency_ms"] == pytest.approx(max(ends.values()), rel=1e-12)
        assert summary["min_trajectory_e2e_latency_ms"] == pytest.approx(min(ends.values()), rel=1e-12)


WARM_CASES = [c for c in CASES if "agentic_warmup: true" in c.read_text()]
PHASE_TIMES = {"causal_terminal_at_ms", "dispatched_at_ms", "first_admit_ms", "quiescent_at_ms"}


def test_there_are_warmup_cases() -> None:
    assert len(WARM_CASES) >= 4


@pytest.mark.parametrize("config", WARM_CASES, ids=[c.parent.name for c in WARM_CASES])
def test_warmup_phases_match_upstream(config: Path) -> None:
    """The `agentic_phases` block is 0.13's: per lane its primers and warm-up requests expected
    and completed, per preparation request its identity, UUID, source, lengths, status and the
    prompt tokens it found cached (its times too: `test_runs_match_upstream_field_for_field`).
    The measured requests reuse the cached prefixes as in 0.13, and their times count from the
    barrier."""
    report = _report(config)
    expected = json.loads((config.parent / "report.json").read_text())
    mine, theirs = report["agentic_phases"], expected["agentic_phases"]
    assert {k: v for k, v in mine.items() if k not in ("requests", "finished_at_ms", "profile_start_ms")} == {
        k: v for k, v in theirs.items() if k not in ("requests", "finished_at_ms", "profile_start_ms")}
    assert [{k: v for k, v in r.items() if k not in PHASE_TIMES} for r in mine["requests"]] == [
        {k: v for k, v in r.items() if k not in PHASE_TIMES} for r in theirs["requests"]]
    for phases in (mine, theirs):
        assert phases["finished_at_ms"] == phases["profile_start_ms"] == max(r["quiescent_at_ms"] for r in phases["requests"])
        for lane in phases["lanes"]:
            sent = [r for r in phases["requests"] if r["lane_id"] == lane["lane_id"]]
            assert [r["dispatched_at_ms"] for r in sent[1:]] == [r["causal_terminal_at_ms"] for r in sent[:-1]]
    records = [json.loads(line) for line in (config.parent / "requests.jsonl").read_text().splitlines()]
    reused = {(r["play_id"], r["request_id"]): r["reused_input_tokens"] for r in records}
    assert {(r["play_id"], r["request_id"]): r["reused_input_tokens"] for r in report["per_request"]} == reused
    assert report["prefix_cache_reused_ratio"] == expected["prefix_cache_reused_ratio"]
    assert report["num_requests"] == expected["num_requests"] == len(records)


PD_CASES = [c for c in CASES if "mode: disaggregated" in c.read_text()]


def test_there_are_pd_cases() -> None:
    assert len(PD_CASES) >= 4


PROFILE_COUNTS = ("admission_closed", "admission_cutoff_ms", "cancel_drain_deadline_ms", "canceled_requests",
                  "client_completed_plays", "corpus_cursor", "issued_requests", "never_issued_requests", "options",
                  "plays_started", "profile_start_ms", "response_grace_deadline_ms", "retired_plays", "schema",
                  "successful_responses", "idle_shifts")


def test_there_are_profile_cases() -> None:
    """Profiles on both pool kinds, with server and play idle shifts among them."""
    assert len(PROFILE_CASES) >= 3 and any(c in PD_CASES for c in PROFILE_CASES)
    shifts = [s for c in PROFILE_CASES
              for s in json.loads((c.parent / "report.json").read_text())["agentic_profile"]["idle_shifts"]]
    assert any(s["play_id"] is None for s in shifts) and any(s["play_id"] is not None for s in shifts)


@pytest.mark.parametrize("config", PROFILE_CASES, ids=[c.parent.name for c in PROFILE_CASES])
def test_profiles_match_upstream(config: Path) -> None:
    """A continuous profile starts 0.13's plays on 0.13's lanes (ordinals, corpus cursor, UUIDs,
    sessions, own cache scopes: the same prompt reuse on P/D), sends the same requests before
    the cutoff and counts them as 0.13 does; on P/D its window and throughput are 0.13's too.
    Incomplete plays stay out of the trajectory latencies, which count from each play's start."""
    report = _report(config)
    expected = json.loads((config.parent / "report.json").read_text())
    mine, theirs = report["agentic_profile"], expected["agentic_profile"]
    for key in PROFILE_COUNTS:
        assert mine[key] == theirs[key], key
    if config in PD_CASES:  # the whole block, floats at 1e-12
        assert sorted(mine) == sorted(theirs)
        for key, value in theirs.items():
            assert mine[key] == (pytest.approx(value, rel=1e-12) if isinstance(value, float) else value), key
    for summary in (report, expected):
        block = summary["agentic_profile"]
        assert summary["duration_ms"] == block["observation_duration_ms"] == pytest.approx(
            block["last_successful_response_ms"] - block["first_request_ms"], rel=1e-12)
        assert summary["num_requests"] == block["issued_requests"] == block["successful_responses"] + block[
            "canceled_requests"]
        # a play whose last request was canceled at the grace deadline is done for its client, not complete
        assert summary["completed_trajectories"] + block["canceled_requests"] >= block["client_completed_plays"]
        assert summary["completed_trajectories"] <= block["client_completed_plays"]
        if not block["canceled_requests"]:
            assert summary["completed_trajectories"] == block["client_completed_plays"]
        assert summary["total_trajectories"] == block["plays_started"]
    records = [json.loads(line) for line in (config.parent / "requests.jsonl").read_text().splitlines()]
    for rows in (records, report["per_request"]):
        starts: dict[str, float] = {}
        ends: dict[str, float] = {}
        for r in rows:
            starts[r["play_id"]] = min(starts.get(r["play_id"], r["dispatched_at_ms"]), r["dispatched_at_ms"])
            ends[r["play_id"]] = max(ends.get(r["play_id"], 0.0), r["terminal_time_ms"])
        lanes = yaml.safe_load(config.read_text())["traffic"]["load"]["agentic_lanes"]
        for play, start in starts.items():  # a lane's next play starts when its previous one ends
            lane, ordinal = (int(x) for x in play.rsplit(":", 2)[1:])
            if ordinal:
                assert start == ends[play.rsplit(":", 1)[0] + f":{ordinal - 1}"], play
            assert lane < lanes
