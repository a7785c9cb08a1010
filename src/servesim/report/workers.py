"""Per-worker breakdown (a servesim extension of the report): who served what, how busy."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from servesim.report.tally import WORKER_FIELDS, RequestTally


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class WorkerUsage:
    """What the report needs to know about one worker besides its requests."""

    pool: str
    worker_id: int
    busy_ms: float


def worker_breakdown(tally: RequestTally, workers: Sequence[WorkerUsage], duration_ms: float) -> list[dict[str, Any]]:
    """One entry per worker: requests routed to it, completed, prefix reuse and busy fraction.

    A request counts for the worker that ran its prompt (the prefill worker in disaggregated
    serving, where decode workers list the requests they decoded).
    """
    out = []
    for w in workers:
        sums = dict(zip(WORKER_FIELDS, tally.workers.get((w.pool, w.worker_id), [0] * len(WORKER_FIELDS)),
                        strict=True))
        tokens = sums["input_tokens"]
        out.append({"pool": w.pool, "worker_id": w.worker_id, "requests": sums["requests"],
                    "completed_requests": sums["completed_requests"], "input_tokens": tokens,
                    "reused_input_tokens": sums["reused_input_tokens"],
                    "overlap_tokens_credited": sums["overlap_tokens_credited"],
                    "busy_fraction": w.busy_ms / duration_ms if duration_ms > 0 else 0.0,
                    "prefix_cache_reused_ratio": sums["reused_input_tokens"] / tokens if tokens else 0.0})
    return out
