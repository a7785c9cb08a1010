"""The per-worker replay (runtime/isolated.py) against the shared replay loop (runtime/replay.py):
for workers that cannot affect each other both visit the same instants, start the same passes
(a pass takes every request queued at its start, so an arrival at the instant a pass ends joins
it) and integrate the same worker-seconds, under any routing window and time cap (inclusive);
an instant exactly at MAX_MS is processed, one past it is an error; a worker stuck with requests
is a dead end unless another was capped; no run-ahead unless asked; progress every 1024 steps."""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import servesim.runtime.isolated as isolated
from servesim.errors import SimulationError
from servesim.limits import MAX_MS
from servesim.runtime.isolated import IsolatedReplay
from servesim.runtime.replay import INF, Pool, ReplayLoop


@dataclass(frozen=True)
class Outcome:
    end_ms: float
    served: int
    has_effect: bool = True
    skipped_ends: tuple[float, ...] = ()


@dataclass(eq=False)
class BatchWorker:
    """A pass serves every queued request and lasts as long as the longest of them."""

    name: str
    order: tuple[int, int]
    log: list
    queue: list = field(default_factory=list)
    busy: bool = False
    parked: bool = False
    effect: bool = True
    pass_ends: array = field(default_factory=lambda: array("d"))
    horizons: list = field(default_factory=list)
    flags: set = field(default_factory=set)

    def runnable(self) -> bool:
        return not self.busy and not self.parked and bool(self.queue)

    def start_pass(self, now, horizon=0.0, through_finishes=False, run_on=False) -> Outcome:
        self.horizons.append((now, horizon))
        self.flags.add((through_finishes, run_on))
        assert sum(1 for t, _ in self.horizons[-50:] if t == now) < 50, "the replay keeps starting passes at one instant"
        duration = max(self.queue) if self.effect else 0.0
        self.busy = True
        self.pass_ends.append(now + duration)
        self.log.append(("start", now, self.name, len(self.queue)))
        return Outcome(now + duration, len(self.queue), self.effect)

    def enqueue(self, rank: int, request: float) -> None:
        self.queue.append(request)
        self.parked = False

    def holds_requests(self) -> bool:
        return bool(self.queue)


class Handler:
    """Both loops' handler: arrivals are (time, worker, duration), released or routed ahead."""

    def __init__(self, arrivals) -> None:
        self.pending = sorted(arrivals, key=lambda a: a[0])
        self.open = 0
        self.inline: list[bool] = []
        self.early: list[tuple[str, float]] = []

    # the shared loop
    def next_ready_time(self) -> float:
        return self.pending[0][0] if self.pending else INF

    def release_arrivals(self, now):
        touched = []
        while self.pending and self.pending[0][0] == now:
            _, worker, duration = self.pending.pop(0)
            worker.enqueue(0, duration)
            self.open += 1
            touched.append(worker)
        return touched

    def next_timer(self) -> float:
        return INF

    def fire_timers(self, now) -> bool:
        return False

    def drive(self, now):
        return []

    def next_control(self) -> float:
        return INF

    def control(self, now):
        return []

    def done(self) -> bool:
        return not self.pending and self.open == 0

    # the per-worker replay
    def route_ahead(self, until, limit):
        routed = []
        while self.pending and self.pending[0][0] <= until and (
                len(routed) < limit or self.pending[0][0] == routed[-1][0]):
            t, worker, duration = self.pending.pop(0)
            routed.append((t, worker, 0, duration))
            self.open += 1
        bound = self.pending[0][0] if self.pending and self.pending[0][0] <= until else INF
        return routed, bound

    def finish_early(self, worker, outcome, until) -> None:
        self.early.append((worker.name, until))

    # both
    def finish_pass(self, worker, outcome, now, inline) -> bool:
        self.inline.append(inline)
        worker.busy = False
        if outcome.has_effect:
            del worker.queue[:outcome.served]
            self.open -= outcome.served
            worker.log.append(("finish", now, worker.name, outcome.served))
        return False

    def in_flight(self) -> int:
        return self.open


