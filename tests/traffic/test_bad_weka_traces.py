"""A malformed `weka` trace stops the run with an error naming the file and the line of the
entry at fault (docs/traffic.md, `weka`); bad `weka` config keys are config errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servesim.errors import ConfigError, TraceError
from servesim.traffic.weka import read_weka


def _req(t: float, **extra: object) -> dict:
    return {"type": "n", "t": t, "model": "m", "in": 32, "out": 4, "hash_ids": [1, 2], **extra}


def _trace(requests: list, **extra: object) -> dict:
    return {"id": "p", "block_size": 16, "hash_id_scope": "local", "requests": requests, **extra}


def _json_file(tmp_path: Path, trace: dict) -> Path:
    """One entry a line: entry k of `requests` is on line k + 2."""
    head = json.dumps({k: v for k, v in trace.items() if k != "requests"})[:-1]
    path = tmp_path / "t.json"
    path.write_text(head + ', "requests": [\n' + ",\n".join(json.dumps(r) for r in trace["requests"]) + "\n]}\n")
    return path


@pytest.mark.parametrize(("bad", "message"), [
    ({"in": 0}, "zero-length request"),
    ({"t": -1}, "invalid request timestamp"),
    ({"api_time": -0.5}, "invalid api_time"),
    ({"in": 3.5}, "in must be a non-negative integer"),
    ({"hash_ids": [-1]}, "hash_ids must be a list of unsigned 64-bit integers"),
    ({"type": "x"}, "type must be 'n', 's' or 'subagent'"),
])
def test_a_bad_request_names_its_line(tmp_path: Path, bad: dict, message: str) -> None:
    path = _json_file(tmp_path, _trace([_req(0.0), _req(0.5), {**_req(1.0), **bad}]))
    with pytest.raises(TraceError) as info:
        read_weka(str(path))
    assert message in str(info.value)
    assert info.value.path == str(path)
    assert info.value.line == 4


def test_a_bad_nested_request_names_its_own_line(tmp_path: Path) -> None:
    sub = {"type": "subagent", "t": 0.5, "agent_id": "a", "subagent_type": "Explore", "status": "completed",
           "requests": [_req(0.6), _req(0.7, model="")]}
    path = tmp_path / "t.json"
    path.write_text(json.dumps(_trace([_req(0.0), sub])).replace('{"type": "n", "t": 0.7', '\n{"type": "n", "t": 0.7'))
    with pytest.raises(TraceError, match="nested request 1: empty request model") as info:
        read_weka(str(path))
    assert info.value.line == 2


def test_jsonl_objects_are_named_by_line(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    good = json.dumps(_trace([_req(0.0)]))
    path.write_text(good + "\n\n" + json.dumps(_trace([_req(0.0)], block_size=32, id="q")) + "\n")
    with pytest.raises(TraceError, match="mixes block sizes") as info:
        read_weka(str(path))
    assert info.value.line == 3
    path.write_text(good + "\n{not json\n")
    with pytest.raises(TraceError) as info:
        read_weka(str(path))
    assert info.value.line == 2


@pytest.mark.parametrize(("sub", "message"), [
    ({"status": "failed"}, "unsupported non-success subagent status 'failed'"),
    ({"requests": []}, "blocking subagent a has no replayable requests"),
    ({"duration_ms": -3}, "duration_ms of subagent a must be a non-negative integer"),
    ({"subagent_type": None}, "missing field 'subagent_type'"),
])
def test_bad_subagents(tmp_path: Path, sub: dict, message: str) -> None:
    marker = {"type": "subagent", "t": 0.5, "agent_id": "a", "subagent_type": "Explore", "status": "completed",
              "requests": [_req(0.6)], **sub}
    marker = {k: v for k, v in marker.items() if v is not None}
    path = _json_file(tmp_path, _trace([_req(0.0), marker]))
    with pytest.raises(TraceError, match=message) as info:
        read_weka(str(path))
    assert info.value.line == 3


def test_absolute_basis_refuses_a_nested_request_before_its_marker(tmp_path: Path) -> None:
    marker = {"type": "subagent", "t": 5.0, "agent_id": "a", "subagent_type": "Explore", "status": "completed",
              "requests": [_req(0.1)]}
    path = _json_file(tmp_path, _trace([_req(0.0), marker]))
    with pytest.raises(TraceError, match="precedes its marker at 5.0 under absolute"):
        read_weka(str(path), "absolute")
    graph, basis = read_weka(str(path))  # auto: the early nested request makes it relative
    assert basis == "relative"
    assert {n.not_before_ms for n in graph.nodes} == {0.0, 5100.0}


def test_a_subagent_needs_a_preceding_parent_request(tmp_path: Path) -> None:
    marker = {"type": "subagent", "t": 0.0, "agent_id": "a", "subagent_type": "Explore", "status": "completed",
              "requests": [_req(0.1)]}
    path = _json_file(tmp_path, _trace([marker, _req(1.0)]))
    with pytest.raises(TraceError, match="without a preceding parent request"):
        read_weka(str(path))


def test_declared_models_and_file_kinds(tmp_path: Path) -> None:
    path = _json_file(tmp_path, _trace([_req(0.0)], models=["other"]))
    with pytest.raises(TraceError, match="absent from its declaration"):
        read_weka(str(path))
    wrong = tmp_path / "t.txt"
    wrong.write_text("{}")
    with pytest.raises(TraceError, match=r"\.json or \.jsonl extension"):
        read_weka(str(wrong))
    path.write_text(json.dumps(_trace([_req(0.0)])) + "\n" + json.dumps(_trace([_req(0.0)])) + "\n")
    with pytest.raises(TraceError, match="more than one object; use a .jsonl extension") as info:
        read_weka(str(path))
    assert info.value.line == 2


def test_weka_config_rules() -> None:
    from servesim.config.load import parse_config

    base = {"engine": {"mode": "aggregated", "model": "Qwen/Qwen3-8B", "hardware": "h200_sxm", "backend": "vllm",
                       "workers": {"aggregated": {"timing": {"type": "fixed", "prefill_ms": 1, "decode_ms": 1}}}},
            "traffic": {"source": {"type": "trace", "format": "mooncake", "paths": ["t.jsonl"],
                                   "nested_timestamp_basis": "relative"},
                        "load": {"type": "trace_timestamps"}}}
    with pytest.raises(ConfigError, match="nested_timestamp_basis.*only valid for format 'weka'"):
        parse_config(base)
    base["traffic"]["source"]["format"] = "weka"
    base["traffic"]["load"] = {"type": "concurrency", "concurrency": 2}
    with pytest.raises(ConfigError, match="format 'weka' requires 'trace_timestamps' load"):
        parse_config(base)
