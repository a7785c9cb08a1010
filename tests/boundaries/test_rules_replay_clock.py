"""The replay loop's clock rules (runtime/replay.py) not pinned by test_bounds_replay_loop.py:
the loop does not run ahead unless asked, progress is reported every 1024 instants, a clock
exactly at servesim's limit (MAX_MS) is still processed while one past it is an error (in `run`
and `run_until`), `run_until` never moves the clock back, and with nothing left at all
`run_until(inf)` is a dead end."""

from __future__ import annotations

import pytest
from test_bounds_replay_loop import FakeHandler, FakeSource, TickingHandler, _ahead_worker, _workers

from servesim.errors import SimulationError
from servesim.limits import MAX_MS
from servesim.runtime.replay import INF, Pool, ReplayLoop


def _timed(timers: list[float], cap: float | None = None, progress=None) -> ReplayLoop:
    (w,) = _workers((0, 0))
    source = FakeSource([])
    return ReplayLoop(source, [Pool("p", [w])], FakeHandler(source, w.log, timers), time_cap_ms=cap,
                      progress=progress)


def test_the_loop_does_not_run_ahead_by_default():
    w = _ahead_worker()
    source = FakeSource([(0.0, w, 10.0), (25.0, w, 1.0)])
    loop = ReplayLoop(source, [Pool("p", [w])], FakeHandler(source, w.log))
    assert not loop.run_ahead
    loop.run()
    assert w.horizons == [(0.0, 0.0), (25.0, 25.0)]


def test_progress_is_reported_every_1024_instants_with_the_clock_so_far():
    seen: list[float | None] = []
    loop = _timed([float(t) for t in range(1, 2100)], progress=seen.append)
    assert loop.run() == 2099.0
    assert seen == [1023.0, 2047.0]


def test_no_progress_callback_is_fine():
    assert _timed([float(t) for t in range(1, 1100)]).run() == 1099.0


@pytest.mark.parametrize("runner", ["run", "run_until"])
def test_an_instant_exactly_at_the_clock_limit_is_processed(runner):
    loop = _timed([5.0, MAX_MS])
    if runner == "run":
        assert loop.run() == MAX_MS
    else:
        loop.start()
        assert loop.run_until(MAX_MS) == MAX_MS
    assert loop.handler.timers == []


@pytest.mark.parametrize("runner", ["run", "run_until"])
def test_an_instant_past_the_clock_limit_is_an_error(runner):
    loop = _timed([5.0, MAX_MS * 1.5])
    with pytest.raises(SimulationError, match="beyond"):
        if runner == "run":
            loop.run()
        else:
            loop.start()
            loop.run_until(MAX_MS * 2)
    assert loop.now == 5.0


def test_a_time_cap_stops_before_an_instant_past_the_clock_limit():
    loop = _timed([5.0, MAX_MS * 1.5], cap=10.0)
    assert loop.run() == 5.0


def test_run_until_never_moves_the_clock_back():
    loop = _timed([5.0, 50.0])
    loop.start()
    assert loop.run_until(20.0) == 20.0
    assert loop.run_until(10.0) == 20.0
    assert loop.pools[0].worker_seconds == pytest.approx(0.020)
    assert loop.run_until(50.0) == 50.0 and loop.handler.timers == []


def test_run_until_infinity_with_nothing_left_is_a_dead_end():
    loop = _timed([5.0])
    loop.start()
    with pytest.raises(SimulationError, match="dead end"):
        loop.run_until(INF)
    assert loop.now == 5.0


def test_next_time_is_the_earliest_of_arrivals_passes_and_timers():
    (w,) = _workers((0, 0))
    source = FakeSource([(0.0, w, 30.0), (40.0, w, 1.0)])
    loop = ReplayLoop(source, [Pool("p", [w])], FakeHandler(source, w.log, [35.0]))
    loop.start()
    assert loop.next_time() == 30.0, "the pass ends first"
    loop.run_until(30.0)
    assert loop.next_time() == 35.0, "then the timer"
    loop.run_until(35.0)
    assert loop.next_time() == 40.0, "then the arrival"


# -- settling one instant: whatever a step makes due now is done before the control tick ------

class ChainHandler(TickingHandler):
    """Each step may schedule a timer due at once (`follow`: (step, time) → label of the timer);
    `fire_timers` fires only the timers due when it is called, so a timer scheduled by a timer
    waits for the next round of the instant."""

    def __init__(self, source, log, ticks, follow):
        super().__init__(source, log, ticks)
        self.follow = dict(follow)
        self.inline: list[bool] = []
        self.pending_timers: list[tuple[float, str]] = []
        self.touch: list = []
        """Workers `drive` says it touched when it schedules a timer."""

    def _schedule(self, step: str, now: float) -> None:
        label = self.follow.pop((step, now), None)
        if label is not None:
            self.pending_timers.append((now, label))

    def finish_pass(self, worker, outcome, now, inline):
        self.inline.append(inline)
        super().finish_pass(worker, outcome, now, inline)
        self._schedule("finish", now)
        return False

    def next_timer(self) -> float:
        return min((t for t, _ in self.pending_timers), default=INF)

    def fire_timers(self, now: float) -> bool:
        due = [(t, label) for t, label in self.pending_timers if t == now]
        self.pending_timers = [(t, label) for t, label in self.pending_timers if t != now]
        for _, label in due:
            self.log.append(("timer", now, label))
            self._schedule(label, now)
        return bool(due)

    def release_arrivals(self, now: float):
        touched = super().release_arrivals(now)
        if touched:
            self._schedule("arrive", now)
        return touched

    def drive(self, now: float):
        before = len(self.pending_timers)
        self._schedule("drive", now)
        return list(self.touch) if len(self.pending_timers) > before else []

    def done(self) -> bool:
        return super().done() and not self.pending_timers


