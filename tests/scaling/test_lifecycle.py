"""Worker lifecycle under a scripted scaling policy: startup, cancellation, draining, removal,
and worker-seconds that follow the provisioned fleet."""

from __future__ import annotations

import pytest

from servesim import simulate
from servesim.scaling.contract import Decision, Snapshot


class Scripted:
    """Sets the target at given times: [(at_ms, target), ...]."""

    def __init__(self, plan: list[tuple[float, int]]) -> None:
        self.plan = plan
        self.seen: list[Snapshot] = []

    def initial_tick_ms(self) -> float:
        return self.plan[0][0]

    def on_tick(self, snapshot: Snapshot) -> Decision:
        self.seen.append(snapshot)
        target = dict(self.plan)[snapshot.now_ms]
        later = [t for t, _ in self.plan if t > snapshot.now_ms]
        return Decision(target_decode=target, next_tick_ms=later[0] if later else None, reason="scripted")


def _config(rate=20.0, requests=200, startup=1.0, replicas=1) -> dict:
    return {
        "engine": {"model": "m", "hardware": "h200_sxm", "context_length": 8192,
                   "workers": {"aggregated": {"parallelism": {"replicas": replicas, "tensor": 2},
                                              "kv_cache": {"capacity": {"type": "fixed", "blocks": 500}},
                                              "timing": {"type": "fixed", "prefill_ms": 20, "decode_ms": 10},
                                              "startup_seconds": startup}}},
        "traffic": {"source": {"type": "synthetic", "input_tokens": 256, "output_tokens": 32},
                    "load": {"type": "constant_rate", "requests_per_second": rate},
                    "stop": {"requests": requests}},
    }


def _lifecycle(report: dict) -> list[tuple[float, int, str, str]]:
    return [(e["at_s"], e["worker_id"], e["state"], e["reason"]) for e in report["planner"]["lifecycle"]]


def test_a_worker_cancelled_while_starting_is_removed_at_once():
    report = simulate(_config(startup=5.0), scaling=Scripted([(1000, 2), (3000, 1)]),
                      capture_per_request=True).to_dict()
    assert _lifecycle(report) == [(1.0, 1, "starting", "scale_up"), (3.0, 1, "removed", "startup_cancelled")]
    assert {r["decode_worker_idx"] for r in report["per_request"]} == {0}, "a starting worker gets no traffic"
    duration = report["decode_worker_seconds"]
    assert duration == pytest.approx(report["duration_ms"] / 1000 + 2.0, rel=1e-9), "2 s of a second worker"
    assert report["gpu_hours"] == pytest.approx(duration * 2 / 3600)


def test_new_workers_serve_after_startup_and_get_fresh_ids():
    plan = [(1000, 3), (4000, 1), (6000, 3)]
    policy = Scripted(plan)
    report = simulate(_config(startup=1.0), scaling=policy, capture_per_request=True).to_dict()
    states = _lifecycle(report)
    assert (1.0, 1, "starting", "scale_up") in states and (2.0, 1, "active", "worker_ready") in states
    assert (4.0, 2, "draining", "scale_down") in states and (4.0, 1, "draining", "scale_down") in states
    assert [w for t, w, s, _ in states if t == 6.0 and s == "starting"] == [3, 4], "ids are never reused"
    served = {r["decode_worker_idx"] for r in report["per_request"]}
    assert served == {0, 1, 2, 3, 4}
    for r in report["per_request"]:
        if r["decode_worker_idx"] in (1, 2):
            assert 2000.0 <= r["arrival_time_ms"] <= 4000.0, "placed only while active (ticks run last)"
        if r["decode_worker_idx"] in (3, 4):
            assert r["arrival_time_ms"] >= 7000.0
    assert [s.pools["decode"].non_draining for s in policy.seen] == [1, 3, 1]
    assert report["planner"]["peak_workers"] == {"decode": 3}


def test_draining_workers_finish_their_requests_before_removal():
    report = simulate(_config(rate=40.0, requests=160, startup=0.0, replicas=2),
                      scaling=Scripted([(1500, 1)]), capture_per_request=True).to_dict()
    drain = [e for e in _lifecycle(report) if e[1] == 1]
    assert drain[0][2:] == ("draining", "scale_down") and drain[1][2:] == ("removed", "drained")
    removed_at = drain[1][0] * 1000
    on_worker_1 = [r for r in report["per_request"] if r["decode_worker_idx"] == 1]
    assert max(r["terminal_time_ms"] for r in on_worker_1) == removed_at
    assert all(r["arrival_time_ms"] < 1500.0 for r in on_worker_1)
    assert all(r["terminal_status"] == "completed" for r in report["per_request"])


def test_snapshots_report_forward_pass_metrics_and_traffic():
    policy = Scripted([(2000, 1), (4000, 1)])
    simulate(_config(startup=0.0), scaling=policy)
    first = policy.seen[0]
    (rank,) = first.pools["decode"].ranks
    assert rank.metrics is not None and rank.metrics.num_decode_requests > 0
    assert first.traffic.num_req == 41 and first.traffic.avg_isl == 256.0
    assert 0 < first.traffic.avg_ttft_ms < 100 and first.traffic.duration_s == 2.0


def test_each_tick_sees_only_the_traffic_since_the_previous_tick():
    """Constant 20 req/s, ticks at 2, 4 and 6 s: every window holds its own 2 s of arrivals and
    completions (the tally starts afresh at each tick), and the windows' arrivals add up to the
    requests sent before the last tick."""
    policy = Scripted([(2000, 1), (4000, 1), (6000, 1)])
    report = simulate(_config(startup=0.0), scaling=policy, capture_per_request=True).to_dict()
    windows = [s.traffic for s in policy.seen]
    assert [w.duration_s for w in windows] == [2.0, 2.0, 2.0]
    assert all(38 <= w.num_req <= 41 for w in windows), [w.num_req for w in windows]
    before_last = sum(r["arrival_time_ms"] <= 6000.0 for r in report["per_request"])
    assert sum(w.num_req for w in windows) == before_last
    assert all(w.num_completed <= w.num_req + 2 for w in windows)
