"""Agentic workloads: requests that wait on each other, grouped into plays (trajectories).

Both `agentic_mooncake` forms and agent-aware `dynamo` traces are lowered to an `AgenticGraph`:
one node per request, each with a not-before time and dependencies on other requests. A
dependency fires when its parent is dispatched (``trigger: dispatch``) or completes
(``trigger: completion``); a node is released at the latest of its not-before time and, over its
dependencies, the firing time plus the dependency's delay. Nodes are kept sorted by request id;
that order is also the order ready nodes are released in at one instant and the deterministic
request UUIDs.

The graph is validated (unknown parents, self-dependencies, cycles), normalised (the smallest
not-before time becomes 0), sped up (every time divided by the speedup), and described by the
reference's `agentic_graph` report block, whose `graph_digest` is the BLAKE3 hash of the
canonical JSON of the final graph.
"""

from __future__ import annotations

import json
import math
from array import array
from collections import deque
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from servesim.errors import TraceError


class Dependency(NamedTuple):
    """An edge from a parent request: when it fires and how long after."""

    parent: str
    trigger: str
    """"completion" or "dispatch"."""
    delay_ms: float
    relation: str
    """"sequence", "spawn", "join" or "replay_barrier" (descriptive only)."""


@dataclass(slots=True)
class AgenticNode:
    """One request of an agentic graph."""

    request_id: str
    play_id: str
    session_id: str
    model: str
    input_length: int
    output_length: int
    hash_ids: array
    not_before_ms: float
    dependencies: list[Dependency]
    priority: int = 0
    strict_priority: int = 0
    policy_class: str | None = None
    line: int = 0
    """Where the node was read (for error messages); 0 when it has no single line."""
    path: str = ""
    """The file it was read from, when the graph has several (else the graph's file)."""
    source_play_ordinal: int | None = None
    """The play's position in its source corpus (`weka` traces; None elsewhere)."""
    recorded_api_time_ms: float | None = None
    """The service time the source recorded (`weka` traces; provenance, not used for timing)."""


@dataclass(slots=True)
class AgenticGraph:
    """A validated agentic workload: nodes sorted by request id and their resolved edges."""

    nodes: list[AgenticNode]
    block_size: int
    source_format: str
    source_digest: str
    play_ids: list[str] = field(default_factory=list)
    """Distinct play ids in order of first appearance among the sorted nodes."""
    parents: list[list[tuple[int, Dependency]]] = field(default_factory=list)
    """Per node: (parent index, dependency), in the node's dependency order."""
    children: list[list[tuple[int, Dependency]]] = field(default_factory=list)
    """Per node: (child index, dependency) for every edge leaving it."""
    digest: str = ""
    summary_fields: dict[str, object] = field(default_factory=dict)
    """Summary fields of the source format (`weka`: the nested timestamp basis, as AISimulate
    0.13 reports it); also marks the graph as read from a 0.13-only format, whose
    `agentic_graph` block lists `source_models`."""
    block: dict[str, object] | None = None
    """The `agentic_graph` block when it describes another graph than this one (a snapshot
    replays part of the trace but reports the whole trace's block)."""
    play_starts: dict[str, float] | None = None
    """Plays whose trajectory starts before their first dispatch, and when (snapshot plays: at
    the cut, time 0)."""
    uuid_numbers: list[int] | None = None
    """Per node, the number of its per-request UUID when it is not the node number + 1 (snapshot
    plays: numbered by lane and source index, as in 0.13)."""
    snapshot_lanes: list[Any] | None = None
    """Snapshot replays: per lane, what a warm-up prepares from (`servesim.traffic.warmup.LaneSources`)."""
    measured_sizes: dict[str, int] | None = None
    """When the report covers part of the requests (a live warm-up's plays): the measured
    requests of each play it reports, plays in order (`play_sizes` then gives these)."""

    @property
    def num_requests(self) -> int:
        return len(self.nodes)

    def play_sizes(self) -> dict[str, int]:
        """Requests per play, plays in order of first appearance."""
        if self.measured_sizes is not None:
            return dict(self.measured_sizes)
        sizes: dict[str, int] = {}
        for node in self.nodes:
            sizes[node.play_id] = sizes.get(node.play_id, 0) + 1
        return sizes

    def report_block(self) -> dict[str, object]:
        """The reference's `agentic_graph` summary block."""
        if self.block is not None:
            return self.block
        return {
            "block_size": self.block_size,
            "graph_digest": self.digest,
            "node_count": len(self.nodes),
            "play_count": len(self.play_ids),
            "source": {"digest": self.source_digest, "format": self.source_format},
        } | ({"source_models": sorted({n.model for n in self.nodes})} if self.summary_fields else {})


