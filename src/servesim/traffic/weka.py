"""`weka` traces (SemiAnalysis / AgentX agentic traces, AISimulate 0.13's `weka` format) lowered
to an `AgenticGraph` (docs/traffic.md, `weka`).

A source is a `.json` file (one trace object), a `.jsonl` file (one trace object per line) or a
directory of such files (recursively, in path order). Each trace object is a play: `id`,
`block_size`, `hash_id_scope: local`, optional `models`, and `requests`, a list of entries typed
`n` / `s` (a model request: `t` seconds, `model`, `in`, `out`, optional `hash_ids`, `api_time`)
or `subagent` (`t`, `agent_id`, `subagent_type`, `status` `completed` (blocking) or
`async_launched` (background), optional `duration_ms`, and nested `requests`). How nested
timestamps read is `nested_timestamp_basis`: `absolute` (on the play's clock), `relative`
(seconds after the marker) or `auto` (relative if any nested request starts before its marker).
Dependencies are inferred by `weka_lower`.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from servesim.errors import TraceError
from servesim.traffic.agentic import AgenticGraph, AgenticNode, build_graph
from servesim.traffic.jsonl import read_jsonl
from servesim.traffic.weka_lower import EPS_S, Req, Subagent, WekaLoweringError, lower_play

MAX_TOKENS = 10_000_000
"""Largest declared `in` / `out` of a request."""
BASES = ("auto", "absolute", "relative")
_CORPUS_DOMAIN = b"aisimulate-weka-corpus-v1\0"
_SEMANTIC_DOMAIN = b"aisimulate-weka-corpus-semantics-v2\0"


@dataclass(slots=True)
class _Obj:
    """One trace object: where it is (file, line, source name) and its decoded JSON."""

    path: str
    line: int | None
    source_name: str
    data: Any
    entry_lines: list[int | None]
    inner_lines: dict[int, list[int | None]]


def read_weka(path: str, basis: str = "auto", block_size: int | None = None, *,
              speedup: float = 1.0) -> tuple[AgenticGraph, str]:
    """The graph of a Weka source and the nested timestamp basis it was read with (`absolute`,
    `relative`, or `not_applicable` when no subagent has nested requests). `block_size`, when
    given, must equal the traces' own."""
    files = _source_files(path)
    objects = [obj for file_path, rel in files for obj in _objects(file_path, rel)]
    trace_block = None
    replayable, witness = 0, False
    for obj in objects:
        size = _check_object(obj)
        if trace_block is not None and size != trace_block:
            raise TraceError(obj.path, obj.line, f"Weka corpus mixes block sizes: {obj.source_name} has {size}, "
                             f"expected {trace_block}")
        trace_block = size
        for entry in obj.data["requests"]:
            if entry["type"] == "subagent" and entry["requests"]:
                replayable += 1
                witness = witness or any(r["t"] < entry["t"] - EPS_S for r in entry["requests"])
    assert trace_block is not None
    resolved = (basis if basis != "auto" else "not_applicable" if replayable == 0
                else "relative" if witness else "absolute")
    if block_size is not None and block_size != trace_block:
        raise TraceError(path, None, f"Weka source block size {trace_block} does not match configured block size "
                         f"{block_size}")
    nodes: list[AgenticNode] = []
    for ordinal, obj in enumerate(objects):
        nodes.extend(_lower(obj, ordinal, trace_block, resolved == "relative"))
    seen: set[str] = set()
    for node in nodes:
        if node.request_id in seen:
            raise TraceError(node.path, node.line or None, f"duplicate request_id {node.request_id}")
        seen.add(node.request_id)
    digest = _semantic_digest(_corpus_digest(files), resolved)
    return build_graph(nodes, trace_block, "weka", digest, path, speedup=speedup), resolved


# -- files and objects --------------------------------------------------------------------------

def _source_files(path: str) -> list[tuple[str, str]]:
    """(file, path relative to the source root) of every trace file, in relative-path order."""
    if os.path.islink(path):
        raise TraceError(path, None, "Weka source may not be a symlink")
    if os.path.isfile(path):
        if not _weka_name(path):
            raise TraceError(path, None, "Weka source file must use a .json or .jsonl extension")
        return [(path, os.path.basename(path))]
    if not os.path.isdir(path):
        raise TraceError(path, None, "Weka source is neither a file nor a directory")
    files = []
    for folder, dirs, names in os.walk(path):
        for name in dirs + names:
            if os.path.islink(os.path.join(folder, name)):
                raise TraceError(os.path.join(folder, name), None, "Weka corpus may not contain symlinks")
        files += [(os.path.join(folder, n), os.path.relpath(os.path.join(folder, n), path).replace(os.sep, "/"))
                  for n in names if _weka_name(n)]
    if not files:
        raise TraceError(path, None, "Weka source contains no JSON or JSONL files")
    return sorted(files, key=lambda f: f[1])


