"""A worker (engine instance): its attention-DP ranks behind one pass barrier.

Every rank that has work runs its own pass from the same start; the worker's pass ends at the
slowest rank's end, and every token of the pass is stamped with that end. The worker keeps the
end time of every pass it ran (`pass_ends`), which is how request timelines are stored: a
request records the indices of the passes that gave it a token.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field

from servesim.engine.request import EngineRequest
from servesim.engine.rank import Rank, RankPass


@dataclass(slots=True)
class WorkerPass:
    """One pass of a worker: when it ends and what each rank did."""

    start_ms: float
    end_ms: float
    index: int
    ranks: list[tuple[int, RankPass]]
    has_effect: bool
    skipped_ends: list[float] = field(default_factory=list)
    """End times of the passes before the last, when the worker ran several back to back."""


class Worker:
    """One logical worker with `len(ranks)` scheduler ranks."""

    def __init__(self, worker_id: int, ranks: list[Rank], first_scheduler_id: int, pool_index: int = 0) -> None:
        self.worker_id = worker_id
        self.order = (pool_index, worker_id)
        """Pass-start order among workers at one instant."""
        self.ranks = ranks
        self.first_scheduler_id = first_scheduler_id
        self.pass_ends = array("d")
        self.busy = False
        self.parked = False
        self.busy_ms = 0.0
        """Simulated time spent in passes (the sum of pass durations)."""

    def enqueue(self, rank: int, request: EngineRequest) -> None:
        """Route a request to one of this worker's ranks (wakes a parked worker)."""
        self.ranks[rank].enqueue(request)
        self.parked = False

    def runnable(self) -> bool:
        return not self.busy and not self.parked and any(r.has_work() for r in self.ranks)

    def holds_requests(self) -> bool:
        return any(r.has_work() for r in self.ranks)

    def start_pass(self, now: float, horizon: float = 0.0) -> WorkerPass:
        """Run one pass of every rank with work, starting at `now`.

        With a `horizon` beyond `now` — a time before which nothing outside this worker can
        change its work — a lone rank that only decodes runs further passes back to back, as
        long as each ends by the horizon and none finishes a request; they are exactly the
        passes the rank would have run one event at a time.
        """
        if horizon > now and len(self.ranks) == 1 and self.ranks[0].can_run_ahead(len(self.pass_ends)):
            return self._run_ahead(now, horizon)
        return self._one_pass(now)

    def _run_ahead(self, now: float, horizon: float) -> WorkerPass:
        rank = self.ranks[0]
        first = index = len(self.pass_ends)
        start = end = now
        while True:
            start = end
            result = rank.run_pass(index)
            end = (start + result.prefill_ms) + result.decode_ms
            self.pass_ends.append(end)
            index += 1
            if result.finished or not rank.can_run_ahead(index) or end + rank.next_decode_ms() > horizon:
                break
        self.busy_ms += end - now
        if result.metrics is not None:
            result.metrics.wall_time_secs = (end - start) / 1000
        self.busy = True
        return WorkerPass(now, end, first, [(0, result)], True, self.pass_ends[first:-1].tolist())

    def _one_pass(self, now: float) -> WorkerPass:
        index = len(self.pass_ends)
        end = now
        done: list[tuple[int, RankPass]] = []
        effect = False
        for rank_index, rank in enumerate(self.ranks):
            if not rank.has_work():
                continue
            result = rank.run_pass(index)
            rank_end = (now + result.prefill_ms) + result.decode_ms
            if rank_end > end:
                end = rank_end
            effect = effect or result.has_effect
            done.append((rank_index, result))
        self.pass_ends.append(end)
        self.busy_ms += end - now
        for _, result in done:
            if result.metrics is not None:
                result.metrics.wall_time_secs = (end - now) / 1000
        self.busy = True
        return WorkerPass(now, end, index, done, effect)

    def finish_pass(self) -> None:
        self.busy = False