def build_graph(nodes: list[AgenticNode], block_size: int, source_format: str, source_digest: str,
                path: str, *, speedup: float = 1.0) -> AgenticGraph:
    """Validate, normalise and speed up a list of nodes (request ids already unique)."""
    nodes.sort(key=lambda n: n.request_id)
    _normalise(nodes, speedup)
    parents, children = _edges(nodes, path)
    _check_acyclic(nodes, parents, children, path)
    graph = AgenticGraph(nodes, block_size, source_format, source_digest, parents=parents, children=children)
    graph.play_ids = list(dict.fromkeys(n.play_id for n in nodes))
    graph.digest = graph_digest(graph)
    return graph


Edges = list[list[tuple[int, Dependency]]]


def _edges(nodes: list[AgenticNode], path: str) -> tuple[Edges, Edges]:
    """Per node, its (parent, dependency) and (child, dependency) pairs; every parent must exist,
    be another node of the same play, and be waited for a non-negative delay."""
    index = {n.request_id: i for i, n in enumerate(nodes)}
    parents: Edges = []
    children: Edges = [[] for _ in nodes]
    for i, node in enumerate(nodes):
        edges = []
        for dep in node.dependencies:
            j = index.get(dep.parent)
            problem = (f"references unknown request_id {dep.parent}" if j is None
                       else "cannot depend on itself" if j == i
                       else f"has invalid dependency delay {dep.delay_ms:g} ms on {dep.parent}"
                       if not dep.delay_ms >= 0
                       else f"in play {node.play_id} depends on request {dep.parent} in play {nodes[j].play_id}"
                       if nodes[j].play_id != node.play_id else None)
            if problem is not None:
                raise TraceError(node.path or path, node.line or None, f"request {node.request_id} {problem}")
            assert j is not None
            edges.append((j, dep))
            children[j].append((i, dep))
        parents.append(edges)
    return parents, children


def _check_acyclic(nodes: list[AgenticNode], parents: Edges, children: Edges, path: str) -> None:
    """Kahn's algorithm: every node must be reachable from the roots."""
    waiting = [len(p) for p in parents]
    queue = deque(i for i, w in enumerate(waiting) if w == 0)
    seen = 0
    while queue:
        i = queue.popleft()
        seen += 1
        for child, _ in children[i]:
            waiting[child] -= 1
            if waiting[child] == 0:
                queue.append(child)
    if seen < len(nodes):
        blocked = [nodes[i] for i, w in enumerate(waiting) if w > 0]
        first = min(blocked, key=lambda n: n.line)
        raise TraceError(first.path or path, first.line or None, f"cycle detected among {len(blocked)} agentic requests; "
                         f"blocked request IDs: {', '.join(n.request_id for n in blocked)}")


def _normalise(nodes: list[AgenticNode], speedup: float) -> None:
    """Shift not-before times so the smallest is 0, then divide every time by the speedup."""
    origin = min((n.not_before_ms for n in nodes), default=0.0)
    for node in nodes:
        node.not_before_ms = (node.not_before_ms - origin) / speedup
        if len(node.dependencies) > 1:
            node.dependencies.sort(key=lambda d: d.parent)
        if speedup != 1.0:
            node.dependencies = [d._replace(delay_ms=d.delay_ms / speedup) for d in node.dependencies]


