"""The workload driver: which turns are ready when, in open loop or under a concurrency cap.

The runtime asks the driver for its next ready time instead of putting arrivals on the event
heap, and tells it about terminal requests so it can release the next turn (ready at terminal
time + think time) or, under a cap, the next session.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from itertools import count, islice
from typing import Protocol

from servesim.traffic.synthetic import SyntheticSessions
from servesim.traffic.workload import GENERATED_BASE, NEVER, Prompt, Run, Session, Workload, output_runs, prompt_runs

INF = math.inf


@dataclass(slots=True, eq=False, repr=False)
class Arrival:
    """A turn released to the runtime: the request as the engines see it."""

    session_index: int
    turn_index: int
    session_id: str
    arrival_ms: float
    prompt_runs: Prompt
    input_length: int
    max_output_tokens: int
    output_base: int
    """Token value of the first generated token (generated tokens are consecutive values)."""
    unique_from: int = NEVER
    """First token position no other request can have (NEVER when all may be shared)."""
    output_ids: list[int] | None = None
    """Authored output token ids, if the trace gives them."""
    request_id: str | None = None
    """The trace's request id (agentic workloads only)."""
    play_id: str | None = None
    """The play (trajectory) the request belongs to (agentic workloads only)."""


class RequestDriver(Protocol):
    """What the runtime and the cluster ask of a driver (`Driver`, or
    `servesim.traffic.agentic_driver.AgenticDriver` for dependency graphs)."""

    fixed_arrivals: bool
    """True when completions never release requests (every arrival time is known up front)."""
    frontend_ms: float
    """Latency from a request's send (its arrival time) to its release (servesim extension)."""

    @property
    def total_requests(self) -> int:
        """Requests in the workload (an upper bound on those that will arrive)."""

    def next_ready_time(self) -> float:
        """Earliest time a not yet released request becomes ready (inf if none is known)."""

    def drained(self) -> bool:
        """True when no request will be released any more."""

    def start(self, now: float) -> None:
        """Release what is ready at the start of the replay."""

    def release(self, now: float) -> list[Arrival]:
        """Every request ready at or before `now`, in release order."""

    def on_terminal(self, arrival: Arrival, now: float, emitted: int, *, ends_session: bool = False,
                    completed: bool = True) -> None:
        """A released request ended (`completed` False: rejected or failed)."""


class _SessionProgress:
    """Where a session is: its next turn and its accumulated context.

    `context` holds the content of at most the driver's `prompt_limit` tokens; `context_length`
    is the context's true length.
    """

    __slots__ = ("session", "next_turn", "context", "context_length")

    def __init__(self, session: Session) -> None:
        self.session = session
        self.next_turn = 0
        self.context: list[Run] = []
        self.context_length = 0


