"""The agentic driver and graph: release rules as invariants over random graphs, and the digest."""

from __future__ import annotations

import json
import math
from array import array

from hypothesis import given, settings
from hypothesis import strategies as st

from servesim import simulate
from servesim.traffic.agentic import AgenticNode, Dependency, _float, build_graph
from servesim.traffic.agentic_mooncake import read_agentic_mooncake


@st.composite
def legacy_traces(draw):
    """Legacy agentic rows: a random DAG with fan-out and joins, delays and tool waits."""
    n = draw(st.integers(1, 10))
    rows = []
    for i in range(n):
        parents = draw(st.lists(st.integers(0, i - 1), max_size=3, unique=True)) if i else []
        row = {"request_id": f"r{i:02d}", "session_id": f"s{i % 3}", "input_length": draw(st.integers(1, 128)),
               "output_length": draw(st.integers(0, 6)), "hash_ids": [draw(st.integers(0, 5))]}
        row["hash_ids"] += [100 + i] if row["input_length"] > 64 else []
        if parents:
            row["wait_for"] = [f"r{p:02d}" for p in parents]
            row["delay"] = draw(st.sampled_from([0, 1.5, 10]))
            row["tool_wait_ms"] = draw(st.sampled_from([0, 4, 25]))
        else:
            row["timestamp"] = draw(st.sampled_from([0, 3, 40, 1000]))
        rows.append(row)
    return rows


def _config(trace: str, speedup: float) -> dict:
    worker = {"parallelism": {"replicas": 2}, "scheduler": {"max_batched_tokens": 128, "max_sequences": 4},
              "kv_cache": {"block_size": 16, "capacity": {"type": "fixed", "blocks": 40}},
              "timing": {"type": "fixed", "prefill_ms": 3, "decode_ms": 1}}
    return {"engine": {"mode": "aggregated", "model": "Qwen/Qwen3-8B", "hardware": "h200_sxm", "backend": "vllm",
                       "context_length": 100, "workers": {"aggregated": worker}},
            "traffic": {"source": {"type": "trace", "format": "agentic_mooncake", "paths": [trace], "block_size": 64},
                        "load": {"type": "trace_timestamps", "speedup": speedup}}}


def _plays(rows: list[dict]) -> dict[str, str]:
    """Legacy plays: the connected components of the dependency graph (named by any member)."""
    play = {r["request_id"]: r["request_id"] for r in rows}

    def find(x: str) -> str:
        while play[x] != x:
            x = play[x]
        return x

    for r in rows:
        for p in r.get("wait_for", []):
            play[find(r["request_id"])] = find(p)
    return {rid: find(rid) for rid in play}


@settings(max_examples=40, deadline=None)
@given(rows=legacy_traces(), speedup=st.sampled_from([1.0, 2.0, 0.5]))
def test_requests_start_exactly_when_their_parents_allow(tmp_path_factory, rows, speedup):
    path = tmp_path_factory.mktemp("trace") / "trace.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = simulate(_config(str(path), speedup), capture_per_request=True)
    report = result.to_dict()
    done = {r["request_id"]: r for r in report["per_request"]}
    plays = _plays(rows)
    aborted: dict[str, float] = {}  # play -> the earliest end of one of its requests that did not complete
    for rid, r in done.items():
        if r["terminal_status"] != "completed":
            aborted[plays[rid]] = min(aborted.get(plays[rid], r["terminal_time_ms"]), r["terminal_time_ms"])
    # The earliest not-before time becomes 0; rows with parents have not-before 0.
    origin = min(0 if "wait_for" in r else r["timestamp"] for r in rows)
    for row in rows:
        rid, parents = row["request_id"], row.get("wait_for", [])
        if not all(p in done and done[p]["terminal_status"] == "completed" for p in parents):
            assert rid not in done, "a request waits for every parent to complete"
            continue
        wait = (row.get("delay", 0) + row.get("tool_wait_ms", 0)) / speedup
        ready = (max(done[p]["terminal_time_ms"] + wait for p in parents) if parents
                 else (row["timestamp"] - origin) / speedup)
        abort = aborted.get(plays[rid], math.inf)
        if ready != abort:  # at the same instant either order is a valid reading of the rule
            assert (rid in done) == (ready < abort), "released unless its play was aborted before"
        if rid in done:
            assert abs(done[rid]["arrival_time_ms"] - ready) < 1e-9
            assert done[rid]["dispatched_at_ms"] == done[rid]["arrival_time_ms"]
    assert report["total_trajectories"] == len(set(plays.values()))
    complete = report["completed_trajectories"]
    assert complete + report["incomplete_trajectories"] == report["total_trajectories"]
    assert complete == 0 or report["min_trajectory_e2e_latency_ms"] >= 0
    assert [r["request_id"] for r in report["per_request"]] == sorted(done)
    _check_unreleased_account(result.extensions["unreleased"], rows, done, plays)


