"""Pacing the simulated clock to wall time: an asyncio task steps the live replay to
`wall seconds since start × speed`, adds the requests clients sent (sent at that simulated
time) and hangs up those whose clients left; it sleeps until the next simulated event or the
next request, whichever comes first."""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
import time

from servesim.live import LiveReplay
from servesim.collect.collector import Status
from servesim.errors import SimulationError
from servesim.serve.protocol import ParsedRequest
from servesim.serve.session import Ended, Session, Sessions

log = logging.getLogger("servesim.serve")

IDLE_WAKE_S = 0.5
"""Longest sleep when nothing is pending (the clock moves on anyway)."""


class Pacer:
    """Owns the live replay: every call into it happens on the event loop's thread."""

    def __init__(self, live: LiveReplay, sessions: Sessions, speed: float) -> None:
        self.live = live
        self.sessions = sessions
        self.speed = speed
        self._origin = time.perf_counter()
        self._wake = asyncio.Event()
        self._hang_ups: list[Session] = []
        self._ids = itertools.count()
        self._stopping = False
        self.failure: str | None = None

    def sim_now(self) -> float:
        """The simulated time (ms) that corresponds to now."""
        return (time.perf_counter() - self._origin) * 1000 * self.speed

    def submit(self, request: ParsedRequest) -> Session:
        """Send `request` into the simulation now; its events arrive on the session."""
        if self.failure is not None:
            raise SimulationError(self.failure)
        sent = max(self.sim_now(), self.live.now)
        session = Session(f"live-{next(self._ids)}", len(request.token_ids), request.max_tokens, sent)
        self.sessions.open(session)
        self.live.driver.add(session.key, sent, request.token_ids, request.max_tokens)
        self._wake.set()
        return session

    def hang_up(self, session: Session) -> None:
        """The client of `session` left: the simulation frees its request."""
        if not session.ended and not session.hung_up:
            session.hung_up = True
            self._hang_ups.append(session)
            self._wake.set()

    def stop(self) -> None:
        self._stopping = True
        self._wake.set()

    async def run(self) -> None:
        """Step the replay until `stop`."""
        while not self._stopping:
            self.step()
            delay = IDLE_WAKE_S
            at = self.live.loop.next_time()
            if at < math.inf:
                delay = min(delay, max(0.0, (at - self.sim_now()) / self.speed / 1000))
            self._wake.clear()
            if delay > 0:
                try:
                    await asyncio.wait_for(self._wake.wait(), delay)
                except TimeoutError:
                    pass
            else:
                await asyncio.sleep(0)  # let the HTTP layer send what this step produced

    def step(self) -> None:
        """Advance the replay to now and apply the hang-ups."""
        if self.failure is not None:
            return
        try:
            self.live.run_until(self.sim_now())
            waiting = []
            for session in self._hang_ups:
                if session.rid is None:
                    waiting.append(session)  # not yet released (front-end latency)
                elif not session.ended:
                    self.live.hang_up(session.rid)
            self._hang_ups = waiting
        except SimulationError as exc:
            self.failure = str(exc)
            log.error("the simulation failed: %s", exc)
            for session in list(self.sessions.by_key.values()):
                session.ended = True
                session.events.put_nowait(Ended(Status.FAILED, self.live.now, self.failure))
