"""Agent-aware `dynamo` traces lowered to an `AgenticGraph` (docs/traffic.md).

Every request carries ``agent_context{session_id, parent_session_id?}``. Within a session,
requests (in start order) form a chain: each one waits for the previous one's completion plus
the recorded gap between them (its start minus the previous end event's time). A child session (one with a `parent_session_id`) is spawned by a
request of its parent session: its first request waits for that request's *dispatch* plus the
recorded gap between their starts. The parent session's next request after the child's last
one ends joins it: it also waits for that last request's completion plus the recorded gap.
A `tool_end` / `tool_error` event whose `claude` block names the child session pins the
spawning (`source_request_id`) and joining (`consumer_request_id`) requests; otherwise the
spawner is the parent's latest request started by the child's first start and the joiner the
parent's first request started after the child's last end. Roots start at their recorded
start times (relative to the earliest start); plays are the connected components, named ``dynamo-play:<first root>``.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping
from typing import Any

from servesim.errors import TraceError
from servesim.traffic.agentic import AgenticGraph, AgenticNode, Dependency, build_graph, legacy_play_ids
from servesim.traffic.dynamo import SCHEMA, DynamoRequest, DynamoTool

PLAY_PREFIX = "dynamo-play:"


def agentic_graph(requests: list[DynamoRequest], tools: list[DynamoTool], block_size: int,
                  speedup: float) -> AgenticGraph:
    """The dependency graph of an agent-aware Dynamo trace."""
    sessions = _sessions(requests)
    links = _tool_links(tools)
    origin = min(r.start_ms for r in requests)
    nodes: dict[str, AgenticNode] = {}
    for chain in sessions.values():
        for k, r in enumerate(chain):
            deps = [Dependency(chain[k - 1].request_id, "completion", r.start_ms - chain[k - 1].event_ms,
                               "sequence")] if k else []
            nodes[r.request_id] = AgenticNode(r.request_id, "", _session(r), "unknown", r.input_length,
                                              r.output_length, r.hash_ids, r.start_ms - origin,
                                              deps, line=r.line, path=r.path)
    for session_id, chain in sessions.items():
        parent_id = chain[0].agent_context.get("parent_session_id")  # type: ignore[union-attr]
        parent = sessions.get(parent_id) if isinstance(parent_id, str) and parent_id else None
        if parent is None and isinstance(parent_id, str) and parent_id:
            first = chain[0]
            raise TraceError(first.path, first.line, f"session {session_id} names parent_session_id {parent_id}, "
                             "a session no request of the trace belongs to")
        if parent is not None:
            _link_child(chain, parent, links.get(session_id, {}), nodes)
    ordered = list(nodes.values())
    for node in ordered:
        if node.dependencies:
            node.not_before_ms = 0.0
    legacy_play_ids(ordered, PLAY_PREFIX)
    digest = f"requests:{len(requests)};tools:{len(tools)}"
    path = requests[0].path
    return build_graph(ordered, block_size, SCHEMA, digest, path, speedup=speedup)


def _session(request: DynamoRequest) -> str:
    context = request.agent_context
    assert context is not None
    session = context.get("session_id")
    if not isinstance(session, str) or not session:
        raise TraceError(request.path, request.line, "agent_context.session_id must be a nonempty string")
    return session


def _sessions(requests: list[DynamoRequest]) -> dict[str, list[DynamoRequest]]:
    """Requests of every session in (start, end, request id) order."""
    sessions: dict[str, list[DynamoRequest]] = {}
    for r in sorted(requests, key=lambda r: (r.start_ms, r.end_ms, r.request_id)):
        sessions.setdefault(_session(r), []).append(r)
    return sessions


def _tool_links(tools: list[DynamoTool]) -> dict[str, dict[str, str]]:
    """Per child session: the source and consumer request ids its tool call names."""
    links: dict[str, dict[str, str]] = {}
    for tool in tools:
        try:
            claude = _check_tool(tool.event)
        except ValueError as exc:
            raise TraceError(tool.path, tool.line, str(exc)) from None
        child = claude.get("child_session_id") if claude else None
        if claude is not None and isinstance(child, str) and child:
            link = links.setdefault(child, {})
            for key in ("source_request_id", "consumer_request_id"):
                if isinstance(claude.get(key), str) and claude[key]:
                    link[key] = claude[key]
    return links


def _check_tool(event: Mapping[str, Any]) -> Mapping[str, Any] | None:
    tool = event.get("tool")
    if not isinstance(tool, Mapping):
        raise ValueError(f"{event.get('event_type')} needs a tool object")
    for key in ("tool_call_id", "tool_class"):
        if not isinstance(tool.get(key), str) or not tool[key]:
            raise ValueError(f"{key} must be nonempty")
    start, end = tool.get("started_at_unix_ms"), tool.get("ended_at_unix_ms")
    for value in (start, end):
        if value is not None and (type(value) is not int or value < 0):
            raise ValueError(f"tool times must be unsigned integer milliseconds (got {value!r})")
    if start is not None and end is not None and end < start:
        raise ValueError("tool end time precedes start time")
    claude = tool.get("claude")
    return claude if isinstance(claude, Mapping) else None


def _link_child(chain: list[DynamoRequest], parent: list[DynamoRequest], link: Mapping[str, str],
                nodes: dict[str, AgenticNode]) -> None:
    """Add the spawn edge into a child session and the join edge out of it."""
    first, last = chain[0], chain[-1]
    starts = [r.start_ms for r in parent]
    by_id = {r.request_id: r for r in parent}
    source = by_id.get(link.get("source_request_id", ""))
    if source is None:
        k = bisect.bisect_right(starts, first.start_ms)
        source = parent[k - 1] if k else None
    if source is not None:
        nodes[first.request_id].dependencies.append(
            Dependency(source.request_id, "dispatch", first.start_ms - source.start_ms, "spawn"))
    consumer = by_id.get(link.get("consumer_request_id", ""))
    if consumer is None:
        k = bisect.bisect_left(starts, last.event_ms)
        consumer = parent[k] if k < len(parent) else None
    if consumer is not None:
        nodes[consumer.request_id].dependencies.append(
            Dependency(last.request_id, "completion", consumer.start_ms - last.event_ms, "join"))
