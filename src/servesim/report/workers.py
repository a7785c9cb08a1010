"""Per-worker breakdown (a servesim extension of the report): who served what, how busy."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from servesim.collect.collector import RequestRecord


@dataclass(slots=True, frozen=True)
class WorkerUsage:
    """What the report needs to know about one worker besides its requests."""

    pool: str
    worker_id: int
    busy_ms: float


def worker_breakdown(records: Sequence[RequestRecord], workers: Sequence[WorkerUsage],
                     duration_ms: float) -> list[dict[str, Any]]:
    """One entry per worker: requests routed to it, completed, prefix reuse and busy fraction.

    A request counts for the worker that ran its prompt (the prefill worker in disaggregated
    serving, where decode workers list the requests they decoded).
    """
    stats: Mapping[tuple[str, int], dict[str, Any]] = {
        (w.pool, w.worker_id): {"pool": w.pool, "worker_id": w.worker_id, "requests": 0,
                                "completed_requests": 0, "input_tokens": 0, "reused_input_tokens": 0,
                                "overlap_tokens_credited": 0,
                                "busy_fraction": w.busy_ms / duration_ms if duration_ms > 0 else 0.0}
        for w in workers
    }
    for record in records:
        counted = record.counted
        for route in record.routes:
            pool = "decode" if route.pool == "agg" else route.pool
            entry = stats.get((pool, route.worker_id))
            if entry is None:
                continue
            entry["requests"] += 1
            entry["overlap_tokens_credited"] += route.overlap_tokens
            if counted:
                entry["completed_requests"] += 1
                entry["input_tokens"] += record.input_length
                entry["reused_input_tokens"] += _reused(record, pool)
    for entry in stats.values():
        tokens = entry["input_tokens"]
        entry["prefix_cache_reused_ratio"] = entry["reused_input_tokens"] / tokens if tokens else 0.0
    return list(stats.values())


def _reused(record: RequestRecord, pool: str) -> int:
    """The most prompt tokens the request reused in one admission to `pool`."""
    admissions = record.admissions
    if len(admissions) == 1 and _pool(admissions[0].pool) == pool:
        return admissions[0].reused_tokens
    return max((a.reused_tokens for a in admissions if _pool(a.pool) == pool), default=0)


def _pool(admission_pool: str) -> str:
    return "decode" if admission_pool == "agg" else admission_pool
