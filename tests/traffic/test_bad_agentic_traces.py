"""Malformed agentic and Dynamo traces: a TraceError naming the file and line, exit code 1."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
import yaml

from servesim.cli import main
from servesim.errors import TraceError
from servesim.traffic.spec import read_trace


def _row(rid: str, **extra: object) -> dict:
    return {"request_id": rid, "input_length": 64, "output_length": 2, "hash_ids": [1], **extra}


def _v2(rid: str, play: str = "P", deps: list | None = None, **extra: object) -> dict:
    return {"request_id": rid, "play_id": play, "session_id": "s", "model": "m", "input_length": 64,
            "output_length": 2, "hash_ids": [1], "not_before_ms": 0, "dependencies": deps or [], **extra}


HEADER = {"schema": "dynamo.agentic_mooncake", "version": 2, "block_size": 64, "hash_id_scope": "local",
          "source": {"format": "test", "digest": "d"}}


def _dynamo(rid: str, *, context: dict | None = None, size: int = 64, **request: object) -> dict:
    event = {"schema": "dynamo.request.trace.v1", "event_type": "request_end", "event_time_unix_ms": 1010,
             "request": {"request_id": rid, "output_tokens": 2, "request_received_ms": 1000, "total_time_ms": 10,
                         "replay": {"trace_block_size": size, "input_length": size, "input_sequence_hashes": [1]},
                         **request}}
    if context is not None:
        event["agent_context"] = context
    return event


def _write(path: Path, rows: list) -> str:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return str(path)


AGENTIC = [
    ("unknown parent", [_row("a"), _row("b", wait_for=["zz"])], 2, "references unknown request_id zz"),
    ("cycle", [_row("r"), _row("a", wait_for=["b"]), _row("b", wait_for=["a"])], 2, "cycle detected among 2"),
    ("self dependency", [_row("a", wait_for=["a"])], 1, "cannot depend on itself"),
    ("duplicate id", [_row("a"), _row("a")], 2, "duplicates request_id a"),
    ("missing request_id", [_row("a"), {"input_length": 64, "output_length": 2, "hash_ids": [1]}], 2, "request_id"),
    ("missing output_length", [_row("a"), {"request_id": "b", "input_length": 64, "hash_ids": [1]}], 2,
     "missing output_length"),
    ("missing input_length", [_row("a"), {"request_id": "b", "output_length": 2, "hash_ids": [1]}], 2,
     "missing input_length"),
    ("missing hash_ids", [_row("a"), {"request_id": "b", "input_length": 64, "output_length": 2}], 2,
     "missing hash_ids"),
    ("hash-id count", [_row("a"), _row("b", input_length=65)], 2, "requires exactly 2 hash_ids, got 1"),
    ("zero input", [_row("a", input_length=0)], 1, "zero input_length"),
    ("negative tool wait", [_row("a"), _row("b", wait_for=["a"], tool_wait_ms=-1)], 2, "tool_wait_ms"),
    ("delay and delay_ms", [_row("a"), _row("b", wait_for=["a"], delay=1, delay_ms=2)], 2, "cannot both be set"),
    ("bad JSON", [_row("a"), '{"request_id": '], 2, "invalid JSON"),
    ("negative timestamp", [_row("a", timestamp=-5)], 1, "timestamp"),
    ("v2 version", [dict(HEADER, version=1), _v2("a")], 1, "unsupported agentic Mooncake version 1"),
    ("v2 scope", [dict(HEADER, hash_id_scope="global"), _v2("a")], 1, "hash_id_scope"),
    ("v2 unknown parent", [HEADER, _v2("a"), _v2("b", deps=[{"request_id": "x", "trigger": "completion",
                                                            "delay_ms": 0, "relation": "join"}])], 3, "unknown"),
    ("v2 dispatch join", [HEADER, _v2("a"), _v2("b", deps=[{"request_id": "a", "trigger": "dispatch",
                                                           "delay_ms": 0, "relation": "join"}])], 3, "dispatch"),
    ("v2 cross-play edge", [HEADER, _v2("a"), _v2("b", play="Q", deps=[{"request_id": "a", "trigger": "completion",
                                                                       "delay_ms": 0, "relation": "sequence"}])],
     3, "in play Q depends on request a in play P"),
    ("v2 missing play", [HEADER, _v2("a", play="")], 2, "play_id"),
    ("v2 negative delay", [HEADER, _v2("a"), _v2("b", deps=[{"request_id": "a", "trigger": "completion",
                                                            "delay_ms": -1, "relation": "join"}])], 3, "delay"),
]


@pytest.mark.parametrize("rows, line, message", [c[1:] for c in AGENTIC], ids=[c[0] for c in AGENTIC])
def test_bad_agentic_mooncake_rows_name_file_and_line(tmp_path, rows, line, message):
    path = _write(tmp_path / "trace.jsonl", rows)
    with pytest.raises(TraceError, match=message) as caught:
        read_trace("agentic_mooncake", [path], 64, 1.0)
    assert (caught.value.path, caught.value.line) == (path, line)
    assert str(caught.value).startswith(f"{path}:{line}: ")


def test_an_empty_agentic_trace_is_an_error(tmp_path):
    path = _write(tmp_path / "trace.jsonl", [""])
    with pytest.raises(TraceError, match="empty"):
        read_trace("agentic_mooncake", [path], 64, 1.0)


DYNAMO = [
    ("missing output_tokens", [_dynamo("a"), _dynamo("b", output_tokens=None)], 2, "output_tokens"),
    ("float event time", [dict(_dynamo("a"), event_time_unix_ms=1010.5)], 1, "event_time_unix_ms"),
    ("duplicate id", [_dynamo("a"), _dynamo("a")], 2, "duplicate request_id"),
    ("over capacity", [_dynamo("a", replay={"trace_block_size": 64, "input_length": 65,
                                           "input_sequence_hashes": [1]})], 1, "exceeds hash_ids capacity 64"),
    ("mixed block sizes", [_dynamo("a"), _dynamo("b", size=32)], 2, "mixed replay trace_block_size"),
    ("schema", [dict(_dynamo("a"), schema="v0")], 1, "schema"),
    ("event type", [_dynamo("a"), dict(_dynamo("b"), event_type="foo")], 2, "got 'foo'"),
    ("mixed agent_context", [_dynamo("a", context={"session_id": "s"}), _dynamo("b"), _dynamo("c")], 1,
     "cannot mix requests with and without agent_context"),
    ("tool end before start", [_dynamo("a", context={"session_id": "s"}),
                               {"schema": "dynamo.request.trace.v1", "event_type": "tool_end",
                                "event_time_unix_ms": 5, "agent_context": {"session_id": "s"},
                                "tool": {"tool_call_id": "t", "tool_class": "agent", "started_at_unix_ms": 9,
                                         "ended_at_unix_ms": 5}}], 2, "tool end time precedes start time"),
]


@pytest.mark.parametrize("rows, line, message", [c[1:] for c in DYNAMO], ids=[c[0] for c in DYNAMO])
def test_bad_dynamo_rows_name_file_and_line(tmp_path, rows, line, message):
    good = _write(tmp_path / "first.jsonl", [_dynamo("first")])
    path = _write(tmp_path / "second.jsonl", [r if r.get("request", {}).get("output_tokens", 0) is not None
                                              else {**r, "request": {k: v for k, v in r["request"].items()
                                                                     if k != "output_tokens"}} for r in rows])
    with pytest.raises(TraceError, match=message) as caught:
        agentic = any("agent_context" in r for r in rows)
        read_trace("dynamo", [path] if agentic else [good, path], None, 1.0)
    assert (caught.value.path, caught.value.line) == (path, line)


def test_explicit_block_size_must_match_the_embedded_one(tmp_path):
    path = _write(tmp_path / "trace.jsonl", [_dynamo("a")])
    with pytest.raises(TraceError, match="trace_block_size 32 does not match embedded Dynamo request trace block size 64"):
        read_trace("dynamo", [path], 32, 1.0)
    assert read_trace("dynamo", [path], 64, 1.0).num_requests == 1


def test_truncated_gzip_member_names_the_line_where_it_ends(tmp_path):
    text = "".join(json.dumps(_dynamo(f"r{i}")) + "\n" for i in range(400)).encode()
    data = gzip.compress(text, mtime=0)
    path = tmp_path / "trace.jsonl.gz"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(TraceError, match="truncated gzip stream") as caught:
        read_trace("dynamo", [str(path)], None, 1.0)
    assert caught.value.path == str(path) and caught.value.line is not None and caught.value.line > 1


def test_a_bad_trace_exits_1_without_a_traceback(tmp_path, capsys):
    trace = _write(tmp_path / "trace.jsonl", [_row("a", timestamp=0), _row("b", wait_for=["a", "ghost"])])
    config = {"engine": {"mode": "aggregated", "model": "Qwen/Qwen3-8B", "hardware": "h200_sxm", "backend": "vllm",
                         "context_length": 4096,
                         "workers": {"aggregated": {"kv_cache": {"capacity": {"type": "fixed", "blocks": 100}},
                                                    "timing": {"type": "fixed", "prefill_ms": 1, "decode_ms": 1}}}},
              "traffic": {"source": {"type": "trace", "format": "agentic_mooncake", "paths": [trace],
                                     "block_size": 64},
                          "load": {"type": "trace_timestamps"}}}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    code = main(["predict", "-c", str(tmp_path / "config.yaml"), "--output-dir", str(tmp_path / "out")])
    out, err = capsys.readouterr()
    assert code == 1 and out == "" and "Traceback" not in err
    assert f"{trace}:2: request b references unknown request_id ghost" in err


@pytest.mark.parametrize("traffic, message", [
    ({"load": {"type": "concurrency", "concurrency": 2}}, "does not support concurrency load"),
    ({"load": {"type": "trace_timestamps"}, "stop": {"max_virtual_time_seconds": 1}}, "does not support max virtual time"),
])
def test_agent_aware_dynamo_traces_refuse_what_the_reference_refuses(tmp_path, traffic, message):
    from servesim import simulate
    from servesim.errors import RunError

    trace = _write(tmp_path / "trace.jsonl", [_dynamo("a", context={"session_id": "s"})])
    config = {"engine": {"mode": "aggregated", "model": "Qwen/Qwen3-8B", "hardware": "h200_sxm", "backend": "vllm",
                         "context_length": 4096,
                         "workers": {"aggregated": {"kv_cache": {"capacity": {"type": "fixed", "blocks": 100}},
                                                    "timing": {"type": "fixed", "prefill_ms": 1, "decode_ms": 1}}}},
              "traffic": {"source": {"type": "trace", "format": "dynamo", "paths": [trace]}, **traffic}}
    with pytest.raises(RunError, match=message):
        simulate(config)
    config["traffic"] = {"source": config["traffic"]["source"], "load": {"type": "trace_timestamps"}}
    assert simulate(config)["completed_trajectories"] == 1
