"""A worker's busy time, folded from its pass ends when asked, is the running sum of its pass
durations bit for bit."""

from __future__ import annotations

from array import array

from hypothesis import given
from hypothesis import strategies as st

from servesim.engine.busy import BusyTime

times = st.floats(0.0, 1e4, allow_nan=False) | st.sampled_from([0.1, 0.2, 0.3, 1e-9, 1 / 3])
passes = st.lists(st.tuples(st.booleans(), times, times), max_size=60)
"""Per pass: whether it starts where the previous one ended, the idle gap before it otherwise,
its duration."""


@given(passes, st.lists(st.integers(0, 60), max_size=3))
def test_busy_time_is_the_running_sum_of_pass_durations(steps: list[tuple[bool, float, float]],
                                                        settles: list[int]) -> None:
    ends = array("d")
    busy = BusyTime(ends)
    running, clock = 0.0, 0.0
    for index, (back_to_back, gap, duration) in enumerate(steps):
        start = clock if back_to_back and index else clock + gap
        if not (back_to_back and index):
            busy.started(index, start)
        clock = start + duration
        ends.append(clock)
        running += clock - start
        if index in settles:
            busy.settle(running)
        assert busy.total() == running
    assert busy.total() == running