def _run(kind, arrivals, workers=3, cap=None, window=None, **kw):
    log: list = []
    ws = [BatchWorker(f"w{i}", (0, i), log) for i in range(workers)]
    handler = Handler([(t, ws[w], d) for t, w, d in arrivals])
    pool = Pool("p", ws)
    if kind == "shared":
        loop = ReplayLoop(handler, [pool], handler, time_cap_ms=cap, **kw)
    else:
        loop = IsolatedReplay([pool], handler, cap, **kw)
    if window is None:
        now = loop.run()
    else:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(isolated, "ROUTE_WINDOW", window)
            now = loop.run()
    return now, pool.worker_seconds, log, handler, ws


def _per_worker(log, cap):
    return sorted((e for e in log if cap is None or e[1] <= cap), key=lambda e: (e[2], e[1], e[0]))


arrival = st.tuples(st.integers(0, 30).map(float), st.integers(0, 2), st.integers(1, 6).map(float))


@settings(max_examples=60, deadline=None)
@given(st.lists(arrival, min_size=1, max_size=14), st.one_of(st.none(), st.integers(0, 40).map(float)),
       st.integers(1, 4))
def test_the_per_worker_replay_equals_the_shared_loop(arrivals, cap, window):
    now, seconds, log, _, _ = _run("shared", arrivals, cap=cap)
    i_now, i_seconds, i_log, _, _ = _run("isolated", arrivals, cap=cap, window=window)
    assert i_now == now
    assert i_seconds == pytest.approx(seconds, abs=1e-12)
    assert _per_worker(i_log, cap) == _per_worker(log, cap)


def test_an_arrival_at_the_end_of_a_pass_joins_the_next_one_across_windows():
    arrivals = [(0.0, 0, 5.0), (0.0, 0, 2.0), (5.0, 0, 3.0), (5.0, 1, 1.0)]
    for window in (1, 2, 3, 8192):
        now, seconds, log, _, _ = _run("isolated", arrivals, workers=2, window=window)
        assert [e for e in log if e[0] == "start"] == [("start", 0.0, "w0", 2), ("start", 5.0, "w0", 1),
                                                       ("start", 5.0, "w1", 1)]
        assert now == 8.0 and seconds == pytest.approx(2 * 8.0 / 1000)


@pytest.mark.parametrize(("cap", "last", "finished"), [(5.0, 5.0, 1), (4.0, 0.0, 0), (8.0, 8.0, 2)])
def test_an_instant_exactly_at_the_cap_is_processed(cap, last, finished):
    now, seconds, log, handler, _ = _run("isolated", [(0.0, 0, 5.0), (5.0, 0, 3.0)], workers=1, cap=cap)
    assert now == last and seconds == pytest.approx(last / 1000)
    assert sum(1 for e in log if e[0] == "finish") == finished
    assert handler.early == ([("w0", cap)] if cap < 8.0 else [])


def test_an_instant_at_max_ms_is_processed_and_one_past_it_is_an_error():
    now, _, log, _, _ = _run("isolated", [(0.0, 0, 1.0), (MAX_MS, 0, 0.0 + 1e-3)], workers=1, cap=MAX_MS)
    assert ("start", MAX_MS, "w0", 1) in log
    with pytest.raises(SimulationError, match="beyond"):
        _run("isolated", [(0.0, 0, 1.0), (MAX_MS * 1.5, 0, 1.0)], workers=1)


def test_a_stuck_worker_is_a_dead_end_unless_another_was_capped():
    def stuck(cap):
        log: list = []
        ws = [BatchWorker("w0", (0, 0), log), BatchWorker("w1", (0, 1), log, effect=False)]
        handler = Handler([(0.0, ws[0], 10.0), (1.0, ws[1], 1.0)])
        return IsolatedReplay([Pool("p", ws)], handler, cap).run()

    with pytest.raises(SimulationError, match="effect-free zero-duration pass with 1 in-flight"):
        stuck(None)
    with pytest.raises(SimulationError):
        stuck(20.0)
    assert stuck(5.0) == 1.0, "the capped worker's pass was cut: not a dead end"


def test_completions_are_inline_only_for_zero_duration_passes():
    _, _, _, handler, _ = _run("isolated", [(0.0, 0, 2.0), (5.0, 0, 1.0)], workers=1)
    assert handler.inline == [False, False]