def _check_unreleased_account(account: dict, rows: list[dict], done: dict, plays: dict[str, str]) -> None:
    """Every request is completed, rejected or listed as unreleased, blocked by the request
    of its play that ended first without completing."""
    listed = [u["request_id"] for u in account["requests"]]
    assert listed == sorted(r["request_id"] for r in rows if r["request_id"] not in done)
    assert account["count"] == len(listed) == len(rows) - len(done)
    for entry in account["requests"]:
        blocker = done[entry["blocked_by"]]
        assert plays[entry["blocked_by"]] == plays[entry["request_id"]]
        assert entry["blocked_by_status"] == blocker["terminal_status"] != "completed"
        assert entry["play_id"] == blocker["play_id"]
        failures = [r for rid, r in done.items() if plays[rid] == plays[entry["request_id"]]
                    and r["terminal_status"] != "completed"]
        assert blocker["terminal_time_ms"] == min(r["terminal_time_ms"] for r in failures)


def test_dispatch_edges_fire_on_dispatch(tmp_path):
    header = {"schema": "dynamo.agentic_mooncake", "version": 2, "block_size": 64, "hash_id_scope": "local",
              "source": {"format": "test", "digest": "d"}}
    def node(rid, deps, nb=0):
        return {"request_id": rid, "play_id": "p", "session_id": rid, "model": "m", "input_length": 64,
                "output_length": 2, "hash_ids": [ord(rid[0])], "not_before_ms": nb, "dependencies": deps}
    rows = [header, node("root", [], 1000),
            node("child", [{"request_id": "root", "trigger": "dispatch", "delay_ms": 5, "relation": "spawn"}]),
            node("join", [{"request_id": "root", "trigger": "completion", "delay_ms": 1, "relation": "sequence"},
                          {"request_id": "child", "trigger": "completion", "delay_ms": 2, "relation": "join"}], 1100)]
    path = tmp_path / "trace.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = _config(str(path), 1.0)
    config["traffic"]["source"].pop("block_size")
    report = simulate(config, capture_per_request=True).to_dict()
    at = {r["request_id"]: r for r in report["per_request"]}
    assert at["root"]["arrival_time_ms"] == 1000.0  # the dependent nodes' not-before 0 keeps the origin
    assert at["child"]["arrival_time_ms"] == 1005.0
    join_ready = max(at["root"]["terminal_time_ms"] + 1, at["child"]["terminal_time_ms"] + 2, 1100.0)
    assert at["join"]["arrival_time_ms"] == join_ready
    assert [r["uuid"][-3:] for r in report["per_request"]] == ["001", "002", "003"]


def test_graph_digest_matches_the_reference_fixture():
    """The canonical JSON hashed with BLAKE3 (value recorded from the reference on this graph)."""
    def node(rid, deps, session, hashes):
        return AgenticNode(rid, "agent-play", session, "tiny-model", 4, 2, array("Q", hashes), 0.0, deps)
    nodes = [node("agent-root", [], "root", [301]),
             node("agent-child", [Dependency("agent-root", "dispatch", 5.0, "spawn")], "child", [302]),
             node("agent-join", [Dependency("agent-root", "completion", 1.0, "sequence"),
                                 Dependency("agent-child", "completion", 1.0, "join")], "root", [303])]
    graph = build_graph(nodes, 4, "e2e-fixture", "agentic-v1", "fixture.jsonl", speedup=1.5)
    assert graph.digest == "e0e7fd5d16c860849da57bb055771c965c556bcb34139802fb51b23bfba8a530"
    assert graph.report_block()["play_count"] == 1 and graph.num_requests == 3


def test_floats_are_written_as_serde_json_writes_them():
    assert [_float(x) for x in (0.0, 5.0, 3.3333333333333335, 1e16, 1.5e-7, 123456.5)] == \
        ["0.0", "5.0", "3.3333333333333335", "1e16", "1.5e-7", "123456.5"]


def test_legacy_plays_are_named_after_their_first_root(tmp_path):
    rows = [{"request_id": "aa", "timestamp": 30, "input_length": 1, "output_length": 1, "hash_ids": [1]},
            {"request_id": "zz", "timestamp": 10, "input_length": 1, "output_length": 1, "hash_ids": [2]},
            {"request_id": "mm", "wait_for": ["aa", "zz"], "input_length": 1, "output_length": 1, "hash_ids": [3]},
            {"request_id": "solo", "input_length": 1, "output_length": 1, "hash_ids": [4]}]
    path = tmp_path / "trace.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    graph = read_agentic_mooncake(str(path), 512)
    assert {n.request_id: n.play_id for n in graph.nodes} == {
        "aa": "legacy-play:zz", "mm": "legacy-play:zz", "zz": "legacy-play:zz", "solo": "legacy-play:solo"}
    assert graph.source_digest == "trace.jsonl:4" and graph.nodes[1].session_id == "agentic-session"
    assert [d.relation for d in graph.nodes[1].dependencies] == ["join", "join"]
