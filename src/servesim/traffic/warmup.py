"""The preparation phase of a snapshot replay (AISimulate 0.13's `agentic_warmup`, policy
`repeated_prefixes`).

Before the snapshot plays start, every lane sends, one after another (each when the previous
one has ended), one *primer* per conversation of its snapshot that goes on after the cut (that
conversation's last request of history, in the order of the `agentic_snapshots` primers), then
`WARMUP_REQUESTS` *warm-up* requests cycling over the primers' sources (over the replayed
requests that wait on nothing, by recorded start, when the lane has no primer). Each is its
source's prompt with a one-token answer, so the lanes' prefixes are in the KV caches when the
measured replay begins. The lanes run side by side from time 0; when the last preparation request
has ended (every lane done and the server quiescent) the barrier falls and the snapshot plays
start, their requests released as without warm-up but counted from the barrier.

The report covers the measured phase only: every time is counted from the barrier, the
preparation requests are neither in the summary nor in the per-request records, and worker
seconds are those after the barrier. They are listed in the `agentic_phases` block (schema
`aisimulate.agentic.phases.v1`), request by request with their identities, as 0.13 lists them.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from servesim.collect.collector import Admission, RequestRecord
from servesim.traffic.agentic import AgenticNode

SCHEMA = "aisimulate.agentic.phases.v1"
WARMUP_REQUESTS = 10
"""Warm-up requests per lane (after its primers), as in 0.13."""
UUID_BASE = 0x8000_0000 << 96
"""Preparation requests are numbered from UUID 80000000-0000-0000-0000-000000000000."""


@dataclass(slots=True)
class LaneSources:
    """What one snapshot lane prepares from (filled by `servesim.traffic.snapshot`)."""

    lane: int
    play_id: str
    primers: list[AgenticNode]
    """The primers' source requests (history), in primer order."""
    roots: list[AgenticNode]
    """The replayed requests that wait on nothing, by (recorded start, request id)."""
    identity: Callable[[AgenticNode], dict[str, str]]
    """A source request's identity fields (cache, conversation, lane, play, root, parent)."""


@dataclass(slots=True, eq=False)
class PrepRequest:
    """One preparation request and, once it ran, what happened to it."""

    lane: int
    phase: str
    """"primer" or "warmup"."""
    request_id: str
    source: AgenticNode
    identity: dict[str, str]
    uuid: str
    record: RequestRecord | None = None


