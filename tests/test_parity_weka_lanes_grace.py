"""AISimulate 0.13's agentic rules beyond the play count and at a profile's grace deadline, on
the recorded cases of tests/cases/weka (P/D pools, where 0.13's timing and servesim's agree: no
shift is needed). Every field of these cases is also compared by tests/test_parity_weka.py; here
the rules themselves are checked in 0.13's records and in servesim's alike.

* More lanes than plays: plain `agentic_lanes` leave the extra lanes idle (every play runs once);
  a snapshot's lane k replays the (k mod plays)-th play again, under the same request ids in its
  own play id, with its own KV-cache scope.
* `response_grace_seconds`: a request still running at cutoff + grace is canceled there with the
  tokens it emitted by then; the profile ends at the deadline.
"""

from __future__ import annotations

import json

import pytest
import yaml
from conftest import CASES, reference_config

from servesim import simulate

WEKA = CASES / "weka"
MORE_LANES = ("pd-lanes4-idle", "pd-snap-lanes5", "pd-snap-dup-explicit", "pd-warm-lanes4", "pd-profile-lanes4")
GRACE = ("pd-grace-cancel", "pd-grace-zero", "pd-warm-grace", "pd-grace-lanes4")


def _both(name: str) -> list[tuple[dict, list[dict]]]:
    """(summary, per-request records) of 0.13 and of servesim for case `name`."""
    config = WEKA / name / "config.yaml"
    report = simulate(reference_config(config), capture_per_request=True).to_dict()
    theirs = [json.loads(line) for line in (config.parent / "requests.jsonl").read_text().splitlines()]
    return [(json.loads((config.parent / "report.json").read_text()), theirs), (report, report["per_request"])]


def _load(name: str) -> dict:
    return yaml.safe_load((WEKA / name / "config.yaml").read_text())["traffic"]["load"]


def test_idle_lanes_run_every_play_once() -> None:
    for summary, records in _both("pd-lanes4-idle"):
        plays = summary["agentic_graph"]["play_count"]
        assert summary["agentic_lanes"] > plays
        assert summary["total_trajectories"] == summary["completed_trajectories"] == plays
        assert summary["num_requests"] == summary["agentic_graph"]["node_count"] == len(records)
        assert min(r["dispatched_at_ms"] for r in records) == 0.0


@pytest.mark.parametrize("name", MORE_LANES[1:])
def test_a_play_replayed_on_two_lanes_has_its_own_ids_and_cache(name: str) -> None:
    lanes = _load(name)["agentic_lanes"]
    for summary, records in _both(name):
        snaps = summary["agentic_snapshots"][:lanes]
        sources = [s["source_play_id"] for s in snaps]
        assert len(set(sources)) < lanes
        again = [(a, b) for a in snaps for b in snaps if a["lane_id"] < b["lane_id"]
                 and a["source_play_id"] == b["source_play_id"]]
        assert again
        by_play: dict[str, list[dict]] = {}
        for r in records:
            by_play.setdefault(r["play_id"], []).append(r)
        uuids = [r["uuid"] for r in records]
        assert len(set(uuids)) == len(uuids)
        for a, b in again:
            assert a["play_id"] != b["play_id"] and a["cache_id"] != b["cache_id"]
            mine, other = by_play.get(a["play_id"], []), by_play.get(b["play_id"], [])
            shared = {r["request_id"] for r in mine} & {r["request_id"] for r in other}
            if a["t_star_ms"] == b["t_star_ms"] and not _load(name).get("agentic_warmup"):
                # the same cut of the same play, side by side: what one lane cached the other
                # does not reuse, so both replays reuse the same number of tokens
                assert shared
                reuse = {r["request_id"]: r["reused_input_tokens"] for r in mine}
                assert all(reuse[r["request_id"]] == r["reused_input_tokens"] for r in other
                           if r["request_id"] in shared)


def test_outside_a_profile_every_replayed_request_waits_for_its_recorded_start() -> None:
    """A replayed request whose parents are all replayed is not sent before its remaining
    delay (speedup applied) outside a profile; in a profile it may be (pd-profile-lanes4)."""
    for name, earlier in (("pd-snap-lanes5", False), ("pd-snap-dup-explicit", False), ("pd-profile-lanes4", True)):
        speedup = _load(name)["speedup"]
        for summary, records in _both(name):
            sent = {(r["play_id"], r["request_id"]): r["dispatched_at_ms"] for r in records}
            early = 0
            for s in summary["agentic_snapshots"]:
                for q in s["requests"]:
                    key = (s["play_id"], q["source_request_id"])
                    if q["historical"] or not q["pending_dependencies"] or key not in sent:
                        continue
                    assert sent[key] >= q["remaining_delay_ms"] / speedup - 1e-9 or earlier, key
                    early += sent[key] < q["remaining_delay_ms"] / speedup - 1e-9
            assert bool(early) == earlier, name


@pytest.mark.parametrize("name", GRACE)
def test_requests_running_at_the_grace_deadline_are_canceled_there(name: str) -> None:
    for summary, records in _both(name):
        block = summary["agentic_profile"]
        deadline = block["response_grace_deadline_ms"] - block["profile_start_ms"]
        canceled = [r for r in records if r["terminal_status"] == "canceled"]
        assert canceled and len(canceled) == block["canceled_requests"] == block["server_unsettled_requests"]
        assert block["finished_at_ms"] == block["response_grace_deadline_ms"]
        assert summary["completed_requests"] == summary["num_requests"] - len(canceled)
        assert summary["total_output_tokens"] == sum(r["output_length"] for r in records
                                                     if r["terminal_status"] == "completed")
        for r in canceled:
            assert r["terminal_time_ms"] == pytest.approx(deadline, rel=1e-12)
            assert r["output_length"] < r["requested_output_length"]
            if r["output_length"]:
                assert r["last_token_ms"] <= deadline + 1e-9
        assert all(r["terminal_time_ms"] <= deadline + 1e-9 for r in records)
        workers = summary["prefill_worker_seconds"] / _replicas(name)
        assert workers == pytest.approx((block["response_grace_deadline_ms"] - block["profile_start_ms"]) / 1000,
                                        rel=1e-12)


def _replicas(name: str) -> int:
    engine = yaml.safe_load((WEKA / name / "config.yaml").read_text())["engine"]
    return engine["workers"]["prefill"]["parallelism"]["replicas"]