def _chained(arrivals, follow, ticks=(5.0,)):
    (w,) = _workers((0, 0))
    source = FakeSource([(t, w, d) for t, d in arrivals])
    handler = ChainHandler(source, w.log, list(ticks), follow)
    handler.touch = [w]
    ReplayLoop(source, [Pool("p", [w])], handler).run()
    return [(kind, label) for kind, t, label in w.log if t == 5.0 and kind in ("timer", "tick")], handler


def test_a_timer_scheduled_by_a_timer_fires_before_the_tick():
    events, _ = _chained([(0.0, 10.0), (5.0, 1.0)], {("arrive", 5.0): "first", ("first", 5.0): "second"})
    assert events == [("timer", "first"), ("timer", "second"), ("tick", "")]


def test_a_timer_scheduled_by_an_arrival_to_a_busy_worker_fires_before_the_tick():
    events, _ = _chained([(0.0, 10.0), (5.0, 1.0)], {("arrive", 5.0): "first"})
    assert events == [("timer", "first"), ("tick", "")]


def test_a_timer_scheduled_by_the_drive_fires_before_the_tick():
    events, _ = _chained([(0.0, 10.0), (5.0, 1.0)], {("drive", 5.0): "driven"})
    assert events == [("timer", "driven"), ("tick", "")]


def test_a_timer_scheduled_by_a_zero_duration_pass_fires_before_the_tick():
    events, handler = _chained([(5.0, 0.0), (50.0, 1.0)], {("finish", 5.0): "after-pass"})
    assert events == [("timer", "after-pass"), ("tick", "")]
    assert handler.inline == [True, False]


def test_completions_are_applied_inline_only_for_zero_duration_passes():
    _, handler = _chained([(0.0, 10.0), (20.0, 0.0), (30.0, 2.0)], {}, ticks=())
    assert handler.inline == [False, True, False]


def test_a_dead_end_under_a_time_cap_is_still_an_error():
    (w,) = _workers((0, 0))
    w.effect = False
    source = FakeSource([(0.0, w, 0.0)])
    loop = ReplayLoop(source, [Pool("p", [w])], FakeHandler(source, w.log), time_cap_ms=100.0)
    with pytest.raises(SimulationError, match="effect-free zero-duration pass with 1 in-flight"):
        loop.run()


# -- only control ticks left: exactly when the loop gives up --------------------------------

class WakingHandler(TickingHandler):
    """Ticks go on while a parked worker holds a request; an arrival or a timer wakes it (its
    next pass then has an effect)."""

    def __init__(self, source, log, ticks, worker, timers=()):
        super().__init__(source, log, ticks)
        self.worker, self.timers, self._woken = worker, list(timers), False

    def release_arrivals(self, now):
        touched = super().release_arrivals(now)
        if touched and now > 0:
            self.worker.effect = True
        return touched

    def fire_timers(self, now):
        fired = super().fire_timers(now)
        if fired:
            self.worker.effect, self.worker.parked, self._woken = True, False, True
        return fired

    def drive(self, now):
        if self._woken:
            self._woken = False
            return [self.worker]
        return []

    def done(self):
        return super().done() and not self.timers


def _waking(arrivals, ticks, timers=()):
    (w,) = _workers((0, 0))
    w.effect = False
    source = FakeSource([(t, w, d) for t, d in arrivals])
    handler = WakingHandler(source, w.log, ticks, w, timers)
    return ReplayLoop(source, [Pool("p", [w])], handler), w.log


def test_ticks_with_an_arrival_still_to_come_are_not_a_dead_end():
    loop, log = _waking([(0.0, 0.0), (10.0, 2.0)], [5.0])
    assert loop.run() == 12.0
    assert ("tick", 5.0, "") in log and [e[:2] for e in log if e[0] == "finish"] == [("finish", 10.0), ("finish", 12.0)]


def test_ticks_with_a_timer_still_to_come_are_not_a_dead_end():
    loop, log = _waking([(0.0, 0.0)], [5.0], timers=[10.0])
    assert loop.run() == 10.0
    assert ("tick", 5.0, "") in log and ("timer", 10.0, "") in log


def test_a_dead_end_with_only_ticks_left_is_found_before_the_first_tick():
    loop, log = _waking([(0.0, 0.0)], [5.0, 10.0, 15.0])
    with pytest.raises(SimulationError, match="with 1 in-flight requests"):
        loop.run()
    assert loop.now == 0.0 and not [e for e in log if e[0] == "tick"]