def legacy_play_ids(nodes: list[AgenticNode], prefix: str) -> None:
    """Name each connected component of the dependency graph after its first root.

    The first root is the one with the smallest (not-before time, request id); every node of
    the component gets play id ``prefix + root id``. Unknown parents are ignored here (they are
    reported by `build_graph`).
    """
    index = {n.request_id: i for i, n in enumerate(nodes)}
    parent = list(range(len(nodes)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i, node in enumerate(nodes):
        for dep in node.dependencies:
            j = index.get(dep.parent)
            if j is not None:
                parent[find(i)] = find(j)
    first_root: dict[int, tuple[bool, float, str]] = {}
    for i, node in enumerate(nodes):
        # (has dependencies, not-before, id): a component without roots (a cycle, reported
        # later) is still named consistently.
        rank = (bool(node.dependencies), node.not_before_ms, node.request_id)
        component = find(i)
        best = first_root.get(component)
        if best is None or rank < best:
            first_root[component] = rank
    for i, node in enumerate(nodes):
        node.play_id = prefix + first_root[find(i)][2]


# -- the canonical digest ----------------------------------------------------------------------

def graph_digest(graph: AgenticGraph) -> str:
    """BLAKE3 of the canonical JSON of the graph (what the reference reports as graph_digest)."""
    from blake3 import blake3

    hasher = blake3()
    hasher.update(b'{"block_size":%d,"nodes":[' % graph.block_size)
    for i, node in enumerate(graph.nodes):
        if i:
            hasher.update(b",")
        hasher.update(_node_json(node).encode())
    hasher.update(b"]}")
    return hasher.hexdigest()


def _node_json(node: AgenticNode) -> str:
    deps = ",".join(
        f'{{"request_id":{_str(d.parent)},"trigger":"{d.trigger}","delay_ms":{_float(d.delay_ms)},'
        f'"relation":"{d.relation}"}}' for d in node.dependencies)
    return (
        f'{{"request_id":{_str(node.request_id)},"play_id":{_str(node.play_id)},'
        f'{_ordinal(node.source_play_ordinal)}'
        f'"session_id":{_str(node.session_id)},"model":{_str(node.model)},'
        f'"input_length":{node.input_length},"max_output_tokens":{node.output_length},'
        f'"output_token_ids":null,"replay_key":null,"hash_ids":[{",".join(map(str, node.hash_ids))}],'
        f'"not_before_ms":{_float(node.not_before_ms)},{_api_time(node.recorded_api_time_ms)}'
        f'"priority":{node.priority},'
        f'"strict_priority":{node.strict_priority},"policy_class":{_str_or_null(node.policy_class)},'
        f'"dependencies":[{deps}]}}'
    )


def _ordinal(value: int | None) -> str:
    """The optional `source_play_ordinal` member (absent when None)."""
    return "" if value is None else f'"source_play_ordinal":{value},'


def _api_time(value: float | None) -> str:
    """The optional `recorded_api_time_ms` member (absent when None)."""
    return "" if value is None else f'"recorded_api_time_ms":{_float(value)},'


def _str(value: str) -> str:
    """A JSON string as serde_json writes it (non-ASCII kept, `"` `\\` and control characters
    escaped — which is also what `json.dumps` does without `ensure_ascii`)."""
    return json.dumps(value, ensure_ascii=False)


def _str_or_null(value: str | None) -> str:
    return "null" if value is None else _str(value)


def _float(value: float) -> str:
    """A finite f64 as serde_json writes it: shortest round-trip digits, `.0` on integers,
    exponent without a plus sign or leading zeros."""
    if not math.isfinite(value):
        return "null"
    text = repr(float(value))
    if "e" not in text:
        return text
    mantissa, exponent = text.split("e")
    return f"{mantissa}e{int(exponent)}"
