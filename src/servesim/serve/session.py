"""Each live request's view of the simulation: the tokens it was given and when, and how it
ended. `Sessions` hears the cluster (a `cluster.base.RequestObserver` and `PassObserver`) and
hands each session its tokens at the end of the pass that produced them."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

from servesim.collect.collector import RequestRecord, Status
from servesim.engine.request import EngineRequest
from servesim.engine.worker import Worker, WorkerPass
from servesim.traffic.driver import Arrival


@dataclass(slots=True, frozen=True)
class Tokens:
    """`count` tokens emitted at simulated time `at_ms`."""

    count: int
    at_ms: float


@dataclass(slots=True, frozen=True)
class Ended:
    """The request ended at `at_ms` with `status` (a reason when rejected)."""

    status: Status
    at_ms: float
    reason: str | None


Event = Tokens | Ended


@dataclass(eq=False)
class Session:
    """One request in flight: its events wait in `events` for the HTTP layer."""

    key: str
    prompt_tokens: int
    max_tokens: int
    sent_ms: float
    events: asyncio.Queue[Event] = field(default_factory=asyncio.Queue)
    rid: int | None = None
    request: EngineRequest | None = None
    given: int = 0
    """Tokens handed to `events` so far."""
    first_ms: float | None = None
    last_ms: float | None = None
    ended: bool = False
    hung_up: bool = False


TokenListener = Callable[[Session, int, float], None]
"""Who hears a session's tokens as they are handed out: (session, count, simulated ms)."""


class Sessions:
    """The sessions in flight, by key and by the worker that holds them."""

    def __init__(self, on_tokens: TokenListener | None = None) -> None:
        self.by_key: dict[str, Session] = {}
        self._by_rid: dict[int, Session] = {}
        self._on_worker: dict[Worker, dict[int, Session]] = {}
        self.on_tokens = on_tokens

    def open(self, session: Session) -> None:
        self.by_key[session.key] = session

    # -- cluster.base.RequestObserver -------------------------------------------------------------

    def on_placed(self, arrival: Arrival, request: EngineRequest, worker: Worker | None, now: float) -> None:
        session = self.by_key.get(arrival.session_id)
        if session is None:
            return
        session.rid, session.request = request.rid, request
        self._by_rid[request.rid] = session
        if worker is not None:
            self._on_worker.setdefault(worker, {})[request.rid] = session

    def on_ended(self, record: RequestRecord, now: float) -> None:
        session = self._by_rid.pop(record.rid, None)
        if session is None:
            return
        del self.by_key[session.key]
        for held in self._on_worker.values():
            held.pop(record.rid, None)
        session.ended = True
        assert record.status is not None
        session.events.put_nowait(Ended(record.status, now, record.reason))

    # -- cluster.base.PassObserver ----------------------------------------------------------------

    def on_pass_end(self, label: str, worker: Worker, outcome: WorkerPass, now: float) -> None:
        held = self._on_worker.get(worker)
        if not held:
            return
        for session in held.values():
            request = session.request
            assert request is not None
            new = request.generated - session.given
            if new > 0 and not session.hung_up:
                if self.on_tokens is not None:
                    self.on_tokens(session, new, now)
                if session.first_ms is None:
                    session.first_ms = now
                session.given += new
                session.last_ms = now
                session.events.put_nowait(Tokens(new, now))


