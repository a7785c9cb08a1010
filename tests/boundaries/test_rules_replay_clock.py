"""The replay loop's clock rules (runtime/replay.py) not pinned by test_bounds_replay_loop.py:
the loop does not run ahead unless asked, progress is reported every 1024 instants, a clock
exactly at servesim's limit (MAX_MS) is still processed while one past it is an error (in `run`
and `run_until`), `run_until` never moves the clock back, and with nothing left at all
`run_until(inf)` is a dead end."""

from __future__ import annotations

import pytest
from test_bounds_replay_loop import FakeHandler, FakeSource, _ahead_worker, _workers

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
