"""Workload-driver rules (traffic/driver.py): a turn is released once its ready time plus the
front-end lag is reached (exactly then included), in (time, session, turn) order; a later turn
is ready at its predecessor's terminal time plus its think time divided by the delay scale; a
session ends at its last turn, or early when told, and a rejected turn still lets it go on;
under a concurrency cap sessions take slots in input order and keep them through their turns."""

from __future__ import annotations

from array import array

import pytest

from servesim.traffic.driver import Driver
from servesim.traffic.workload import Session, Turn, Workload


def _session(name: str, delays: list[float], first: float | None = None) -> Session:
    return Session(name, [Turn(array("Q", [7]), 16, 8, 2, d) for d in delays], first)


def _workload(*sessions: Session) -> Workload:
    return Workload(list(sessions))


def _ids(arrivals):
    return [(a.session_index, a.turn_index, a.arrival_ms) for a in arrivals]


def test_a_turn_is_released_exactly_at_its_ready_time_plus_the_lag():
    driver = Driver(_workload(_session("a", [0.0]), _session("b", [0.0])), first_arrivals=[10.0, 12.0],
                    frontend_ms=3.0)
    assert driver.next_ready_time() == 13.0
    assert driver.release(12.999) == []
    assert _ids(driver.release(13.0)) == [(0, 0, 10.0)], "the arrival keeps its send time"
    assert driver.next_ready_time() == 15.0
    assert _ids(driver.release(100.0)) == [(1, 0, 12.0)]
    assert driver.next_ready_time() == float("inf")


def test_think_time_runs_from_the_terminal_time_divided_by_the_delay_scale():
    driver = Driver(_workload(_session("a", [0.0, 40.0, 10.0])), first_arrivals=[5.0], delay_scale=2.0)
    (first,) = driver.release(5.0)
    driver.on_terminal(first, 30.0, 2)
    assert driver.next_ready_time() == 50.0
    assert driver.release(49.9) == []
    (second,) = driver.release(50.0)
    assert (second.turn_index, second.arrival_ms) == (1, 50.0)
    driver.on_terminal(second, 60.0, 2, completed=False)
    assert driver.next_ready_time() == 65.0, "a rejected turn still lets the session go on"
    (third,) = driver.release(65.0)
    assert not driver.drained()
    driver.on_terminal(third, 70.0, 2)
    assert driver.drained() and driver.next_ready_time() == float("inf")


def test_a_session_can_end_early():
    driver = Driver(_workload(_session("a", [0.0, 5.0, 5.0])), first_arrivals=[0.0])
    (first,) = driver.release(0.0)
    driver.on_terminal(first, 1.0, 2, ends_session=True)
    assert driver.drained() and driver.next_ready_time() == float("inf")


def test_ties_release_by_session_then_turn_and_first_turns_interleave():
    sessions = [_session("a", [0.0, 10.0]), _session("b", [0.0, 0.0]), _session("c", [0.0])]
    driver = Driver(_workload(*sessions), first_arrivals=[0.0, 5.0, 20.0])
    (a0,) = driver.release(0.0)
    driver.on_terminal(a0, 10.0, 2)                      # a1 ready at 20
    (b0,) = driver.release(5.0)
    driver.on_terminal(b0, 20.0, 2)                      # b1 ready at 20
    assert _ids(driver.release(20.0)) == [(0, 1, 20.0), (1, 1, 20.0), (2, 0, 20.0)]


def test_a_first_turn_ready_before_a_later_turn_goes_first():
    driver = Driver(_workload(_session("a", [0.0, 0.0]), _session("b", [0.0])), first_arrivals=[0.0, 7.0])
    (a0,) = driver.release(0.0)
    driver.on_terminal(a0, 8.0, 2)
    assert _ids(driver.release(10.0)) == [(1, 0, 7.0), (0, 1, 8.0)]


def test_open_loop_sessions_arrive_in_time_order_whatever_their_index():
    driver = Driver(_workload(_session("a", [0.0]), _session("b", [0.0]), _session("c", [0.0])),
                    first_arrivals=[9.0, 3.0, 3.0])
    assert _ids(driver.release(9.0)) == [(1, 0, 3.0), (2, 0, 3.0), (0, 0, 9.0)]
    assert driver.fixed_arrivals


@pytest.mark.parametrize("limit", [1, 2])
def test_a_concurrency_cap_holds_slots_through_think_times(limit):
    sessions = [_session(n, [0.0, 5.0]) for n in "abc"]
    driver = Driver(_workload(*sessions), concurrency=limit)
    driver.start(0.0)
    first = driver.release(0.0)
    assert _ids(first) == [(s, 0, 0.0) for s in range(limit)]
    driver.on_terminal(first[0], 2.0, 1)
    assert driver.release(6.999) == [], "the think time keeps the slot"
    (again,) = driver.release(7.0)
    assert (again.session_index, again.turn_index) == (0, 1)
    driver.on_terminal(again, 9.0, 1)
    assert _ids(driver.release(9.0)) == [(limit, 0, 9.0)], "the freed slot goes to the next session"


def test_a_cap_larger_than_the_workload_activates_everything_once():
    driver = Driver(_workload(_session("a", [0.0]), _session("b", [0.0])), concurrency=5)
    driver.start(1.0)
    assert _ids(driver.release(1.0)) == [(0, 0, 1.0), (1, 0, 1.0)]
    assert not driver.fixed_arrivals


def test_release_times_takes_at_most_the_limit():
    driver = Driver(_workload(*[_session(n, [0.0]) for n in "abcd"]), first_arrivals=iter([1.0, 2.0, 3.0, 4.0]))
    assert driver.release_times(0) == []
    assert driver.release_times(3) == [1.0, 2.0, 3.0]
    assert driver.next_ready_time() == 4.0 and not driver.drained()
    assert driver.release_times(3) == [4.0] and driver.drained()
    assert driver.release_times(1) == []
