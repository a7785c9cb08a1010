"""The replay loop's boundaries (runtime/replay.py module docstring; runtime spec §4: "events
exactly at the cap are processed", worker-seconds stop at the last processed instant): the time
cap is inclusive, completions due at one instant apply in pass-start order, passes start in
(pool, worker) order, timers fire before arrivals and control ticks come last, a zero-duration
pass without effect parks.

The loop is driven by small fakes: a request is (arrival ms, worker, pass duration ms)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servesim.errors import SimulationError
from servesim.runtime.replay import INF, Pool, ReplayLoop


@dataclass(frozen=True)
class Outcome:
    end_ms: float
    has_effect: bool = True
    skipped_ends: tuple[float, ...] = ()


@dataclass(eq=False)
class FakeWorker:
    name: str
    order: tuple[int, int]
    log: list
    queue: list = field(default_factory=list)
    busy: bool = False
    parked: bool = False
    effect: bool = True
    passes: int = 0

    def runnable(self) -> bool:
        return not self.busy and not self.parked and bool(self.queue)

    def start_pass(self, now: float, horizon: float = 0.0) -> Outcome:
        self.passes += 1
        assert self.passes < 100, "the loop keeps starting passes at one instant"
        duration = self.queue[0]
        self.busy = True
        self.log.append(("start", now, self.name))
        return Outcome(now + duration, self.effect)

    def holds_requests(self) -> bool:
        return bool(self.queue)


class FakeSource:
    fixed_arrivals = True

    def __init__(self, arrivals: list[tuple[float, FakeWorker, float]]) -> None:
        self.pending = sorted(arrivals, key=lambda a: a[0])

    def next_ready_time(self) -> float:
        return self.pending[0][0] if self.pending else INF


class FakeHandler:
    isolated_workers = False

    def __init__(self, source: FakeSource, log: list, timers: list[float] | None = None) -> None:
        self.source = source
        self.log = log
        self.timers = sorted(timers or [])
        self.open = 0

    def release_arrivals(self, now: float) -> list[FakeWorker]:
        touched = []
        while self.source.pending and self.source.pending[0][0] == now:
            _, worker, duration = self.source.pending.pop(0)
            worker.queue.append(duration)
            worker.parked = False
            self.open += 1
            self.log.append(("arrive", now, worker.name))
            touched.append(worker)
        return touched

    def finish_pass(self, worker: FakeWorker, outcome: Outcome, now: float, inline: bool) -> bool:
        worker.busy = False
        if outcome.has_effect:
            worker.queue.pop(0)
            self.open -= 1
            self.log.append(("finish", now, worker.name))
        return False

    def next_timer(self) -> float:
        return self.timers[0] if self.timers else INF

    def fire_timers(self, now: float) -> bool:
        fired = False
        while self.timers and self.timers[0] == now:
            self.timers.pop(0)
            self.log.append(("timer", now, ""))
            fired = True
        return fired

    def drive(self, now: float) -> list[FakeWorker]:
        return []

    def next_control(self) -> float:
        return INF

    def control(self, now: float) -> list[FakeWorker]:
        return []

    def in_flight(self) -> int:
        return self.open

    def done(self) -> bool:
        return not self.source.pending and self.open == 0 and not self.timers


def _loop(arrivals, workers, cap=None, timers=None):
    log = workers[0].log
    source = FakeSource(arrivals)
    handler = FakeHandler(source, log, timers)
    pools: dict[int, list[FakeWorker]] = {}
    for w in workers:
        pools.setdefault(w.order[0], []).append(w)
    loop = ReplayLoop(source, [Pool(str(k), v) for k, v in sorted(pools.items())], handler, time_cap_ms=cap)
    return loop, log


def _workers(*orders):
    log: list = []
    return [FakeWorker(f"w{p}.{i}", (p, i), log) for p, i in orders]


def test_an_instant_exactly_at_the_time_cap_is_processed():
    (w,) = _workers((0, 0))
    loop, log = _loop([(0.0, w, 10.0), (10.0, w, 5.0), (20.0, w, 1.0)], [w], cap=10.0)
    assert loop.run() == 10.0
    assert ("finish", 10.0, "w0.0") in log and ("arrive", 10.0, "w0.0") in log, "t = cap is within the cap"
    assert all(t <= 10.0 for _, t, _ in log), "nothing after the cap"


def test_the_cap_stops_just_before_a_later_instant():
    (w,) = _workers((0, 0))
    loop, log = _loop([(0.0, w, 10.0)], [w], cap=9.999)
    assert loop.run() == 0.0
    assert log == [("arrive", 0.0, "w0.0"), ("start", 0.0, "w0.0")]


def test_run_until_processes_the_instant_at_its_bound():
    (w,) = _workers((0, 0))
    loop, log = _loop([(0.0, w, 10.0)], [w])
    loop.start()
    assert loop.run_until(10.0) == 10.0
    assert log[-1] == ("finish", 10.0, "w0.0")


def test_run_until_does_not_pass_its_bound():
    (w,) = _workers((0, 0))
    loop, log = _loop([(0.0, w, 10.0)], [w])
    loop.start()
    assert loop.run_until(9.5) == 9.5
    assert ("finish", 10.0, "w0.0") not in log


def test_passes_start_in_pool_then_worker_order():
    workers = _workers((1, 0), (0, 2), (0, 1), (1, 3))
    arrivals = [(5.0, w, 1.0) for w in workers]
    loop, log = _loop(arrivals, workers)
    loop.run()
    starts = [name for kind, t, name in log if kind == "start" and t == 5.0]
    assert starts == ["w0.1", "w0.2", "w1.0", "w1.3"]


def test_completions_at_one_instant_apply_in_pass_start_order():
    b, a = _workers((0, 1), (0, 0))
    # b's pass starts first (t=0, 10 ms), a's later (t=4, 6 ms): both end at t=10.
    loop, log = _loop([(0.0, b, 10.0), (4.0, a, 6.0)], [b, a])
    loop.run()
    finishes = [name for kind, t, name in log if kind == "finish"]
    assert finishes == ["w0.1", "w0.0"], "start order, not worker order"


def test_timers_fire_before_the_arrivals_of_their_instant():
    (w,) = _workers((0, 0))
    loop, log = _loop([(5.0, w, 1.0)], [w], timers=[5.0])
    loop.run()
    assert [kind for kind, t, _ in log if t == 5.0][:2] == ["timer", "arrive"]


def test_a_zero_duration_pass_without_effect_parks_its_worker():
    (w,) = _workers((0, 0))
    w.effect = False
    loop, _ = _loop([(0.0, w, 0.0)], [w])
    with pytest.raises(SimulationError, match="effect-free zero-duration pass with 1 in-flight"):
        loop.run()
    assert w.parked and w.passes == 1


def test_a_zero_duration_pass_with_effect_is_applied_at_once():
    (w,) = _workers((0, 0))
    loop, log = _loop([(0.0, w, 0.0), (0.0, w, 0.0)], [w])
    assert loop.run() == 0.0
    assert [k for k, _, _ in log] == ["arrive", "arrive", "start", "finish", "start", "finish"]


def test_worker_seconds_integrate_to_the_last_instant():
    workers = _workers((0, 0), (0, 1))
    loop, _ = _loop([(0.0, workers[0], 250.0), (0.0, workers[1], 1000.0)], workers)
    assert loop.run() == 1000.0
    assert loop.pools[0].worker_seconds == pytest.approx(2.0)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 30), st.integers(0, 2), st.integers(1, 12)), min_size=1, max_size=12),
       st.one_of(st.none(), st.integers(0, 40)))
def test_events_are_ordered_and_the_cap_is_inclusive(requests, cap):
    """Any workload: finishes never go back in time, a worker's passes do not overlap, at one
    instant completions follow their start order, and with a cap every instant up to it (none
    after) is processed."""
    workers = _workers((0, 0), (0, 1), (1, 0))
    arrivals = [(float(t), workers[w], float(d)) for t, w, d in requests]
    loop, log = _loop(arrivals, workers, cap=None if cap is None else float(cap))
    loop.run()
    times = [t for _, t, _ in log]
    assert times == sorted(times)
    started: dict[str, list[float]] = {}
    order: list[str] = []
    for kind, t, name in log:
        if kind == "start":
            started.setdefault(name, []).append(t)
            order.append(name)
    for w in workers:  # each worker runs its requests back to back in arrival order
        ends = [t for kind, t, name in log if kind == "finish" and name == w.name]
        assert len(ends) <= len(started.get(w.name, []))
    if cap is not None:
        assert all(t <= cap for t in times)
        assert all(("arrive", float(t), workers[w].name) in log for t, w, _ in requests if t <= cap)


class TickingHandler(FakeHandler):
    """A handler with control ticks at given instants."""

    def __init__(self, source: FakeSource, log: list, ticks: list[float]) -> None:
        super().__init__(source, log)
        self.ticks = sorted(ticks)

    def next_control(self) -> float:
        return self.ticks[0] if self.ticks else INF

    def control(self, now: float) -> list[FakeWorker]:
        self.ticks.pop(0)
        self.log.append(("tick", now, ""))
        return []

    def done(self) -> bool:
        return not self.source.pending and self.open == 0


def _ticking(arrivals, worker, ticks):
    source = FakeSource(arrivals)
    handler = TickingHandler(source, worker.log, ticks)
    return ReplayLoop(source, [Pool("p", [worker])], handler), worker.log


def test_a_control_tick_comes_after_everything_else_of_its_instant():
    (w,) = _workers((0, 0))
    loop, log = _ticking([(0.0, w, 10.0), (5.0, w, 1.0)], w, [5.0, 100.0])
    loop.run()
    assert [k for k, t, _ in log if t == 5.0] == ["arrive", "tick"]


def test_no_control_tick_once_the_workload_is_done():
    (w,) = _workers((0, 0))
    loop, log = _ticking([(0.0, w, 10.0)], w, [10.0])
    assert loop.run() == 10.0
    assert ("tick", 10.0, "") not in log


def test_the_dead_end_message_says_whether_any_worker_holds_requests():
    idle, stuck = _workers((0, 0), (0, 1))
    stuck.effect = False
    loop, _ = _loop([(0.0, stuck, 0.0)], [idle, stuck])
    with pytest.raises(SimulationError, match="detected an effect-free zero-duration pass"):
        loop.run()


# -- run ahead: the horizon and the instants a worker ran through ------------------------------


@dataclass(eq=False)
class AheadWorker(FakeWorker):
    """Records the horizon each pass is given; its passes run through `skipped` instants."""

    horizons: list = field(default_factory=list)
    skipped: tuple[float, ...] = ()

    def start_pass(self, now: float, horizon: float = 0.0) -> Outcome:
        self.horizons.append((now, horizon))
        outcome = super().start_pass(now, horizon)
        return Outcome(outcome.end_ms, outcome.has_effect, tuple(now + s for s in self.skipped))


def _ahead(arrivals, worker, cap=None, timers=None, run_ahead=True):
    source = FakeSource(arrivals)
    handler = FakeHandler(source, worker.log, timers)
    return ReplayLoop(source, [Pool("p", [worker])], handler, time_cap_ms=cap, run_ahead=run_ahead)


def _ahead_worker(skipped=()):
    return AheadWorker("w", (0, 0), [], skipped=skipped)


def test_the_horizon_is_the_next_arrival():
    w = _ahead_worker()
    _ahead([(0.0, w, 10.0), (25.0, w, 1.0)], w).run()
    assert w.horizons == [(0.0, 25.0), (25.0, INF)]


def test_the_horizon_is_the_next_timer_when_it_comes_first():
    w = _ahead_worker()
    _ahead([(0.0, w, 10.0), (25.0, w, 1.0)], w, timers=[15.0]).run()
    assert w.horizons[0] == (0.0, 15.0)


@pytest.mark.parametrize(("cap", "horizon"), [(7.0, 7.0), (25.0, 25.0), (24.0, 24.0), (30.0, 25.0)])
def test_the_horizon_never_passes_the_time_cap(cap, horizon):
    w = _ahead_worker()
    _ahead([(0.0, w, 10.0), (25.0, w, 1.0)], w, cap=cap).run()
    assert w.horizons[0] == (0.0, horizon)


def test_without_run_ahead_the_horizon_is_now():
    w = _ahead_worker()
    _ahead([(0.0, w, 10.0), (25.0, w, 1.0)], w, run_ahead=False).run()
    assert w.horizons == [(0.0, 0.0), (25.0, 25.0)]


@pytest.mark.parametrize(("cap", "now"), [(7.0, 6.0), (6.0, 6.0), (9.0, 9.0), (2.9, 0.0)])
def test_under_a_cap_the_clock_stops_at_the_last_ran_through_instant(cap, now):
    # One pass of 12 ms ran ahead through 3, 6 and 9; the cap cuts it: worker-seconds integrate
    # to the last of those instants at or before the cap (inclusive), as if the loop had
    # stopped at each.
    w = _ahead_worker(skipped=(3.0, 6.0, 9.0))
    loop = _ahead([(0.0, w, 12.0)], w, cap=cap)
    assert loop.run() == now
    assert loop.pools[0].worker_seconds == pytest.approx(now / 1000)


def test_ran_through_instants_count_once_the_pass_ends():
    w = _ahead_worker(skipped=(3.0, 6.0, 9.0))
    loop = _ahead([(0.0, w, 12.0)], w)
    assert loop.run() == 12.0
    assert loop.pools[0].worker_seconds == pytest.approx(0.012)


# -- only control ticks left --------------------------------------------------------------------


def _stuck_with_ticks(cap):
    """A parked worker holds a request (a zero-duration pass without effect) while ticks go on."""
    (w,) = _workers((0, 0))
    w.effect = False
    source = FakeSource([(0.0, w, 0.0)])
    handler = TickingHandler(source, w.log, [10.0 * k for k in range(1, 30)])
    return ReplayLoop(source, [Pool("p", [w])], handler, time_cap_ms=cap), w.log


def test_only_ticks_left_without_a_cap_is_a_dead_end():
    loop, _ = _stuck_with_ticks(None)
    with pytest.raises(SimulationError):
        loop.run()


@pytest.mark.parametrize(("cap", "last"), [(25.0, 20.0), (30.0, 30.0)])
def test_only_ticks_left_under_a_cap_runs_to_the_cap(cap, last):
    loop, log = _stuck_with_ticks(cap)
    assert loop.run() == last, "the last tick at or before the cap (inclusive)"
    assert [t for kind, t, _ in log if kind == "tick"] == [t for t in (10.0, 20.0, 30.0) if t <= cap]
