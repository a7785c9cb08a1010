"""Trajectory (play) fields of an agentic run's summary.

A play is complete when every one of its requests completed; its end-to-end latency is its last
terminal time minus its first dispatch. Statistics are over complete plays, with the exact
percentile rule of every other latency (`servesim.report.stats`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from servesim.collect.collector import RequestRecord, Status
from servesim.report.stats import exact_stats


def trajectory_fields(records: Sequence[RequestRecord], play_sizes: Mapping[str, int],
                      graph_block: Mapping[str, Any]) -> dict[str, Any]:
    """`{total,completed,incomplete}_trajectories`, the trajectory E2E statistics and the
    `agentic_graph` block; `play_sizes` is the number of requests of every play."""
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

