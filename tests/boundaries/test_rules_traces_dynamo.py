"""Dynamo request-trace rules (traffic/dynamo.py): a request starts at its received time, else
at its end event minus its duration rounded half up; it ends at start plus the (unrounded)
duration; zero and the capacity of the hash ids are allowed limits, one past them an error;
standard traces are sessions `request_<k>` in (start, end, request id) order; skipped and
wrapped events; a mixed trace names its minority request."""

from __future__ import annotations

import json

import pytest

from servesim.errors import TraceError
from servesim.traffic.dynamo import SCHEMA, read_dynamo, standard_workload


def _end(rid: str, event_ms: int = 10_000, *, total=None, received=None, length: int = 32, hashes=(1, 2),
         size: int = 16, output: int = 4, context=None, **extra) -> dict:
    request = {"request_id": rid, "output_tokens": output,
               "replay": {"trace_block_size": size, "input_length": length, "input_sequence_hashes": list(hashes)}}
    if total is not None:
        request["total_time_ms"] = total
    if received is not None:
        request["request_received_ms"] = received
    event = {"schema": SCHEMA, "event_type": "request_end", "event_time_unix_ms": event_ms, "request": request}
    if context is not None:
        event["agent_context"] = context
    return event | extra


def _read(tmp_path, *events, block_size=None, name="t.jsonl"):
    path = tmp_path / name
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    return read_dynamo([str(path)], block_size)


@pytest.mark.parametrize(("total", "start"), [(2.5, 9_997.0), (2.49, 9_998.0), (3.5, 9_996.0), (0.0, 10_000.0),
                                              (7, 9_993.0)])
def test_the_start_subtracts_the_duration_rounded_half_up(tmp_path, total, start):
    (request,), _, _ = _read(tmp_path, _end("a", total=total))
    assert request.start_ms == start
    assert request.end_ms == start + total, "the end adds the duration as recorded"
    assert request.event_ms == 10_000.0


def test_a_received_time_is_the_start(tmp_path):
    (request,), _, _ = _read(tmp_path, _end("a", total=5.25, received=9_000))
    assert (request.start_ms, request.end_ms) == (9_000.0, 9_005.25)


def test_without_a_duration_a_request_starts_and_ends_at_its_event(tmp_path):
    (request,), _, _ = _read(tmp_path, _end("a", event_ms=0))
    assert (request.start_ms, request.end_ms, request.event_ms) == (0.0, 0.0, 0.0)


@pytest.mark.parametrize(("changes", "message"), [
    ({"total": -0.5}, "duration must be finite and nonnegative"),
    ({"event_ms": -1}, "event_time_unix_ms must be an unsigned integer"),
    ({"received": -1}, "request_received_ms must be an unsigned integer"),
    ({"output": -1}, "output_tokens must be an integer >= 0"),
    ({"size": 0}, "embedded trace block size must be positive"),
    ({"length": 0}, "input_length must be a positive integer"),
    ({"length": 33}, "input_length 33 exceeds hash_ids capacity 32"),
    ({"hashes": ()}, "input_sequence_hashes must be a nonempty list"),
    ({"hashes": (1, -1)}, "input_sequence_hashes must be a nonempty list"),
])
def test_one_past_each_limit_is_an_error_naming_the_line(tmp_path, changes, message):
    with pytest.raises(TraceError, match=message) as info:
        _read(tmp_path, _end("ok"), _end("bad", **changes))
    assert ":2" in str(info.value)


def test_each_limit_itself_is_accepted(tmp_path):
    (request,), _, size = _read(tmp_path, _end("a", event_ms=0, total=0.0, received=0, output=0, size=1, length=2))
    assert (request.output_length, request.input_length, size) == (0, 2, 1)
    (request,), _, _ = _read(tmp_path, _end("b", length=32, hashes=(1, 2), size=16), name="u.jsonl")
    assert request.input_length == 32 and list(request.hash_ids) == [1, 2]


