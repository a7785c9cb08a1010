"""A continuous profile's response-grace deadline (AISimulate 0.13's `agentic_profile`,
`response_grace_seconds`): what still runs then is canceled.

Admission closes at the cutoff; the requests in flight may finish until the grace deadline
(cutoff + `response_grace_seconds`). Those still running then are canceled at the deadline: each
keeps the tokens it emitted by then, its terminal status is `canceled` and its terminal time the
deadline, it counts in `num_requests` but not among the completed requests (nor in the latency
statistics), and its play is incomplete. The profile ends at the deadline: worker seconds and
each worker's busy time are those the run had reached then.

The replay itself goes on after the deadline until the canceled requests end on their own
(nothing else can start: the cutoff is earlier); what they do then is dropped here, from the
records and from the accounting, so the report is the one of a run stopped at the deadline.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from servesim.collect.collector import RequestRecord, Status
from servesim.traffic.timeouts import spans_until


@dataclass(slots=True)
class GraceDeadline:
    """The deadline, what the run's accounting was when the clock reached it, and what it canceled."""

    cluster: Any = None
    at_ms: float = float("inf")
    """The deadline (inf until a warm-up's barrier fixes the cutoff)."""
    reached: bool = False
    worker_seconds: dict[str, float] = field(default_factory=dict)
    """Per pool, its worker seconds when the clock reached the deadline."""
    busy_ms: dict[tuple[str, int], float] = field(default_factory=dict)
    """Per (pool, worker id), its busy time then."""
    canceled_plays: set[str] = field(default_factory=set)
    canceled: int = 0

    def reach(self) -> None:
        """The clock is at the deadline with requests in flight: note the accounting."""
        self.reached = True
        if self.cluster is None:
            return
        self.worker_seconds = {name: pool.worker_seconds for name, pool in self.cluster.pools.items()}
        self.busy_ms = {(name, w.worker_id): w.busy_ms for name, fleet in self.cluster.fleets.items()
                        for w in fleet.by_id.values()}

    def settle(self, records: list[RequestRecord]) -> list[RequestRecord]:
        """`records` with every request still running at the deadline canceled there, and the
        cluster's accounting put back to the deadline's."""
        if not self.reached:
            return records
        out = []
        for record in records:
            if record.terminal_ms is not None and record.terminal_ms > self.at_ms:
                record = self._cancel(record)
            out.append(record)
        if self.cluster is not None and self.canceled:
            for name, seconds in self.worker_seconds.items():
                self.cluster.pools[name].worker_seconds = seconds
            for name, fleet in self.cluster.fleets.items():
                for w in fleet.by_id.values():
                    if (name, w.worker_id) in self.busy_ms:
                        w.busy_ms = self.busy_ms[name, w.worker_id]
        return out

    def _cancel(self, record: RequestRecord) -> RequestRecord:
        """The record of a request canceled at the deadline, with the tokens emitted by then."""
        spans, tokens = spans_until(record.token_spans, record.pass_ends, self.at_ms)
        self.canceled += 1
        if record.play_id is not None:
            self.canceled_plays.add(record.play_id)
        return replace(record, status=Status.CANCELED, terminal_ms=self.at_ms, output_length=tokens,
                       token_spans=spans, pass_ends=record.pass_ends if spans else None, reason=None,
                       admissions=[a for a in record.admissions if a.at_ms <= self.at_ms],
                       destination_activated_ms=_by(record.destination_activated_ms, self.at_ms),
                       destination_reserved_ms=_by(record.destination_reserved_ms, self.at_ms),
                       source_held_ms=_by(record.source_held_ms, self.at_ms),
                       source_released_ms=_by(record.source_released_ms, self.at_ms))


def _by(t: float | None, deadline: float) -> float | None:
    """`t` if it came by the deadline, else None (it never happened)."""
    return t if t is not None and t <= deadline else None
