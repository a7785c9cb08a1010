"""`agentic_mooncake` traces lowered to an `AgenticGraph` (docs/traffic.md).

Two forms, told apart by the first non-blank line:

* **v2**: a header ``{"schema": "dynamo.agentic_mooncake", "version": 2, "block_size", "hash_id_scope":
  "local", "source": {"format", "digest"}}``, then one request per line with its `play_id`,
  `not_before_ms` and explicit `dependencies`;
* **legacy**: one request per line with `wait_for` (parent request ids), `delay`/`delay_ms` and
  `tool_wait_ms` (added together into every edge's delay), and `timestamp` (the not-before time
  of rows without parents). Plays are the connected components of the dependency graph.

Every request needs exactly ceil(input_length / block_size) hash ids.
"""

from __future__ import annotations

import os
from array import array
from collections.abc import Iterator, Mapping
from typing import Any

from servesim.errors import TraceError
from servesim.traffic.agentic import AgenticGraph, AgenticNode, Dependency, build_graph, legacy_play_ids
from servesim.traffic.hash_ids import u64_array
from servesim.traffic.jsonl import finite_float, read_jsonl

V2_SCHEMA = "dynamo.agentic_mooncake"
LEGACY_PLAY_PREFIX = "legacy-play:"
LEGACY_SESSION = "agentic-session"
_TRIGGERS = ("completion", "dispatch")
_RELATIONS = ("sequence", "spawn", "join", "replay_barrier")


def read_agentic_mooncake(path: str, block_size: int, *, speedup: float = 1.0) -> AgenticGraph:
    """Read either form; `block_size` applies to legacy rows (v2 headers carry their own)."""
    rows = read_jsonl(path)
    first = next(rows, None)
    if first is None:
        raise TraceError(path, None, "agentic trace file is empty")
    line, row = first
    if row.get("schema") == V2_SCHEMA:
        header_block, source = _v2_header(path, line, row)
        nodes = [_guard(path, n, _v2_node, r, header_block) for n, r in rows]
        if not nodes:
            raise TraceError(path, None, "agentic Mooncake rows did not contain any requests")
        return build_graph(_unique(path, nodes), header_block, source[0], source[1], path, speedup=speedup)
    nodes = [_guard(path, n, _legacy_node, r, block_size) for n, r in _chain(first, rows)]
    legacy_play_ids(_unique(path, nodes), LEGACY_PLAY_PREFIX)
    digest = f"{os.path.basename(path)}:{len(nodes)}"
    return build_graph(nodes, block_size, "legacy_agentic_mooncake", digest, path, speedup=speedup)


def _chain(first: tuple[int, dict[str, Any]], rest: Iterator[tuple[int, dict[str, Any]]]
           ) -> Iterator[tuple[int, dict[str, Any]]]:
    yield first
    yield from rest


def _guard(path: str, line: int, parse: Any, row: Mapping[str, Any], block_size: int) -> AgenticNode:
    """Parse one row, turning a ValueError into a TraceError that names file and line."""
    try:
        node = parse(row, block_size)
    except ValueError as exc:
        raise TraceError(path, line, str(exc)) from None
    node.line = line
    return node


def _unique(path: str, nodes: list[AgenticNode]) -> list[AgenticNode]:
    seen: set[str] = set()
    for node in nodes:
        if node.request_id in seen:
            raise TraceError(path, node.line, f"duplicates request_id {node.request_id}")
        seen.add(node.request_id)
    return nodes


# -- v2 ---------------------------------------------------------------------------------------

def _v2_header(path: str, line: int, row: Mapping[str, Any]) -> tuple[int, tuple[str, str]]:
    """The header's block size and source (format, digest)."""
    version = row.get("version")
    if version != 2:
        raise TraceError(path, line, f"unsupported agentic Mooncake version {version}; expected 2")
    try:
        block_size = _count(row.get("block_size"), "block_size")
        if block_size == 0:
            raise ValueError("agentic Mooncake block_size must be greater than 0")
        if row.get("hash_id_scope") != "local":
            raise ValueError(f"hash_id_scope must be 'local' (got {row.get('hash_id_scope')!r})")
        source = row.get("source")
        if not isinstance(source, Mapping) or "format" not in source or "digest" not in source:
            raise ValueError("the header needs source {format, digest}")
        fmt, digest = source["format"], source["digest"]
        if not isinstance(fmt, str) or not isinstance(digest, str) or not fmt or not digest:
            raise ValueError("agentic Mooncake source provenance requires nonempty format and digest")
    except ValueError as exc:
        raise TraceError(path, line, f"invalid agentic Mooncake v2 header: {exc}") from None
    return block_size, (fmt, digest)


