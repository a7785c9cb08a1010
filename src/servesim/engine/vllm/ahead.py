"""Running a vLLM-core rank ahead: passes that only advance the decode cohort, back to back.

Up to and including the pass where a member emits its last token, the cohort's size is
constant and its length sum grows by that size each pass, so such passes are taken a stretch
at a time: their durations as one series (`pass_time.decode_durations`), their end times as one
running sum, the first start at the horizon by bisection; only their block events (a block to
allocate or to cache) are applied pass by pass, and the finishes of a stretch's last pass after
it: the same state changes `run_pass` makes for each of those passes.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections import deque
from collections.abc import Callable

from servesim.engine.vllm.cohort import DecodeCohort
from servesim.engine.handoff import RankHandoff
from servesim.engine.metrics import vllm_metrics
from servesim.engine.pass_time import TimingModel, decode_durations
from servesim.engine.rank import DecodePass, DecodeRun, RankConfig, running_sums
from servesim.engine.request import EngineRequest

FIRST_STRETCH = 1024
"""Quiet passes timed at once at most at first; each further stretch of one run ahead may be
twice as long (up to `LONGEST_STRETCH`), so when a block event that does not fit ends the run,
the passes timed in vain are at most this many or as many as those run. A stretch is also cut
to the passes that could start before the horizon if none were shorter than its first
(`_passes_within`): a stretch costs as much as timing a hundred passes more."""
LONGEST_STRETCH = 4096


class VllmRunAhead:
    """`Rank`'s run-ahead part of `engine.vllm.core.VllmRank` (a mixin over the rank's settings,
    cohort, queues and timing)."""

    config: RankConfig
    cohort: DecodeCohort
    timing: TimingModel
    handoff: RankHandoff
    waiting: deque[EngineRequest]
    explicit: list[EngineRequest]
    total_kv_tokens: int
    _complete: Callable[[list[EngineRequest]], None]

    def can_run_ahead(self, pass_index: int) -> bool:
        """Whether pass `pass_index` would only advance the decode cohort (nothing else)."""
        cohort = self.cohort
        return (not self.waiting and not self.explicit and bool(cohort.members) and not self.handoff.pending
                and cohort.fits(pass_index, self.config.max_batched_tokens))

    def decode_passes(self, pass_index: int, start_ms: float, horizon_ms: float, through_finishes: bool,
                      ends: array) -> DecodeRun:
        """Passes from `pass_index` (which `can_run_ahead`) starting at `start_ms` (before
        `horizon_ms`), back to back while each starts before the horizon and the rank can still
        run ahead; see `Worker.start_pass`. Each pass's end is appended to `ends`."""
        run = DecodeRun(start_ms, start_ms)
        stretch = FIRST_STRETCH
        cohort = self.cohort
        while True:
            last = run.last
            if last is not None and (run.end_ms >= horizon_ms or (last.finished and not through_finishes)
                                     or not cohort.members):
                return run
            to_finish = cohort.next_finish(pass_index) - pass_index + 1  # passes through the next finish
            count = min(to_finish, stretch, self._passes_within(horizon_ms - run.end_ms))
            stretch = min(2 * stretch, LONGEST_STRETCH)
            ran = self._stretch(pass_index, count, count == to_finish, run, horizon_ms, ends)
            if ran < count:
                return run
            pass_index += ran

    def _passes_within(self, span_ms: float) -> int:
        """How many passes of the cohort could start within `span_ms` (> 0) if none were shorter
        than the next one; `LONGEST_STRETCH` when unbounded."""
        cohort = self.cohort
        n, total = len(cohort.members), cohort.length_sum
        first = self.timing.decode(n, total, total // n, self.total_kv_tokens)
        if first <= 0.0 or span_ms / first >= LONGEST_STRETCH:
            return LONGEST_STRETCH
        return int(span_ms / first) + 1

    def _stretch(self, pass_index: int, count: int, finishing: bool, run: DecodeRun, horizon_ms: float,
                 ends: array) -> int:
        """Up to `count` passes where no member finishes but (when `finishing`) the last, those
        that start before the horizon and fit; returns how many ran."""
        cohort = self.cohort
        n = len(cohort.members)
        total = cohort.length_sum
        durations = decode_durations(self.timing, n, range(total, total + count * n, n), self.total_kv_tokens)
        sums = running_sums(run.end_ms, durations)
        ran = bisect_left(sums, horizon_ms, 0, count)  # the passes that start before the horizon
        if not ran:
            return 0
        ran = cohort.block_events_until(pass_index, pass_index + ran, self.config.max_batched_tokens) - pass_index
        if not ran:
            return 0
        metrics = None
        if self.config.record_metrics:
            cohort.advance(ran - 1)
            metrics = vllm_metrics((n, cohort.length_sum, cohort.length_sq_sum), {}, self.waiting)
            cohort.advance()
        else:
            cohort.advance(ran)
        done: list[EngineRequest] = []
        if finishing and ran == count:
            done = cohort.finish(pass_index + ran - 1)
            if done:
                self._complete(done)
        run.add_many(sums, ran, DecodePass(durations[ran - 1], n, done, metrics), ends)
        return ran
