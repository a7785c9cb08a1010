"""AgentX request-boundary snapshots of an agentic graph (AISimulate 0.13's `agentic_snapshot`).

Lane k starts inside the play `selections[k]` names, cut at `t_star_ms` of that play's recorded
time (0 = its first request's start): the requests that started before the cut are history and
are not sent (none may wait on a replayed request: 0.13 stops such a run); every other request is
replayed: it is released after its replayed parents as the trace recorded, and not before
`(recorded start - t_star_ms) / speedup` after the run starts (its dependencies on history are
dropped) — except in a continuous profile, where a request whose parents are all replayed waits on
them only, whatever its recorded start (both as 0.13). Each lane runs its snapshot play only. With
more lanes than plays, lane k replays the (k mod plays)-th play; a play replayed again runs in its
lane's own KV-cache scope (no prompt block shared with its other replays), under the same request
ids in another play id, as in 0.13.

The replayed plays are renamed `agentic-v1:<graph digest>:<seed>:<lane>:<ordinal>` and their
sessions `<play>:conversation:<source session>`; request ids stay the source ones. The graph keeps
the digest of the whole trace read at speedup 1, and every lane is described by an
`agentic_snapshots` entry (schema `aisimulate.agentic.snapshot.v1`): every request of the source
play with its recorded start and end, whether it is history, what replayed parents it waits on and
its remaining delay, and one primer per conversation that goes on after the cut (its last request
of history).
"""

from __future__ import annotations

import json
import struct
from array import array
from dataclasses import replace
from typing import Any

import numpy as np
from blake3 import blake3

from servesim.errors import RunError
from servesim.traffic.agentic import AgenticGraph, AgenticNode, Edges, _check_acyclic, _edges
from servesim.traffic.warmup import LaneSources

SCHEMA = "aisimulate.agentic.snapshot.v1"


def draw_selections(graph: AgenticGraph, lanes: int, seed: int) -> list[tuple[str, float]]:
    """0.13's seeded initial draw (`agentic_snapshot.seed` without `initial_selections`): lane k
    starts in the k-th play of the corpus (mod the play count) and cuts it at a fraction `u` of its
    recorded span, `u = 1/4 + (x >> 11) * 2^-54` with `x` the first 8 bytes (little-endian) of the
    BLAKE3 hash of the compact JSON `[SCHEMA, seed, graph digest, source play, lane, 0]`."""
    plays = corpus_plays(graph)  # more lanes than plays: a play runs on several lanes, as in 0.13
    starts: dict[str, list[float]] = {}
    for node in graph.nodes:
        starts.setdefault(node.play_id, []).append(node.not_before_ms)
    out = []
    for lane in range(lanes):
        play = plays[lane % len(plays)]
        origin = min(starts[play])
        last = max(starts[play]) - origin
        out.append((play, last * _cut_fraction(seed, graph.digest, play, lane, 0)))
    return out


def corpus_plays(graph: AgenticGraph) -> list[str]:
    """The graph's play ids in corpus order (`source_play_ordinal`, else order of first appearance)."""
    first: dict[str, AgenticNode] = {}
    for node in graph.nodes:
        first.setdefault(node.play_id, node)
    plays = list(first)
    ordinals = [first[p].source_play_ordinal for p in plays]
    if all(o is not None for o in ordinals):
        plays.sort(key=lambda p: first[p].source_play_ordinal or 0)
    return plays


def _cut_fraction(seed: int, digest: str, play: str, lane: int, ordinal: int) -> float:
    """The fraction in [1/4, 3/4) of a play's recorded span where a lane's draw cuts it."""
    key = json.dumps([SCHEMA, seed, digest, play, lane, ordinal], separators=(",", ":"), ensure_ascii=False)
    (x,) = struct.unpack("<Q", blake3(key.encode()).digest()[:8])
    return (x >> 11) * 2.0 ** -53 * 0.5 + 0.25