def _weka_name(name: str) -> bool:
    return name.lower().endswith((".json", ".jsonl"))


def _objects(path: str, rel: str) -> Iterator[_Obj]:
    """The trace objects of one file: a `.json` file holds exactly one, a `.jsonl` one per line."""
    if path.lower().endswith(".jsonl"):
        count = 0
        for line, data in read_jsonl(path):
            yield _Obj(path, line, f"{rel}#{count:06d}", data, *_uniform_lines(data, line))
            count += 1
        if not count:
            raise TraceError(path, None, "Weka source contains no trace objects")
        return
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise TraceError(path, None, f"cannot read trace: {exc}") from None
    decoder = json.JSONDecoder()
    start = _skip(text, 0)
    if start == len(text):
        raise TraceError(path, None, "Weka source contains no trace objects")
    try:
        data, end = decoder.raw_decode(text, start)
    except json.JSONDecodeError as exc:
        raise TraceError(path, exc.lineno, f"invalid JSON: {exc.msg}") from None
    if _skip(text, end) != len(text):
        raise TraceError(path, _line_of(text, _skip(text, end)),
                         "Weka JSON source contains more than one object; use a .jsonl extension")
    yield _Obj(path, _line_of(text, start), rel, data, *_located_lines(text, start))


def _skip(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in " \t\r\n":
        pos += 1
    return pos


def _line_of(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def _uniform_lines(data: Any, line: int) -> tuple[list[int | None], dict[int, list[int | None]]]:
    """Every entry of a JSONL object is on the object's line."""
    entries = data.get("requests") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        return [], {}
    one: list[int | None] = [line]
    inner = {i: one * len(e["requests"]) for i, e in enumerate(entries)
             if isinstance(e, dict) and isinstance(e.get("requests"), list)}
    return one * len(entries), inner


def _members(text: str, pos: int) -> dict[str, int]:
    """Where each member value of the JSON object starting at `pos` starts."""
    decoder = json.JSONDecoder()
    out: dict[str, int] = {}
    pos = _skip(text, pos + 1)
    while pos < len(text) and text[pos] != "}":
        key, pos = decoder.raw_decode(text, pos)
        pos = _skip(text, _skip(text, pos) + 1)  # past ':'
        out[key] = pos
        _, pos = decoder.raw_decode(text, pos)
        pos = _skip(text, pos)
        if pos < len(text) and text[pos] == ",":
            pos = _skip(text, pos + 1)
    return out


def _items(text: str, pos: int) -> list[int]:
    """Where each element of the JSON array starting at `pos` starts."""
    decoder = json.JSONDecoder()
    out = []
    pos = _skip(text, pos + 1)
    while pos < len(text) and text[pos] != "]":
        out.append(pos)
        _, pos = decoder.raw_decode(text, pos)
        pos = _skip(text, pos)
        if pos < len(text) and text[pos] == ",":
            pos = _skip(text, pos + 1)
    return out


def _located_lines(text: str, start: int) -> tuple[list[int | None], dict[int, list[int | None]]]:
    """Line of every entry (and nested entry) of a `.json` trace object's `requests`."""
    if text[start] != "{":
        return [], {}
    at = _members(text, start).get("requests")
    if at is None or text[at] != "[":
        return [], {}
    entries: list[int | None] = []
    inner: dict[int, list[int | None]] = {}
    for i, pos in enumerate(_items(text, at)):
        entries.append(_line_of(text, pos))
        if text[pos] == "{":
            nested = _members(text, pos).get("requests")
            if nested is not None and text[nested] == "[":
                inner[i] = [_line_of(text, p) for p in _items(text, nested)]
    return entries, inner


# -- validation ---------------------------------------------------------------------------------

def _check_object(obj: _Obj) -> int:
    """Check a trace object's shape and values; its block size."""
    data = obj.data
    if not isinstance(data, dict):
        raise TraceError(obj.path, obj.line, "each Weka trace must be a JSON object")
    for key in ("id", "block_size", "hash_id_scope", "requests"):
        if key not in data:
            raise TraceError(obj.path, obj.line, f"Weka trace is missing field {key!r}")
    tid, size, scope = data["id"], data["block_size"], data["hash_id_scope"]
    if not isinstance(tid, str) or not tid.strip():
        raise TraceError(obj.path, obj.line, "Weka trace has an empty id")
    if not _uint(size) or size == 0:
        raise TraceError(obj.path, obj.line, f"Weka trace {tid} needs a positive integer block_size (got {size!r})")
    if scope != "local":
        raise TraceError(obj.path, obj.line, f"Weka trace {tid} has unsupported hash_id_scope {scope!r}; expected local")
    models = data.get("models", [])
    if not isinstance(models, list) or not all(isinstance(m, str) for m in models):
        raise TraceError(obj.path, obj.line, f"Weka trace {tid}: models must be a list of strings")
    if any(not m.strip() for m in models):
        raise TraceError(obj.path, obj.line, f"Weka trace {tid} declares an empty model")
    if not isinstance(data["requests"], list):
        raise TraceError(obj.path, obj.line, f"Weka trace {tid}: requests must be a list")
    found: set[str] = set()
    for i, entry in enumerate(data["requests"]):
        line = obj.entry_lines[i] if i < len(obj.entry_lines) else obj.line
        where = f"Weka trace {tid} entry {i}"
        kind = entry.get("type") if isinstance(entry, dict) else None
        if kind in ("n", "s"):
            found.add(_check_request(obj.path, line, where, entry))
        elif kind == "subagent":
            _check_subagent(obj.path, line, where, entry)
            lines = obj.inner_lines.get(i, [])
            for j, inner in enumerate(entry["requests"]):
                inner_where = f"{where} (subagent {entry['agent_id']}) nested request {j}"
                if not isinstance(inner, dict) or inner.get("type") not in ("n", "s"):
                    raise TraceError(obj.path, lines[j] if j < len(lines) else line,
                                     f"{inner_where}: type must be 'n' or 's'")
                found.add(_check_request(obj.path, lines[j] if j < len(lines) else line, inner_where, inner))
        else:
            raise TraceError(obj.path, line, f"{where}: type must be 'n', 's' or 'subagent' (got {kind!r})")
    if not found:
        raise TraceError(obj.path, obj.line, f"Weka trace {tid} has no model requests")
    if models and not found <= set(models):
        raise TraceError(obj.path, obj.line, f"Weka trace {tid} contains request models absent from its declaration: "
                         f"declared {sorted(set(models))}, found {sorted(found)}")
    return size


def _uint(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _check_head(path: str, line: int | None, where: str, item: dict[str, Any], keys: tuple[str, ...],
                kind: str, name: str) -> None:
    """A request's or subagent's required fields, its timestamp `t` and its non-empty `name`."""
    for key in keys:
        if key not in item:
            raise TraceError(path, line, f"{where}: {'' if kind == 'request' else kind + ' is '}missing field {key!r}")
    if not _number(item["t"]) or item["t"] < 0:
        raise TraceError(path, line, f"{where}: invalid {kind} timestamp t={item['t']!r} (finite, >= 0)")
    if not isinstance(item[name], str) or not item[name].strip():
        raise TraceError(path, line, f"{where}: empty {kind} {name}")


def _check_request(path: str, line: int | None, where: str, r: dict[str, Any]) -> str:
    """Check one model request; its model."""
    _check_head(path, line, where, r, ("t", "model", "in", "out"), "request", "model")
    for key in ("in", "out"):
        if not _uint(r[key]):
            raise TraceError(path, line, f"{where}: {key} must be a non-negative integer (got {r[key]!r})")
        if r[key] > MAX_TOKENS:
            raise TraceError(path, line, f"{where}: {key} {r[key]} is above the {MAX_TOKENS} token ceiling")
    if r["in"] == 0:
        raise TraceError(path, line, f"{where}: zero-length request (in=0)")
    hashes = r.get("hash_ids", [])
    if not isinstance(hashes, list) or not all(_uint(h) and h < 1 << 64 for h in hashes):
        raise TraceError(path, line, f"{where}: hash_ids must be a list of unsigned 64-bit integers")
    api = r.get("api_time")
    if api is not None and (not _number(api) or api < 0):
        raise TraceError(path, line, f"{where}: invalid api_time {api!r}; expected a finite non-negative value")
    return str(r["model"])


def _check_subagent(path: str, line: int | None, where: str, s: dict[str, Any]) -> None:
    _check_head(path, line, where, s, ("t", "agent_id", "status", "requests", "subagent_type"), "subagent", "agent_id")
    duration = s.get("duration_ms")
    if duration is not None and (not isinstance(duration, int) or isinstance(duration, bool) or duration < 0):
        raise TraceError(path, line, f"{where}: duration_ms of subagent {s['agent_id']} must be a non-negative "
                         f"integer (got {duration!r})")
    if s["status"] not in ("completed", "async_launched"):
        raise TraceError(path, line, f"{where}: unsupported non-success subagent status {s['status']!r} for "
                         f"{s['agent_id']} (completed or async_launched)")
    if not isinstance(s["requests"], list):
        raise TraceError(path, line, f"{where}: subagent requests must be a list")
    if s["status"] == "completed" and not s["requests"]:
        raise TraceError(path, line, f"{where}: blocking subagent {s['agent_id']} has no replayable requests; "
                         "external waits are not modeled")


# -- lowering -----------------------------------------------------------------------------------

def _lower(obj: _Obj, ordinal: int, block_size: int, relative: bool) -> list[AgenticNode]:
    from blake3 import blake3

    data = obj.data
    namespace = "weka:" + blake3(obj.source_name.encode()).hexdigest()[:16]
    play_id = f"{namespace}:play:{data['id']}"
    top: list[Req] = []
    subagents: list[Subagent] = []
    for i, entry in enumerate(data["requests"]):
        line = obj.entry_lines[i] if i < len(obj.entry_lines) else obj.line
        if entry["type"] != "subagent":
            top.append(_req(f"outer:{i}", i, entry, line))
            continue
        lines = obj.inner_lines.get(i, [])
        inner = []
        for j, r in enumerate(entry["requests"]):
            inner_line = lines[j] if j < len(lines) else line
            t = entry["t"] + r["t"] if relative else _absolute(obj, line if inner_line is None else inner_line,
                                                               entry, j, r["t"])
            inner.append(_req(f"outer:{i}:inner:{j}", j, {**r, "t": t}, inner_line))
        end = (entry["t"] + entry["duration_ms"] / 1000.0 if entry.get("duration_ms") is not None
               else max([entry["t"], *(r.end for r in inner)]))
        subagents.append(Subagent(i, entry["agent_id"], entry["status"] == "completed", end, inner, line))
    used: dict[int, str] = {}

    def hash_identity(domain: str, identity: str) -> int:
        nonce = 0
        while True:
            value = int.from_bytes(blake3(f"{domain}\0{identity}\0{nonce}".encode()).digest()[:8], "little")
            owner = used.setdefault(value, identity)
            if owner == identity:
                return value
            nonce += 1

    try:
        nodes = lower_play(namespace, play_id, top, subagents, block_size, obj.source_name, hash_identity, obj.line)
    except WekaLoweringError as exc:
        raise TraceError(obj.path, exc.line or obj.line, f"Weka trace {data['id']} {exc}") from None
    for node in nodes:
        node.path, node.source_play_ordinal = obj.path, ordinal
    return nodes


def _absolute(obj: _Obj, line: int | None, entry: dict[str, Any], j: int, t: float) -> float:
    """A nested timestamp on the play's clock: it may not precede its marker (beyond rounding)."""
    if t < entry["t"] - EPS_S:
        raise TraceError(obj.path, line, f"Weka trace {obj.data['id']}, subagent {entry['agent_id']} nested request "
                         f"{j} at {t} precedes its marker at {entry['t']} under absolute nested_timestamp_basis")
    return max(float(t), float(entry["t"]))


def _req(source_id: str, order: int, r: dict[str, Any], line: int | None) -> Req:
    return Req(source_id, order, float(r["t"]), r["model"], r["in"], r["out"], list(r.get("hash_ids", [])),
               None if r.get("api_time") is None else float(r["api_time"]), line)


# -- provenance ---------------------------------------------------------------------------------

def _corpus_digest(files: list[tuple[str, str]]) -> str:
    """BLAKE3 over every file's relative path, size and bytes (the raw corpus identity)."""
    from blake3 import blake3

    hasher = blake3(_CORPUS_DOMAIN)
    for file_path, rel in files:
        name = rel.encode()
        with open(file_path, "rb") as handle:
            body = handle.read()
        hasher.update(len(name).to_bytes(8, "little") + name + len(body).to_bytes(8, "little"))
        hasher.update(body)
    return hasher.hexdigest()


def _semantic_digest(raw: str, basis: str) -> str:
    """The source digest reported: the raw corpus digest bound to the resolved basis."""
    from blake3 import blake3

    hasher = blake3(_SEMANTIC_DOMAIN)
    for part in (raw.encode(), basis.encode()):
        hasher.update(len(part).to_bytes(8, "little") + part)
    return hasher.hexdigest()