@dataclass(slots=True, eq=False)
class Preparation:
    """The preparation requests of every lane (lane after lane) and the barrier."""

    lanes: list[LaneSources]
    requests: list[PrepRequest] = field(default_factory=list)
    first: list[int] = field(default_factory=list)
    """Per lane, the index of its first request in `requests`."""
    barrier_ms: float | None = None
    ended: int = 0
    """Preparation requests ended so far."""
    block_size: int = 16
    on_barrier: Callable[[float], None] | None = None
    """Called with the time the barrier falls (the run snapshots its worker accounting)."""
    at_barrier: dict[str, float] = field(default_factory=dict)
    """The run's worker accounting when the barrier fell (filled by `on_barrier`)."""
    policy: str | None = None
    """`live_trajectory_v1` (`servesim.traffic.live_warmup`: primers only here, the trajectory
    requests appended as they are sent); None: `repeated_prefixes`."""
    failed: int | None = None
    """The first preparation request that ended without completing (the preparation is then
    aborted, as in 0.13: no barrier, no measured replay)."""

    @classmethod
    def plan(cls, lanes: list[LaneSources], block_size: int, *, primers_only: bool = False) -> Preparation:
        """Each lane's primers, then its warm-up requests (none with `primers_only`: a live
        warm-up), numbered per lane and play."""
        out = cls(lanes, block_size=block_size)
        for lane in lanes:
            out.first.append(len(out.requests))
            sources = lane.primers or lane.roots
            plan = [("primer", n) for n in lane.primers]
            plan += [("warmup", sources[j % len(sources)]) for j in range(0 if primers_only else WARMUP_REQUESTS)]
            for k, (phase, node) in enumerate(plan):
                identity = lane.identity(node) | {"request_id": f"{lane.play_id}:{phase}:{k}"}
                uuid = f"{UUID_BASE + len(out.requests):032x}"
                out.requests.append(PrepRequest(lane.lane, phase, identity["request_id"], node, identity,
                                                f"{uuid[:8]}-{uuid[8:12]}-{uuid[12:16]}-{uuid[16:20]}-{uuid[20:]}"))
        out.first.append(len(out.requests))
        return out

    def next_of(self, k: int) -> int | None:
        """The request the lane of request `k` sends after it (None: the lane is done)."""
        lane = self.requests[k].lane
        return k + 1 if k + 1 < self.first[lane + 1] else None

    def done(self) -> bool:
        """Whether every preparation request has ended."""
        return all(r.record is not None and r.record.terminal_ms is not None for r in self.requests)

    def measured(self, records: Sequence[RequestRecord], base: int) -> list[RequestRecord]:
        """The records of the measured phase (node index below `base`, where the preparation's
        are numbered from), their times counted from the barrier; the preparation records are
        kept by their requests."""
        origin = self.barrier_ms or 0.0
        out = []
        for record in records:
            if record.node >= base:
                self.requests[record.node - base].record = record
            else:
                out.append(shifted(record, origin))
        return out

    def report(self) -> dict[str, Any]:
        """The `agentic_phases` block."""
        lanes = []
        for lane in self.lanes:
            mine = [r for r in self.requests if r.lane == lane.lane]
            ended = [r for r in mine if r.record is not None and r.record.terminal_ms is not None]
            lanes.append({
                "lane_id": lane.lane, "play_id": lane.play_id,
                "primers_completed": sum(1 for r in ended if r.phase == "primer" and _completed(r)),
                "primers_expected": sum(1 for r in mine if r.phase == "primer"),
                "requests_quiescent": len(ended),
                "warmup_completed": sum(1 for r in ended if r.phase == "warmup" and _completed(r)),
                "warmup_expected": WARMUP_REQUESTS if self.policy else sum(1 for r in mine if r.phase == "warmup"),
            })
        failed = self.requests[self.failed] if self.failed is not None else None
        ends = [r.record.terminal_ms for r in self.requests if r.record is not None and r.record.terminal_ms is not None]
        policy = {"warmup_policy": self.policy} if self.policy else {}
        return policy | {
            "barrier_condition": "all_preparation_succeeded_and_server_quiescent",
            "failure_reason": None if failed is None else f"preparation request ended with {_status_name(failed)}",
            "failure_request_id": None if failed is None else failed.uuid,
            "finished_at_ms": self.barrier_ms if failed is None else max(ends, default=0.0),
            "lanes": lanes,
            "phase": "profile" if failed is None else "aborted",
            "profile_start_ms": self.barrier_ms,
            "requests": [self._entry(r) for r in self.requests],
            "schema": SCHEMA,
        }

    def _entry(self, r: PrepRequest) -> dict[str, Any]:
        """One preparation request as 0.13 lists it."""
        record = r.record
        first = record.admissions[0] if record is not None and record.admissions else None
        end = record.terminal_ms if record is not None else None
        return {
            "causal_terminal_at_ms": end,
            "dispatched_at_ms": record.arrival_ms if record is not None else None,
            "expected_full_block_tokens": r.source.input_length // self.block_size * self.block_size,
            "first_admission_reused_input_tokens": first.reused_tokens if first is not None else None,
            "first_admit_ms": first.at_ms if first is not None else None,
            "identity": r.identity,
            "input_length": r.source.input_length,
            "lane_id": r.lane,
            "max_output_tokens": 1,
            "observed_output_tokens": record.output_length if record is not None else 0,
            "phase": r.phase,
            "quiescent_at_ms": _quiescent(record),
            "source_request_id": r.source.request_id,
            "terminal_status": str(record.status) if record is not None and record.status is not None else None,
            "uuid": r.uuid,
        }


def _quiescent(record: RequestRecord | None) -> float | None:
    """When the server holds nothing more of the request: its end, or later the release of its
    prompt's blocks on a prefill worker (disaggregated pools)."""
    if record is None or record.terminal_ms is None:
        return None
    released = record.source_released_ms
    return record.terminal_ms if released is None else max(record.terminal_ms, released)


def _status_name(r: PrepRequest) -> str:
    """A request's terminal status as 0.13 names it in `failure_reason` ("Rejected", ...)."""
    status = r.record.status if r.record is not None else None
    return "".join(part.title() for part in status.value.split("_")) if status is not None else "Unknown"


def _completed(r: PrepRequest) -> bool:
    return r.record is not None and r.record.counted


def shifted(record: RequestRecord, origin: float) -> RequestRecord:
    """A copy of `record` with every time counted from `origin` (its token times copied out of
    the worker's pass-end array)."""
    if not origin:
        return record
    times = array("d", (t - origin for t in record.token_times()))

    def later(t: float | None) -> float | None:
        return None if t is None else t - origin

    return replace(record, arrival_ms=record.arrival_ms - origin, terminal_ms=later(record.terminal_ms),
                   admissions=[Admission(a.at_ms - origin, a.reused_tokens, a.pool) for a in record.admissions],
                   token_spans=[0, len(times)] if len(times) else [], pass_ends=times if len(times) else None,
                   source_held_ms=later(record.source_held_ms),
                   destination_reserved_ms=later(record.destination_reserved_ms),
                   destination_activated_ms=later(record.destination_activated_ms),
                   source_released_ms=later(record.source_released_ms))


def barrier_accounting(cluster: Any, into: dict[str, float]) -> Callable[[float], None]:
    """At a warm-up's barrier: the cluster's pools' worker seconds restart from 0 (the report
    counts them from there, as 0.13), and each worker's busy time so far is stored in `into`
    (under `pool:worker`)."""

    def snapshot(now: float) -> None:
        for pool in cluster.pools.values():
            pool.worker_seconds = 0.0
        for name, fleet in cluster.fleets.items():
            for w in fleet.by_id.values():
                into[f"{name}:{w.worker_id}"] = w.busy_ms

    return snapshot