def snapshot_graph(graph: AgenticGraph, selections: list[tuple[str, float]], seed: int, speedup: float,
                   path: str = "", *, profile: bool = False) -> AgenticGraph:
    """The graph of the lanes' snapshot plays (see the module docstring); `graph` is the trace
    read at speedup 1; `profile`: the plays start a continuous profile (requests whose parents
    are all replayed are not held to their recorded start). Unknown plays and cuts outside a
    play's request starts are RunErrors."""
    members: dict[str, list[int]] = {}
    for i, node in enumerate(graph.nodes):
        members.setdefault(node.play_id, []).append(i)
    block = graph.report_block()
    nodes: list[AgenticNode] = []
    entries: list[dict[str, Any]] = []
    lanes: list[LaneSources] = []
    number: dict[tuple[str, str], int] = {}
    """Per replayed request (play, request id), its UUID number as 0.13 gives it: lane·(nodes + 1)
    + source index + 1."""
    taken: set[str] = set()
    for lane, (source_play, t_star) in enumerate(selections):
        if source_play not in members:
            raise RunError(f"unknown snapshot source play {source_play}")
        idx = members[source_play]
        source = graph if source_play not in taken else _scoped_copy(graph, idx, lane)
        taken.add(source_play)
        origin = min(graph.nodes[i].not_before_ms for i in idx)
        start = {graph.nodes[i].request_id: graph.nodes[i].not_before_ms - origin for i in idx}
        last = max(start.values())
        if not 0.0 <= t_star <= last:
            raise RunError(f"snapshot cut must lie within recorded request-start bounds [0, {last:g}] "
                           f"(play {source_play}, t_star_ms {t_star:g})")
        play = f"agentic-v1:{graph.digest}:{seed}:{lane}:0"
        future = {rid for rid, t in start.items() if t >= t_star}
        _check_boundary(graph, idx, future)
        entries.append(_entry(graph, idx, start, future, play, lane, source_play, t_star, seed, block))
        lanes.append(_lane_sources(source, idx, start, future, play, lane, entries[-1]))
        for i in idx:
            node = source.nodes[i]
            if node.request_id not in future:
                continue
            deps = [d._replace(delay_ms=d.delay_ms / speedup) for d in node.dependencies if d.parent in future]
            # in a profile a request whose parents are all replayed waits on them only; any other
            # (or any request outside a profile) is also held to its recorded start
            held = not profile or not deps or len(deps) < len(node.dependencies)
            free = (start[node.request_id] - t_star) / speedup if held else 0.0
            nodes.append(replace(node, play_id=play, session_id=f"{play}:conversation:{node.session_id}",
                                 not_before_ms=free, dependencies=deps, hash_ids=node.hash_ids))
            number[play, node.request_id] = lane * (len(graph.nodes) + 1) + i + 1
    nodes.sort(key=lambda n: n.request_id)  # stable: a request replayed on several lanes, lane after lane
    parents, children = _play_edges(nodes, path)
    _check_acyclic(nodes, parents, children, path)
    out = AgenticGraph(nodes, graph.block_size, graph.source_format, graph.source_digest, parents=parents,
                       children=children, digest=graph.digest)
    out.play_ids = list(dict.fromkeys(n.play_id for n in nodes))
    out.block = block
    out.play_starts = dict.fromkeys(out.play_ids, 0.0)
    out.summary_fields = graph.summary_fields | {"agentic_snapshots": entries}
    out.snapshot_lanes = lanes
    out.uuid_numbers = [number[n.play_id, n.request_id] for n in nodes]
    return out


def _scoped_copy(graph: AgenticGraph, idx: list[int], lane: int) -> AgenticGraph:
    """`graph` with the nodes `idx` (a play replayed again on `lane`) moved to the lane's own
    KV-cache scope: its prompts share no block with the play's other replays (0.13 gives every
    lane's play its own cache)."""
    nodes = list(graph.nodes)
    for i in idx:
        nodes[i] = replace(nodes[i], hash_ids=scoped_hash_ids(nodes[i].hash_ids, lane))
    return replace(graph, nodes=nodes)


def _play_edges(nodes: list[AgenticNode], path: str) -> tuple[Edges, Edges]:
    """`_edges` of a snapshot graph, where a play replayed on several lanes repeats its request
    ids: each lane's requests link within their own play."""
    if len({n.request_id for n in nodes}) == len(nodes):
        return _edges(nodes, path)
    parents: Edges = [[] for _ in nodes]
    children: Edges = [[] for _ in nodes]
    by_play: dict[str, list[int]] = {}
    for i, n in enumerate(nodes):
        by_play.setdefault(n.play_id, []).append(i)
    for members in by_play.values():
        sub_parents, sub_children = _edges([nodes[i] for i in members], path)
        for k, i in enumerate(members):
            parents[i] = [(members[j], d) for j, d in sub_parents[k]]
            children[i] = [(members[j], d) for j, d in sub_children[k]]
    return parents, children