def test_sessions_follow_start_then_end_then_request_id(tmp_path):
    events = [_end("c", event_ms=1_005, total=5), _end("b", event_ms=1_003, total=2),
              _end("a", event_ms=1_007, total=6.6), _end("d", event_ms=900, received=1_000, total=1)]
    requests, _, size = _read(tmp_path, *events)
    # starts: c 1000, b 1001, a 1000 (7 rounded), d 1000; ends: c 1005, a 1006.6, d 1001
    workload = standard_workload(requests, size)
    assert [r.request_id for r in requests] == ["d", "c", "a", "b"]
    assert [s.session_id for s in workload.sessions] == ["request_1", "request_2", "request_3", "request_4"]
    assert [s.first_arrival_ms for s in workload.sessions] == [1_000.0, 1_000.0, 1_000.0, 1_001.0]
    assert [s.turns[0].input_length for s in workload.sessions] == [32] * 4


def test_equal_spans_are_ordered_by_request_id(tmp_path):
    requests, _, size = _read(tmp_path, _end("z", total=1), _end("m", total=1), _end("q", total=1))
    standard_workload(requests, size)
    assert [r.request_id for r in requests] == ["m", "q", "z"]


def test_wrapped_and_skipped_events(tmp_path):
    skipped = [{"schema": SCHEMA, "event_type": kind} for kind in ("request_payload", "tool_start")]
    tool = {"schema": SCHEMA, "event_type": "tool_end", "tool": {}}
    requests, tools, _ = _read(tmp_path, *skipped, {"event": _end("a")}, tool)
    assert [r.request_id for r in requests] == ["a"] and requests[0].line == 3
    assert len(tools) == 1 and tools[0].line == 4


@pytest.mark.parametrize(("event", "message"), [
    ({"schema": SCHEMA, "event_type": "request_start"}, "supports request_end"),
    ({"schema": "other", "event_type": "request_end"}, "unsupported Dynamo request trace schema"),
])
def test_unknown_events_and_schemas_are_errors(tmp_path, event, message):
    with pytest.raises(TraceError, match=message):
        _read(tmp_path, _end("a"), event)


def test_block_sizes_must_agree(tmp_path):
    with pytest.raises(TraceError, match=r"mixed replay trace_block_size values .*\(8 here, 16 before\)"):
        _read(tmp_path, _end("a"), _end("b", size=8, length=16))
    with pytest.raises(TraceError, match="trace_block_size 32 does not match embedded"):
        _read(tmp_path, _end("a"), block_size=32)
    assert _read(tmp_path, _end("a"), block_size=16)[2] == 16


def test_a_duplicate_request_id_is_an_error(tmp_path):
    with pytest.raises(TraceError, match="duplicate request_id 'a'"):
        _read(tmp_path, _end("a"), _end("b"), _end("a"))


def test_an_empty_trace_is_an_error(tmp_path):
    with pytest.raises(TraceError, match="no request_end records"):
        _read(tmp_path, {"schema": SCHEMA, "event_type": "tool_start"})


@pytest.mark.parametrize(("contexts", "odd_line"), [
    ([{}, None, None], 1),       # one with a context among three: it is the odd one
    ([None, {}, {}], 1),         # one without: it is the odd one
    ([None, {}], 2),             # a tie: the first with a context
    ([None, None, {}, {}], 3),
    ([None, {}, None, {}, {}], 1),
])
def test_a_mixed_trace_names_its_minority_request(tmp_path, contexts, odd_line):
    events = [_end(f"r{i}", context=c) for i, c in enumerate(contexts)]
    with pytest.raises(TraceError, match="cannot mix requests with and without agent_context") as info:
        _read(tmp_path, *events)
    assert f":{odd_line}:" in str(info.value) or str(info.value).endswith(f":{odd_line}")


def test_every_request_with_a_context_is_kept_with_it(tmp_path):
    requests, _, _ = _read(tmp_path, _end("a", context={"k": 1}), _end("b", context={}))
    assert [r.agent_context for r in requests] == [{"k": 1}, {}]
    with pytest.raises(TraceError, match="agent_context must be an object"):
        _read(tmp_path, _end("a", context=[1]))