class Driver:
    """Releases turns of a workload; open loop when `concurrency` is None, else closed loop.

    Open loop: session i's first turn is ready at its first arrival — `first_arrivals[i]` of a
    sequence (released in time order), or the i-th time of an iterator, which must be
    non-decreasing and is read as the replay goes (synthetic schedules: nothing is generated up
    front). Closed loop: at most `concurrency` sessions are active, activated in input order; a
    session keeps its slot through all its turns and think times.

    `prompt_limit` is a prompt length from which every engine rejects a request whatever its
    content (context length, KV pool): the content of longer prompts is built only up to it, so
    a 10⁹-token prompt or a session far past the context length costs no more than that.
    """

    def __init__(
        self,
        workload: Workload,
        *,
        first_arrivals: Sequence[float] | Iterator[float] | None = None,
        concurrency: int | None = None,
        delay_scale: float = 1.0,
        prompt_limit: int | None = None,
        frontend_ms: float = 0.0,
    ) -> None:
        self.frontend_ms = frontend_ms
        """Latency from a turn's send (its arrival) to the engine seeing it: a turn sent at t is
        released at t + frontend_ms and keeps t as its arrival time."""
        self._sessions: Sequence[Session] = workload.sessions
        self._num_sessions = len(workload.sessions)
        self._accumulate = workload.accumulate
        self._delay_scale = delay_scale
        self._concurrency = concurrency
        self._prompt_limit = prompt_limit
        self._progress: dict[int, _SessionProgress] = {}
        self._ready: list[tuple[float, int, int]] = []  # (ready time, session, turn)
        self._next_session = 0
        self._active = 0
        self._finished = 0
        self._next_output_base = GENERATED_BASE
        self._first: Iterator[tuple[float, int]] = iter(())
        self._sessions_in_order = False
        """Whether sessions arrive in index order (the first arrivals come from an iterator)."""
        if concurrency is None:
            assert first_arrivals is not None
            if isinstance(first_arrivals, Sequence):
                order = sorted(range(self._num_sessions), key=first_arrivals.__getitem__)
                self._first = zip(map(first_arrivals.__getitem__, order), order, strict=True)
            else:
                self._first = zip(first_arrivals, count())
                self._sessions_in_order = True
        self._next_first = next(self._first, None)
        self.total_requests = workload.num_requests
        """Turns in the workload (the requests of the input)."""
        self.fixed_arrivals = concurrency is None and workload.single_turn
        """True in open loop with single-turn sessions: completions never release requests."""

    # -- queries ----------------------------------------------------------------------------

    def next_ready_time(self) -> float:
        """Earliest time a not yet released turn becomes ready (inf if none is known)."""
        t = self._ready[0][0] if self._ready else INF
        if self._next_first is not None and self._next_first[0] < t:
            t = self._next_first[0]
        return t + self.frontend_ms

    def drained(self) -> bool:
        """True once every session has finished."""
        return self._finished == self._num_sessions

    # -- releasing --------------------------------------------------------------------------

    def start(self, now: float) -> None:
        """Activate the initial sessions of a closed loop."""
        if self._concurrency is not None:
            while self._active < self._concurrency and self._next_session < self._num_sessions:
                self._activate(self._next_session, now)
                self._next_session += 1

    def release(self, now: float) -> list[Arrival]:
        """Every turn ready at or before `now`, ordered by (ready time, session, turn)."""
        if self.fixed_arrivals:
            return self._release_first_turns(now)
        out: list[Arrival] = []
        ready, lag = self._ready, self.frontend_ms
        while True:
            first = self._next_first
            from_ready = bool(ready) and ready[0][0] + lag <= now
            if (first is not None and first[0] + lag <= now
                    and (not from_ready or (first[0], first[1], 0) < ready[0])):
                t, s = first
                self._next_first = next(self._first, None)
                self._progress[s] = _SessionProgress(self._sessions[s])
                out.append(self._emit(s, t))
            elif from_ready:
                t, s, _ = heapq.heappop(ready)
                out.append(self._emit(s, t))
            else:
                return out

    def _release_first_turns(self, now: float) -> list[Arrival]:
        """`release` in open loop with single-turn sessions: the first arrivals by `now` (no
        session needs to be followed, as its only turn ends it)."""
        out: list[Arrival] = []
        first, lag, sessions = self._next_first, self.frontend_ms, self._sessions
        while first is not None and first[0] + lag <= now:
            t, s = first
            out.append(self._arrival(sessions[s], s, 0, t, None))
            first = next(self._first, None)
        self._next_first = first
        return out

    def plain_lengths(self) -> tuple[int, int] | None:
        """(prompt, output) tokens of every request when all are alike and share nothing: open
        loop, single-turn synthetic sessions without prefix groups or a cached prefix, whose prompts are kept
        whole, arriving in index order (the n-th request is session `session_{n}`). None
        otherwise."""
        sessions = self._sessions
        if not (self.fixed_arrivals and self._sessions_in_order and isinstance(sessions, SyntheticSessions)
                and sessions.turns == 1 and not sessions.groups and sessions.common is None
                and not self._accumulate):
            return None
        if self._prompt_limit is not None and sessions.input_tokens > self._prompt_limit:
            return None
        return sessions.input_tokens, sessions.output_tokens

    def release_times(self, limit: int) -> list[float]:
        """Release the next `limit` requests (fewer at the end) as their send times only, for a
        caller that knows what they hold (`plain_lengths`); they count as finished sessions."""
        first = self._next_first
        if first is None or limit < 1:
            return []
        times = [first[0]]
        times += [t for t, _ in islice(self._first, limit - 1)]
        self._next_first = next(self._first, None)
        self._finished += len(times)
        return times

    def on_terminal(self, arrival: Arrival, now: float, emitted: int, *, ends_session: bool = False,
                    completed: bool = True) -> None:
        """A released turn reached a terminal state after emitting `emitted` tokens (a rejected
        turn, `completed` False, still lets its session go on)."""
        if self.fixed_arrivals:  # the turn was its session's only one
            self._finished += 1
            return
        s = arrival.session_index
        progress = self._progress[s]
        session = progress.session
        if self._accumulate:
            turn = session.turns[arrival.turn_index]
            progress.context_length = arrival.input_length + emitted
            progress.context = self._bounded(prompt_runs(arrival.prompt_runs), arrival.input_length,
                                             lambda room: output_runs(arrival.output_base, min(emitted, room),
                                                                      turn.output_ids))
        if ends_session or progress.next_turn >= len(session.turns):
            self._finish(s, now)
            return
        delay = session.turns[progress.next_turn].delay_ms / self._delay_scale
        heapq.heappush(self._ready, (now + delay, s, progress.next_turn))

    # -- internals --------------------------------------------------------------------------

    def _activate(self, s: int, now: float) -> None:
        self._active += 1
        self._progress[s] = _SessionProgress(self._sessions[s])
        heapq.heappush(self._ready, (now, s, 0))

    def _finish(self, s: int, now: float) -> None:
        del self._progress[s]
        self._finished += 1
        if self._concurrency is not None:
            self._active -= 1
            if self._next_session < self._num_sessions:
                self._activate(self._next_session, now)
                self._next_session += 1

    def _bounded(self, runs: list[Run], length: int, more: Callable[[int], list[Run]]) -> list[Run]:
        """`runs` (the content of `length` tokens, or of `prompt_limit` if fewer) followed by the
        runs `more(room)` returns for the room left below `prompt_limit`."""
        limit = self._prompt_limit
        room = INF_TOKENS if limit is None else limit - min(length, limit)
        return runs + more(room) if room > 0 else runs

    def _emit(self, s: int, t: float) -> Arrival:
        progress = self._progress[s]
        k = progress.next_turn
        progress.next_turn = k + 1
        return self._arrival(progress.session, s, k, t, progress)

    def _arrival(self, session: Session, s: int, k: int, t: float, progress: _SessionProgress | None) -> Arrival:
        """Turn `k` of session `s` released with arrival time `t` (`progress`: where the
        session is, needed from its second turn on)."""
        turn = session.turns[k]
        length = turn.input_length
        runs: Prompt
        if self._accumulate and k:
            assert progress is not None
            runs = self._bounded(progress.context, progress.context_length, turn.input_runs)
            length += progress.context_length
        elif self._accumulate or (self._prompt_limit is not None and length > self._prompt_limit):
            runs = turn.input_runs(self._prompt_limit)
        else:
            runs = turn  # its runs are made if an engine needs them
        base = self._next_output_base
        self._next_output_base += turn.max_output_tokens + 1
        if self._accumulate:
            unique_from = NEVER  # the next turn's prompt repeats this one and its outputs
        elif turn.output_ids is not None and turn.unique_from >= length:
            unique_from = NEVER  # authored outputs may repeat another request's
        else:
            unique_from = turn.unique_from
        if self._prompt_limit is not None and length > self._prompt_limit:
            unique_from = min(unique_from, self._prompt_limit)  # no content is known beyond
        return Arrival(s, k, session.session_id, t, runs, length, turn.max_output_tokens, base,
                       unique_from, turn.output_ids)


INF_TOKENS = 1 << 62