def _lane_sources(graph: AgenticGraph, idx: list[int], start: dict[str, float], future: set[str], play: str,
                  lane: int, entry: dict[str, Any]) -> LaneSources:
    """What a warm-up of this lane prepares from: its primers' sources, its replayed roots."""
    nodes = {graph.nodes[i].request_id: graph.nodes[i] for i in idx}
    primers = [nodes[p["source_request_id"]] for p in entry["primers"]]
    roots = sorted((n for rid, n in nodes.items() if rid in future and not any(d.parent in future for d in n.dependencies)),
                   key=lambda n: (start[n.request_id], n.request_id))
    by_source = {r["source_request_id"]: r["identity"] for r in entry["requests"]}

    def identity(node: AgenticNode) -> dict[str, str]:
        return {k: v for k, v in by_source[node.request_id].items() if k != "request_id"}

    return LaneSources(lane, play, primers, roots, identity)


def _check_boundary(graph: AgenticGraph, idx: list[int], future: set[str]) -> None:
    """A request of history must not wait on a replayed one (0.13 stops such a run)."""
    for i in idx:
        node = graph.nodes[i]
        if node.request_id not in future and any(d.parent in future for d in node.dependencies):
            raise RunError(f"snapshot boundary crosses a historical request's unresolved dependency: {node.request_id}")


def _entry(graph: AgenticGraph, idx: list[int], start: dict[str, float], future: set[str], play: str, lane: int,
           source_play: str, t_star: float, seed: int, block: dict[str, object], ordinal: int = 0) -> dict[str, Any]:
    """The `agentic_snapshots` entry of one lane's play (`ordinal` 0: its snapshot play)."""
    nodes = [graph.nodes[i] for i in idx]
    cache = f"{play}:cache"

    def rid(source: str) -> str:
        return f"{play}:request:{source}"

    def conversation(node: AgenticNode) -> str:
        return f"{play}:conversation:{node.session_id}"

    roots = [n for n in nodes if not n.dependencies]
    root = min(roots or nodes, key=lambda n: (start[n.request_id], n.request_id))
    requests = []
    for n in nodes:
        identity: dict[str, str] = {"cache_id": cache, "conversation_id": conversation(n), "lane_id": f"lane:{lane}",
                                    "play_id": play, "request_id": rid(n.request_id), "root_id": rid(root.request_id)}
        spawn = next((d.parent for d in n.dependencies if d.relation == "spawn"), None)
        if spawn is not None:
            identity["parent_id"] = rid(spawn)
        t = start[n.request_id]
        replayed = n.request_id in future
        requests.append({
            "historical": not replayed,
            "identity": identity,
            "pending_dependencies": [rid(d.parent) for d in n.dependencies if replayed and d.parent in future],
            "recorded_end_ms": None if n.recorded_api_time_ms is None else t + n.recorded_api_time_ms,
            "recorded_start_ms": t,
            "remaining_delay_ms": t - t_star if replayed else 0.0,
            "source_request_id": n.request_id,
        })
    going_on = {n.session_id for n in nodes if n.request_id in future}
    primers: dict[str, AgenticNode] = {}
    for n in sorted((n for n in nodes if n.request_id not in future), key=lambda n: (start[n.request_id], n.request_id)):
        if n.session_id in going_on:
            primers[n.session_id] = n
    return {
        "cache_id": cache,
        "graph": block,
        "lane_id": lane,
        "play_id": play,
        "play_ordinal": ordinal,
        "primers": [{"conversation_id": conversation(n), "input_length": n.input_length,
                     "request_id": rid(n.request_id), "source_request_id": n.request_id}
                    for n in sorted(primers.values(), key=conversation)],
        "recorded_last_start_ms": max(start.values()),
        "recorded_start_ms": 0.0,
        "requests": requests,
        "schema": SCHEMA,
        "seed": seed,
        "source_play_id": source_play,
        "t_star_ms": t_star,
    }


_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_ODD = np.uint64(0xBF58476D1CE4E5B9)


def scoped_hash_ids(ids: array, scope: int) -> array:
    """A play's hash ids moved to their own scope (a bijection of the ids for each scope)."""
    values = np.frombuffer(ids, dtype=np.uint64) if len(ids) else np.zeros(0, dtype=np.uint64)
    with np.errstate(over="ignore"):
        mixed = (values ^ (np.uint64(scope) * _GOLDEN)) * _ODD
    return array("Q", mixed.astype(np.uint64).tobytes())
