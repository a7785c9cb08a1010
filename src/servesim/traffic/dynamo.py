"""`dynamo` request traces (`dynamo.request.trace.v1`): one or more JSONL shards, plain or gzip.

Each line is an event, bare or wrapped as ``{"event": {...}}``. `request_end` events are
requests; `tool_end` / `tool_error` events describe tool calls (used by agent-aware traces);
`request_payload` and `tool_start` lines are skipped; anything else is an error. Every request
carries its prompt as ``request.replay{trace_block_size, input_length, input_sequence_hashes}``;
the block size must be the same everywhere, and an explicitly configured block size must equal
it.

Standard traces (no `agent_context`) become single-turn sessions ``request_<k>`` in order of
(start, end, request id), arriving at their start times. When every request carries an
`agent_context` the trace is an agentic graph instead (`servesim.traffic.dynamo_agentic`).
Shards are read one at a time; only the parsed requests are kept.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from servesim.errors import TraceError
from servesim.traffic.hash_ids import u64_array
from servesim.traffic.jsonl import finite_float, read_jsonl
from servesim.traffic.workload import Session, Turn, Workload

SCHEMA = "dynamo.request.trace.v1"
_SKIPPED = ("request_payload", "tool_start")
_TOOL_EVENTS = ("tool_end", "tool_error")


@dataclass(slots=True)
class DynamoRequest:
    """One `request_end` event, reduced to what replay needs."""

    request_id: str
    start_ms: float
    end_ms: float
    """Start plus duration (the sort key); `event_ms` is the recorded end event's time."""
    event_ms: float
    input_length: int
    output_length: int
    hash_ids: array
    agent_context: Mapping[str, Any] | None
    path: str
    line: int


@dataclass(slots=True)
class DynamoTool:
    """One `tool_end` / `tool_error` event of an agent-aware trace."""

    event: Mapping[str, Any]
    path: str
    line: int


def read_events(paths: list[str]) -> Iterator[tuple[str, int, str, Mapping[str, Any]]]:
    """(path, line, event type, event) of every event that matters, shard after shard."""
    for path in paths:
        for line, row in read_jsonl(path):
            event = row.get("event", row) if isinstance(row.get("event"), Mapping) else row
            kind = event.get("event_type")
            if kind in _SKIPPED:
                continue
            if kind != "request_end" and kind not in _TOOL_EVENTS:
                raise TraceError(path, line, "a Dynamo request trace supports request_end, tool_end, tool_error, "
                                             f"request_payload and tool_start events; got {kind!r}")
            if event.get("schema") != SCHEMA:
                raise TraceError(path, line, f"unsupported Dynamo request trace schema {event.get('schema')!r}")
            yield path, line, kind, event


def read_dynamo(paths: list[str], block_size: int | None) -> tuple[list[DynamoRequest], list[DynamoTool], int]:
    """Every request and tool event of the shards, and the trace block size."""
    requests: list[DynamoRequest] = []
    tools: list[DynamoTool] = []
    seen: set[str] = set()
    embedded: int | None = None
    for path, line, kind, event in read_events(paths):
        if kind != "request_end":
            tools.append(DynamoTool(event, path, line))
            continue
        try:
            request, size = _request(event, path, line)
        except ValueError as exc:
            raise TraceError(path, line, str(exc)) from None
        if request.request_id in seen:
            raise TraceError(path, line, f"duplicate request_id {request.request_id!r}")
        seen.add(request.request_id)
        if embedded is None:
            embedded = size
        elif size != embedded:
            raise TraceError(path, line, f"mixed replay trace_block_size values are not supported "
                                         f"({size} here, {embedded} before)")
        requests.append(request)
    if not requests:
        raise TraceError(", ".join(paths), None, "Dynamo trace contains no request_end records")
    assert embedded is not None
    if block_size is not None and block_size != embedded:
        raise TraceError(paths[0], None, f"trace_block_size {block_size} does not match embedded Dynamo "
                                         f"request trace block size {embedded}")
    with_context = sum(r.agent_context is not None for r in requests)
    if 0 < with_context < len(requests):
        odd = next(r for r in requests if (r.agent_context is None) == (with_context * 2 > len(requests)))
        raise TraceError(odd.path, odd.line, "Dynamo request trace cannot mix requests with and without agent_context")
    return requests, tools, embedded


def standard_workload(requests: list[DynamoRequest], block_size: int) -> Workload:
    """Single-turn sessions `request_<k>` in (start, end, request id) order (ids unique)."""
    requests.sort(key=lambda r: (r.start_ms, r.end_ms, r.request_id))
    sessions = [Session(f"request_{k}", [Turn(r.hash_ids, block_size, r.input_length, r.output_length)],
                        r.start_ms) for k, r in enumerate(requests, start=1)]
    return Workload(sessions)


def _request(event: Mapping[str, Any], path: str, line: int) -> tuple[DynamoRequest, int]:
    request = event.get("request")
    if not isinstance(request, Mapping):
        raise ValueError("request_end is missing request metrics")
    request_id = request.get("request_id")
    if not isinstance(request_id, str) or not request_id:
        raise ValueError("request.request_id must be a nonempty string")
    output = request.get("output_tokens")
    if type(output) is not int or output < 0:
        raise ValueError("missing output_tokens" if output is None else f"output_tokens must be an integer >= 0 (got {output!r})")
    replay = request.get("replay")
    if not isinstance(replay, Mapping):
        raise ValueError("request.replay {trace_block_size, input_length, input_sequence_hashes} is required")
    size = replay.get("trace_block_size")
    if type(size) is not int or size <= 0:
        raise ValueError("embedded trace block size must be positive")
    length = replay.get("input_length")
    if type(length) is not int or length <= 0:
        raise ValueError(f"replay.input_length must be a positive integer (got {length!r})")
    hashes = replay.get("input_sequence_hashes")
    ids = u64_array(hashes) if isinstance(hashes, list) and hashes else None
    if ids is None:
        raise ValueError("replay.input_sequence_hashes must be a nonempty list of unsigned 64-bit integers")
    if len(ids) * size < length:
        raise ValueError(f"input_length {length} exceeds hash_ids capacity {len(ids) * size}")
    start, end, event_time = _span(event, request)
    context = event.get("agent_context")
    if context is not None and not isinstance(context, Mapping):
        raise ValueError("agent_context must be an object")
    return DynamoRequest(request_id, start, end, event_time, length, output, ids, context, path, line), size


def _span(event: Mapping[str, Any], request: Mapping[str, Any]) -> tuple[float, float, float]:
    """Start (received, else end event time minus the rounded duration), start plus duration
    (else the end event time) and end event time of a request."""
    event_time = _millis(event.get("event_time_unix_ms"), "event_time_unix_ms")
    total = request.get("total_time_ms")
    if total is not None:
        total = _number(total, "total_time_ms")
        if total < 0:
            raise ValueError("request duration must be finite and nonnegative")
    received = request.get("request_received_ms")
    if received is not None:
        start = _millis(received, "request_received_ms")
    else:
        start = event_time - (math.floor(total + 0.5) if total is not None else 0.0)
    end = start + total if total is not None else event_time
    return start, end, event_time


def _millis(value: Any, field: str) -> float:
    """A Unix time in whole milliseconds (an unsigned integer, as the trace schema has it)."""
    number = finite_float(value) if type(value) is int and value >= 0 else None
    if number is None:
        raise ValueError(f"{field} must be an unsigned integer number of milliseconds (got {value!r})")
    return number


def _number(value: Any, field: str) -> float:
    number = finite_float(value)
    if number is None:
        raise ValueError(f"{field} must be a finite number (got {value!r})")
    return number