def test_no_run_ahead_unless_asked():
    _, _, _, _, ws = _run("isolated", [(0.0, 0, 2.0), (5.0, 0, 1.0)], workers=1)
    assert ws[0].horizons == [(0.0, 0.0), (5.0, 5.0)]
    _, _, _, _, ws = _run("isolated", [(0.0, 0, 2.0), (5.0, 0, 1.0)], workers=1, run_ahead=True)
    assert ws[0].horizons == [(0.0, 5.0), (5.0, INF)]
    _, _, _, _, ws = _run("isolated", [(0.0, 0, 2.0), (5.0, 0, 1.0)], workers=1, cap=3.0, run_ahead=True)
    assert ws[0].horizons == [(0.0, 3.0)], "never past the cap"


def test_progress_is_reported_every_1024_steps_of_a_worker():
    seen: list = []
    arrivals = [(float(2 * t), 0, 1.0) for t in range(1100)]
    log: list = []
    w = BatchWorker("w0", (0, 0), log)
    handler = Handler([(t, w, d) for t, _, d in arrivals])
    IsolatedReplay([Pool("p", [w])], handler, None, progress=seen.append).run()
    assert seen == [None, None], "2200 steps: at 1024 and 2048"


@pytest.mark.parametrize("window", [1, 2, 8192])
def test_a_request_queued_during_a_pass_waits_for_an_unrouted_arrival_at_its_end(window):
    # w0 runs 0-5; a request queued at 3 and one arriving at 5 (routed in a later window) must
    # start together at 5, as in the shared loop (arrivals are released before passes start)
    arrivals = [(0.0, 0, 5.0), (3.0, 0, 2.0), (5.0, 0, 4.0)]
    expected = _run("shared", arrivals, workers=1)
    got = _run("isolated", arrivals, workers=1, window=window)
    starts = [e for e in got[2] if e[0] == "start"]
    assert starts == [("start", 0.0, "w0", 1), ("start", 5.0, "w0", 2)]
    assert starts == [e for e in expected[2] if e[0] == "start"] and got[0] == expected[0] == 9.0


def test_a_zero_duration_pass_completes_inline_at_once():
    now, _, log, handler, _ = _run("isolated", [(0.0, 0, 0.0), (3.0, 0, 1.0)], workers=1)
    assert handler.inline == [True, False]
    assert [e[:2] for e in log] == [("start", 0.0), ("finish", 0.0), ("start", 3.0), ("finish", 4.0)]
    assert now == 4.0


def test_an_arrival_exactly_at_the_cap_is_an_instant_of_the_clock():
    now, seconds, _, _, _ = _run("isolated", [(0.0, 0, 2.0), (5.0, 0, 1.0)], workers=1, cap=5.0)
    assert now == 5.0 and seconds == pytest.approx(0.005)
    now, seconds, _, _, _ = _run("isolated", [(0.0, 0, 2.0), (5.0, 0, 1.0)], workers=1, cap=4.9)
    assert now == 2.0 and seconds == pytest.approx(0.002)


def test_every_workers_first_pass_end_is_an_instant():
    now, seconds, _, _, _ = _run("isolated", [(0.0, 0, 3.0), (0.0, 1, 7.0)], workers=2, window=1)
    assert now == 7.0 and seconds == pytest.approx(2 * 7.0 / 1000)
    now, seconds, _, _, _ = _run("isolated", [(0.0, 0, 3.0)], workers=2, cap=3.0)
    assert now == 3.0 and seconds == pytest.approx(2 * 3.0 / 1000)


@pytest.mark.parametrize(("requests", "calls"), [(1022, 0), (1023, 1)])
def test_progress_comes_at_the_1024th_step_exactly(requests, calls):
    # back-to-back 1 ms passes, each arrival at the previous pass end: requests + 1 steps
    seen: list = []
    w = BatchWorker("w0", (0, 0), [])
    handler = Handler([(float(t), w, 1.0) for t in range(requests)])
    IsolatedReplay([Pool("p", [w])], handler, None, progress=seen.append).run()
    assert len(seen) == calls


def test_passes_run_through_finishes_and_run_on_only_when_asked():
    _, _, _, _, ws = _run("isolated", [(0.0, 0, 2.0), (5.0, 0, 1.0)], workers=1)
    assert ws[0].flags == {(True, False)}
    _, _, _, _, ws = _run("isolated", [(0.0, 0, 2.0), (5.0, 0, 1.0)], workers=1, run_on=True)
    assert ws[0].flags == {(True, True)}
