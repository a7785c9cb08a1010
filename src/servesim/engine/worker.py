"""A worker (engine instance): its attention-DP ranks behind one pass barrier.

Every rank that has work runs its own pass from the same start; the worker's pass ends at the
slowest rank's end, and every token of the pass is stamped with that end. The worker keeps the
end time of every pass it ran (`pass_ends`), which is how request timelines are stored: a
request records the indices of the passes that gave it a token.

With async scheduling (servesim extension) the engine plans its next pass while the running one
executes, so a request reaching a busy worker is held in an inbox until the next pass has been
planned: it joins the pass after next. A worker with nothing planned takes it at once.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from servesim.engine.busy import BusyTime
from servesim.engine.request import EngineRequest
from servesim.engine.interface import HandoffRank
from servesim.engine.rank import RankPass


@dataclass(slots=True, eq=False, repr=False)
class WorkerPass:
    """One pass of a worker: when it ends and what each rank did."""

    start_ms: float
    end_ms: float
    index: int
    ranks: list[tuple[int, RankPass]]
    has_effect: bool
    skipped_ends: Sequence[float] = ()
    """End times of the passes before the last, when the worker ran several back to back."""
    early_finishes: Sequence[tuple[float, list[EngineRequest]]] = ()
    """Requests finished by those earlier passes, with the pass end (see `Worker.start_pass`)."""


class Worker:
    """One logical worker with `len(ranks)` scheduler ranks."""

    def __init__(self, worker_id: int, ranks: list[HandoffRank], first_scheduler_id: int, pool_index: int = 0, *,
                 async_scheduling: bool = False) -> None:
        self.worker_id = worker_id
        self.order = (pool_index, worker_id)
        """Pass-start order among workers at one instant."""
        self.ranks = ranks
        self._lone = ranks[0] if len(ranks) == 1 else None
        """The rank, when the worker has only one (its passes take a shorter path)."""
        self.first_scheduler_id = first_scheduler_id
        self.pass_ends = array("d")
        self.busy = False
        self.parked = False
        self._busy = BusyTime(self.pass_ends)
        self._interval = ranks[0].config.prefill_schedule_interval if len(ranks) > 1 else 1
        """vLLM's `prefill_schedule_interval` (upstream 0.13; attention DP only)."""
        self._stretch = 0
        """Index of the first pass since the worker was last idle (what the interval counts from)."""
        self.held: list[tuple[int, EngineRequest]] = []
        """(rank, request) routed to a rank holding requests, until a pass the interval opens."""
        self.async_scheduling = async_scheduling
        self.inbox: list[tuple[int, EngineRequest]] = []
        """Async scheduling: (rank, request) that reached the worker during its running pass."""
        self.host_ranks: list[Any] = [r for r in ranks if getattr(r, "host", None) is not None]
        """Ranks with a host KV tier (`engine.vllm.offload`): told each pass's start, and they
        wake the worker when a load from host memory completes."""

    @property
    def busy_ms(self) -> float:
        """Simulated time spent in passes (the sum of pass durations)."""
        return self._busy.total()

    @busy_ms.setter
    def busy_ms(self, value: float) -> None:
        self._busy.settle(value)

    def enqueue(self, rank: int, request: EngineRequest) -> None:
        """Route a request to one of this worker's ranks (wakes a parked worker)."""
        if self._interval > 1 and self.ranks[rank].has_work():
            self.held.append((rank, request))
        elif self.busy and self.async_scheduling:
            self.inbox.append((rank, request))
        else:
            self.ranks[rank].enqueue(request)
        self.parked = False

    def abort(self, rank: int, request: EngineRequest) -> None:
        """Drop a request between passes (its client gave up), wherever it is on this worker."""
        if (rank, request) in self.held:
            self.held.remove((rank, request))
        elif (rank, request) in self.inbox:
            self.inbox.remove((rank, request))
        else:
            self.ranks[rank].abort(request, len(self.pass_ends))

    def runnable(self) -> bool:
        return not self.busy and not self.parked and self.holds_requests()

    def holds_requests(self) -> bool:
        if self.inbox or self.held:
            return True
        for rank in self.ranks:
            if rank.has_work():
                return True
        return False

    def start_pass(self, now: float, horizon: float = 0.0, through_finishes: bool = False,
                   run_on: bool = False) -> WorkerPass:
        """Run one pass of every rank with work, starting at `now`.

        With a `horizon` beyond `now` — a time before which nothing outside this worker can
        change its work — a lone rank that only decodes runs further passes back to back, as
        long as each starts before the horizon (what happens during a pass reaches the rank at
        its end, when the next pass is planned); they are exactly the passes the rank would
        have run one event at a time. The run stops at a pass that finishes a request unless
        `through_finishes` (nobody needs to hear of a completion before the horizon); then the
        earlier completions travel in `WorkerPass.early_finishes`. With `run_on` too (nobody
        watches the passes one by one), a full pass that only admits and advances requests may
        open such a run: its admissions and first tokens travel with the run's last pass.
        """
        if self.inbox:
            return self._pass_then_inbox(now)
        lone = self._lone
        if lone is None:
            return self._one_pass(now)
        if horizon > now and lone.can_run_ahead(len(self.pass_ends)):
            return self._run_ahead(now, horizon, through_finishes)
        outcome = self._lone_pass(lone, now) if lone.has_work() else self._one_pass(now)
        if run_on and now < outcome.end_ms < horizon:
            return self._run_on(outcome, horizon)
        return outcome

    def _pass_then_inbox(self, now: float) -> WorkerPass:
        """Async scheduling: plan the next pass without the inbox (unless nothing else is
        planned), then hand the inbox to the ranks for the pass after."""
        inbox, self.inbox = self.inbox, []
        if any(rank.has_work() for rank in self.ranks):
            outcome = self._one_pass(now)
            outcome.has_effect = True  # the ranks' queues changed
            self._deliver(inbox)
            return outcome
        self._deliver(inbox)
        return self._one_pass(now)

    def _deliver(self, inbox: list[tuple[int, EngineRequest]]) -> None:
        for rank, request in inbox:
            self.ranks[rank].enqueue(request)

    def _run_ahead(self, now: float, horizon: float, through_finishes: bool) -> WorkerPass:
        first = len(self.pass_ends)
        run = self.ranks[0].decode_passes(first, now, horizon, through_finishes, self.pass_ends)
        assert run.last is not None
        self._busy.started(first, now)
        result = run.last.as_rank_pass()
        if result.metrics is not None:
            result.metrics.wall_time_secs = (run.end_ms - run.last_start_ms) / 1000
        self.busy = True
        return WorkerPass(now, run.end_ms, first, [(0, result)], True, self.pass_ends[first:-1], run.early)

    def _run_on(self, first: WorkerPass, horizon: float) -> WorkerPass:
        """Decode-only passes after the full pass `first`, as one outcome (see `start_pass`)."""
        rank = self.ranks[0]
        _, result = first.ranks[0]
        if result.rejected or result.held or not rank.can_run_ahead(len(self.pass_ends)):
            return first
        run = rank.decode_passes(len(self.pass_ends), first.end_ms, horizon, True, self.pass_ends)
        last = run.last
        assert last is not None
        first.early_finishes = [(first.end_ms, result.finished), *run.early] if result.finished else run.early
        result.finished = last.finished
        result.prefill_ms, result.decode_ms = 0.0, last.duration_ms
        result.scheduled_tokens = result.emitted = last.emitted
        first.skipped_ends = self.pass_ends[first.index:-1]
        first.end_ms = run.end_ms
        first.has_effect = True
        return first

    def _one_pass(self, now: float) -> WorkerPass:
        if self.host_ranks:
            self._tell_time(now)
        index = len(self.pass_ends)
        if self.held or self._interval > 1:
            self._release_held(index, now)
        end = now
        done: list[tuple[int, RankPass]] = []
        effect = False
        metrics = False
        for rank_index, rank in enumerate(self.ranks):
            if rank.has_work():
                result = rank.run_pass(index)
                begin = result.ready_ms if result.ready_ms > now else now
                rank_end = (begin + result.prefill_ms) + result.decode_ms
                if rank_end > end:
                    end = rank_end
                effect = effect or result.has_effect
                metrics = metrics or result.metrics is not None
                done.append((rank_index, result))
        self.pass_ends.append(end)
        self._busy.started(index, now)
        if metrics:
            for _, result in done:
                if result.metrics is not None:
                    result.metrics.wall_time_secs = (end - now) / 1000
        self.busy = True
        return WorkerPass(now, end, index, done, effect)

    def _release_held(self, index: int, now: float) -> None:
        """`prefill_schedule_interval` N (upstream 0.13): the held requests reach their ranks
        before every N-th pass since the worker was last idle; before any pass, those of a
        rank that holds nothing."""
        if index == 0 or now > self.pass_ends[-1]:
            self._stretch = index
        opened = (index - self._stretch) % self._interval == 0
        held, self.held = self.held, []
        for rank, request in held:
            if opened or not self.ranks[rank].has_work():
                self.ranks[rank].enqueue(request)
            else:
                self.held.append((rank, request))

    def _lone_pass(self, rank: HandoffRank, now: float) -> WorkerPass:
        """`_one_pass` of a worker whose one rank has work."""
        if self.host_ranks:
            self._tell_time(now)
        index = len(self.pass_ends)
        result = rank.run_pass(index)
        begin = result.ready_ms if result.ready_ms > now else now
        end = (begin + result.prefill_ms) + result.decode_ms
        if end < now:
            end = now
        self.pass_ends.append(end)
        self._busy.started(index, now)
        if result.metrics is not None:
            result.metrics.wall_time_secs = (end - now) / 1000
        self.busy = True
        return WorkerPass(now, end, index, [(0, result)], result.has_effect)

    def _tell_time(self, now: float) -> None:
        for rank in self.host_ranks:
            rank.now = now

    def next_load_ms(self) -> float:
        """When a load from host memory completes on one of the ranks (inf if none)."""
        return min(rank.next_load_ms() for rank in self.host_ranks) if self.host_ranks else float("inf")

    def loads_done(self, now: float) -> bool:
        """Whether loads from host memory completed by `now` (each reported once); unparks."""
        done = False
        for rank in self.host_ranks:
            if rank.loads_done(now):
                done = True
        if done:
            self.parked = False
        return done

    def finish_pass(self) -> None:
        self.busy = False
