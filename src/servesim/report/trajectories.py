"""Trajectory (play) fields of an agentic run's summary.

A play is complete when every one of its requests completed; its end-to-end latency is its last
terminal time minus its first dispatch, or minus its start when the graph gives one (a snapshot
play starts at the cut, the run's start, as in AISimulate 0.13). Statistics are over complete plays, with the exact
percentile rule of every other latency (`servesim.report.stats`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from servesim.collect.collector import RequestRecord, Status
from servesim.report.stats import exact_stats


def trajectory_fields(records: Sequence[RequestRecord], play_sizes: Mapping[str, int],
                      graph_block: Mapping[str, Any], play_starts: Mapping[str, float] | None = None
                      ) -> dict[str, Any]:
    """`{total,completed,incomplete}_trajectories`, the trajectory E2E statistics and the
    `agentic_graph` block; `play_sizes` is the number of requests of every play, `play_starts`
    the start of the plays that do not start at their first dispatch."""
    completed: dict[str, int] = {}
    first: dict[str, float] = {}
    last: dict[str, float] = {}
    for r in records:
        play = r.play_id
        if play is None:
            continue
        if r.status == Status.COMPLETED:
            completed[play] = completed.get(play, 0) + 1
        first[play] = min(first.get(play, r.arrival_ms), r.arrival_ms)
        if r.terminal_ms is not None:
            last[play] = max(last.get(play, r.terminal_ms), r.terminal_ms)
    done = [play for play, size in play_sizes.items() if completed.get(play, 0) == size]
    if play_starts:
        first.update({p: t for p, t in play_starts.items() if p in first})
    out: dict[str, Any] = {
        "total_trajectories": len(play_sizes),
        "completed_trajectories": len(done),
        "incomplete_trajectories": len(play_sizes) - len(done),
        "agentic_graph": dict(graph_block),
    }
    stats = exact_stats([last[p] - first[p] for p in done])
    for name, value in stats.items():
        out[f"{name}_trajectory_e2e_latency_ms"] = float(value)
    out["p50_trajectory_e2e_latency_ms"] = out["median_trajectory_e2e_latency_ms"]
    return out


def trajectory_breakdown(records: Sequence[RequestRecord], play_sizes: Mapping[str, int],
                         play_starts: Mapping[str, float] | None = None) -> dict[str, Any]:
    """servesim's per-trajectory account (summary field `trajectories`): per play its status,
    request count, E2E latency (as in the trajectory statistics), model time (how long at least
    one of its requests was in flight: the union of their dispatch-to-end intervals) and wait
    (E2E minus model time: tool calls, think time and dependency delays); plus the means over
    completed plays. Plays in order of first appearance."""
    spans: dict[str, list[tuple[float, float]]] = {}
    completed: dict[str, int] = {}
    for r in records:
        if r.play_id is None or r.terminal_ms is None:
            continue
        spans.setdefault(r.play_id, []).append((r.arrival_ms, r.terminal_ms))
        if r.status == Status.COMPLETED:
            completed[r.play_id] = completed.get(r.play_id, 0) + 1
    plays = []
    for play, size in play_sizes.items():
        intervals = sorted(spans.get(play, []))
        done = completed.get(play, 0) == size
        entry: dict[str, Any] = {"play_id": play, "status": "completed" if done else "incomplete",
                                 "requests": size, "e2e_ms": None, "model_ms": None, "wait_ms": None}
        if done and intervals:
            start = (play_starts or {}).get(play, intervals[0][0])
            end = max(e for _, e in intervals)
            model, lo, hi = 0.0, intervals[0][0], intervals[0][1]
            for a, b in intervals[1:]:
                if a > hi:
                    model += hi - lo
                    lo, hi = a, b
                else:
                    hi = max(hi, b)
            model += hi - lo
            entry.update(e2e_ms=end - start, model_ms=model, wait_ms=end - start - model)
        plays.append(entry)
    done_plays = [p for p in plays if p["e2e_ms"] is not None]

    def mean(key: str) -> float | None:
        return sum(p[key] for p in done_plays) / len(done_plays) if done_plays else None

    return {"mean_e2e_ms": mean("e2e_ms"), "mean_model_ms": mean("model_ms"), "mean_wait_ms": mean("wait_ms"),
            "plays": plays}


def unreleased_requests(unreleased: Sequence[tuple[str, str, str, str | None]],
                        records: Sequence[RequestRecord]) -> dict[str, Any]:
    """servesim's account of the requests an agentic run never released (the reference drops
    them silently): each one's request, play and session ids, the request whose end aborted its
    play (`blocked_by`) and how that request ended."""
    ended = {r.request_id: r.status.value for r in records if r.request_id is not None and r.status is not None}
    requests = [{"request_id": request_id, "play_id": play_id, "session_id": session_id, "blocked_by": by,
                 "blocked_by_status": ended.get(by) if by is not None else None}
                for request_id, play_id, session_id, by in unreleased]
    return {"count": len(requests), "requests": requests}


def unreleased_warning(account: Mapping[str, Any]) -> str | None:
    """One line saying how many requests were never released and why (None if none were)."""
    if not account["count"]:
        return None
    causes = {r["blocked_by"]: r["blocked_by_status"] for r in account["requests"] if r["blocked_by"] is not None}
    by_status: dict[str, list[str]] = {}
    for request_id, status in causes.items():
        by_status.setdefault(status, []).append(request_id)
    why = "; ".join(f"{len(ids)} {status}: {_some(ids)}" for status, ids in sorted(by_status.items()))
    count = account["count"]
    were = "request was" if count == 1 else "requests were"
    held = count - sum(1 for r in account["requests"] if r["blocked_by"] is not None)
    reasons = [f"a request of the same play did not complete ({why})"] if why else []
    if held:
        reasons.append(f"{held} not due before the replay ended (a profile's admission cutoff, or a time cap)")
    return (f"{count} agentic {were} never released, so not counted in num_requests nor recorded per "
            f"request: {'; '.join(reasons)}")


def _some(ids: list[str], shown: int = 5) -> str:
    more = len(ids) - shown
    return ", ".join(ids[:shown]) + (f" and {more} more" if more > 0 else "")