def _v2_node(row: Mapping[str, Any], block_size: int) -> AgenticNode:
    request_id = _text(row.get("request_id"), "request_id")
    play_id = _text(row.get("play_id"), "play_id")
    session_id = _text(row.get("session_id"), "session_id")
    model = row.get("model")
    if not isinstance(model, str):
        raise ValueError("model must be a string")
    not_before = _time(row.get("not_before_ms"), "not_before_ms")
    deps = row.get("dependencies")
    if not isinstance(deps, list):
        raise ValueError("dependencies must be a list")
    node = _request(request_id, play_id, session_id, model, row, block_size, not_before,
                    [_v2_dependency(d) for d in deps])
    return node


def _v2_dependency(value: Any) -> Dependency:
    if not isinstance(value, Mapping):
        raise ValueError("each dependency must be an object")
    parent = value.get("request_id")
    if not isinstance(parent, str) or not parent:
        raise ValueError("has a dependency with an empty request_id")
    trigger, relation = value.get("trigger"), value.get("relation")
    if trigger not in _TRIGGERS:
        raise ValueError(f"dependency trigger must be one of {', '.join(_TRIGGERS)} (got {trigger!r})")
    if relation not in _RELATIONS:
        raise ValueError(f"dependency relation must be one of {', '.join(_RELATIONS)} (got {relation!r})")
    if trigger == "dispatch" and relation != "spawn":
        raise ValueError(f"has invalid {relation} dependency with dispatch trigger (only spawn edges fire on dispatch)")
    return Dependency(parent, trigger, _time(value.get("delay_ms"), "dependency delay"), relation)


# -- legacy -----------------------------------------------------------------------------------

def _legacy_node(row: Mapping[str, Any], block_size: int) -> AgenticNode:
    request_id = _text(row.get("request_id"), "request_id")
    session_id = row.get("session_id", LEGACY_SESSION)
    if session_id is None:
        session_id = LEGACY_SESSION
    if not isinstance(session_id, str):
        raise ValueError("session_id must be a string")
    if "delay" in row and "delay_ms" in row:
        raise ValueError("delay and delay_ms cannot both be set")
    delay = _time(row.get("delay", row.get("delay_ms", 0.0)) or 0.0, "delay")
    tool_wait = _time(row.get("tool_wait_ms", 0.0) or 0.0, "tool_wait_ms")
    wait_for = row.get("wait_for") or []
    if not isinstance(wait_for, list) or not all(isinstance(p, str) for p in wait_for):
        raise ValueError("wait_for must be a list of request ids")
    relation = "join" if len(wait_for) > 1 else "sequence"
    deps = [Dependency(p, "completion", delay + tool_wait, relation) for p in wait_for]
    timestamp = row.get("timestamp")
    not_before = 0.0 if deps or timestamp is None else _time(timestamp, "timestamp")
    return _request(request_id, "", session_id, "unknown", row, block_size, not_before, deps)


# -- shared -----------------------------------------------------------------------------------

def _request(request_id: str, play_id: str, session_id: str, model: str, row: Mapping[str, Any],
             block_size: int, not_before: float, deps: list[Dependency]) -> AgenticNode:
    """A node with its lengths and hash ids checked against the block size."""
    if row.get("input_length") is None:
        raise ValueError("is missing input_length")
    if row.get("output_length") is None:
        raise ValueError("is missing output_length")
    if row.get("hash_ids") is None:
        raise ValueError("is missing hash_ids")
    input_length = _count(row["input_length"], "input_length")
    if input_length == 0:
        raise ValueError("has zero input_length")
    output_length = _count(row["output_length"], "output_length")
    hash_ids = check_hash_ids(row["hash_ids"], input_length, block_size)
    policy = row.get("policy_class")
    if policy is not None and not isinstance(policy, str):
        raise ValueError("policy_class must be a string")
    return AgenticNode(request_id, play_id, session_id, model, input_length, output_length, hash_ids,
                       not_before, deps, _count(row.get("priority", 0), "priority", signed=True),
                       _count(row.get("strict_priority", 0), "strict_priority"), policy)


def check_hash_ids(value: Any, input_length: int, block_size: int) -> array:
    """The hash ids of a prompt, which must be exactly ceil(input_length / block_size) u64s."""
    if not isinstance(value, list) or not value:
        raise ValueError("hash_ids must be a nonempty list")
    ids = u64_array(value)
    if ids is None:
        raise ValueError("hash_ids must hold unsigned 64-bit integers")
    need = -(-input_length // block_size)
    if len(value) != need:
        raise ValueError(f"has input_length {input_length} at block_size {block_size} and requires "
                         f"exactly {need} hash_ids, got {len(value)}")
    return ids


def _text(value: Any, field: str) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{field} must be a nonempty string")
    return value


def _count(value: Any, field: str, *, signed: bool = False) -> int:
    if type(value) is not int or (value < 0 and not signed):
        raise ValueError(f"{field} must be a {'' if signed else 'non-negative '}integer (got {value!r})")
    return value


def _time(value: Any, field: str) -> float:
    number = finite_float(value)
    if number is None or number < 0:
        raise ValueError(f"has invalid {field} {value!r} (must be a finite number >= 0)")
    return number
