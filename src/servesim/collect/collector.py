"""What happened to every request: arrival, routing, admissions, token timeline, terminal state.

The collector records raw facts only; `servesim.report` derives every metric from them. Token
timestamps are not copied per token: a record keeps the indices of the worker passes that gave
it a token (flat ``[first, end)`` ranges) and a reference to that worker's append-only array of
pass end times. Records are kept to the end, unless a fold takes each one as it ends (a report
that needs no whole records: the report's tally, a spool of per-request output), so memory
follows what is in flight.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import StrEnum


class Status(StrEnum):
    """How a request ended."""

    COMPLETED = "completed"
    REJECTED = "rejected"
    """Refused by a rank (context limit, or it can never fit the KV pool)."""
    FAILED = "failed"
    """Disaggregated: its prompt can never fit the decode pool."""
    TIMED_OUT = "timed_out"
    """Its client gave up before it finished (`traffic.client_timeout_seconds`, servesim extension)."""
    CANCELED = "canceled"
    """Still running at a continuous profile's response-grace deadline (`agentic_profile`, as AISimulate 0.13)."""


@dataclass(slots=True, eq=False, repr=False)
class Admission:
    at_ms: float
    reused_tokens: int
    pool: str
    host_tokens: int | None = None
    """With a host KV tier: how many of the reused tokens were loaded from host memory."""


@dataclass(slots=True, eq=False, repr=False)
class Route:
    pool: str
    worker_id: int
    scheduler_id: int
    dp_rank: int
    overlap_tokens: int


@dataclass(slots=True, eq=False)
class RequestRecord:
    """Raw lifecycle facts of one request (one turn of a session)."""

    rid: int
    session_id: str
    turn_index: int
    arrival_ms: float
    input_length: int
    requested_output: int
    routes: list[Route] = field(default_factory=list)
    admissions: list[Admission] = field(default_factory=list)
    status: Status | None = None
    terminal_ms: float | None = None
    output_length: int = 0
    token_spans: list[int] = field(default_factory=list)
    pass_ends: array | None = None
    reason: str | None = None
    """Why the request was rejected (the context or KV limit it broke)."""
    source_held_ms: float | None = None
    destination_reserved_ms: float | None = None
    destination_activated_ms: float | None = None
    source_released_ms: float | None = None
    """Disaggregated handoff: prompt held on the prefill worker, decode KV reserved, request
    activated on the decode worker, prefill KV released."""
    request_id: str | None = None
    play_id: str | None = None
    node: int = -1
    """Agentic workloads: the trace's request id, the play (trajectory) it belongs to and its
    node index in the graph (which numbers its UUID)."""

    @property
    def counted(self) -> bool:
        """Completed after at least one admission: the requests every metric is over."""
        return self.status == Status.COMPLETED and bool(self.admissions)

    def token_times(self) -> list[float]:
        """Timestamps of every emitted token, in order."""
        ends = self.pass_ends
        spans = self.token_spans
        if ends is None or not spans:
            return []
        out: list[float] = []
        for i in range(0, len(spans), 2):
            out.extend(ends[spans[i]:spans[i + 1]])
        return out


class Collector:
    """Store of request records, indexed by request id.

    With `fold`, each request is handed to it as it reaches a terminal state and no record of
    it is kept: `records` then stays empty and only the requests in flight are held.
    """

    def __init__(self, fold: Callable[[RequestRecord], None] | None = None) -> None:
        self.records: list[RequestRecord] = []
        self.num_arrived = 0
        self.num_terminal = 0
        self._fold = fold
        self._in_flight: dict[int, RequestRecord] = {}

    def unfolded(self) -> Iterable[RequestRecord]:
        """The records not handed to `fold`: all of them, or those still in flight."""
        return self._in_flight.values() if self._fold is not None else self.records

    def on_arrival(self, session_id: str, turn_index: int, arrival_ms: float, input_length: int,
                   requested_output: int, request_id: str | None = None,
                   play_id: str | None = None, node: int = -1) -> RequestRecord:
        record = RequestRecord(self.num_arrived, session_id, turn_index, arrival_ms,
                               input_length, requested_output)
        self.num_arrived += 1
        if request_id is not None:
            record.request_id = request_id
            record.play_id = play_id
            record.node = node
        if self._fold is not None:
            self._in_flight[record.rid] = record
        else:
            self.records.append(record)
        return record

    @staticmethod
    def on_route(record: RequestRecord, route: Route) -> None:
        record.routes.append(route)

    @staticmethod
    def on_admit(record: RequestRecord, at_ms: float, reused_tokens: int, pool: str) -> None:
        record.admissions.append(Admission(at_ms, reused_tokens, pool))

    def on_terminal(self, record: RequestRecord, at_ms: float, status: Status, output_length: int,
                    token_spans: list[int], pass_ends: array | None, reason: str | None = None) -> None:
        self.num_terminal += 1
        record.reason = reason
        record.status = status
        record.terminal_ms = at_ms
        record.output_length = output_length
        record.token_spans = token_spans
        record.pass_ends = pass_ends
        if self._fold is not None:
            del self._in_flight[record.rid]
            self._fold(record)
