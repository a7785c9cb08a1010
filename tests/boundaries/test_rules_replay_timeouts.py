"""Client-timeout rules (traffic/timeouts.py, cluster/timeouts.py): a request's deadline is its
send time plus the timeout, never before it was placed; a deadline exactly at `now` is due;
finished requests are dropped; a client keeps the tokens of passes that ended by its deadline
(a pass ending exactly then included); given-up requests wait for their worker's pass end."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servesim.cluster.timeouts import ClientTimeouts, without
from servesim.traffic.timeouts import Deadlines, spans_until


def test_the_deadline_is_send_time_plus_timeout_but_never_before_placement():
    d = Deadlines(100.0)
    d.add(1, 50.0, 60.0)
    assert d.next_time(lambda rid: True) == 150.0
    d.add(2, 0.0, 120.0)
    assert d.next_time(lambda rid: True) == 120.0, "placed after its deadline: due at placement"
    d.add(3, 0.0, 100.0)
    assert d.due(100.0, lambda rid: True) == [3]


def test_a_deadline_exactly_now_is_due_and_a_later_one_is_not():
    d = Deadlines(10.0)
    for rid, sent in ((1, 0.0), (2, 5.0), (3, 1.0)):
        d.add(rid, sent, 0.0)
    assert d.due(9.999, lambda rid: True) == []
    assert d.due(11.0, lambda rid: True) == [1, 3], "earlier deadlines too, in deadline order"
    assert d.next_time(lambda rid: True) == 15.0
    assert d.due(15.0, lambda rid: True) == [2]
    assert d.next_time(lambda rid: True) == float("inf")


def test_finished_requests_are_dropped():
    d = Deadlines(10.0)
    for rid in (1, 2, 3):
        d.add(rid, float(rid), 0.0)
    closed = {1, 3}
    assert d.next_time(lambda rid: rid not in closed) == 12.0
    assert d.due(20.0, lambda rid: rid not in closed) == [2]


@pytest.mark.parametrize(("deadline", "kept", "count"), [
    (9.0, [], 0), (10.0, [0, 1], 1), (19.9, [0, 1], 1), (20.0, [0, 2], 2), (30.0, [0, 2, 2, 3], 3),
    (45.0, [0, 2, 2, 4], 4),
])
def test_a_client_keeps_the_tokens_of_passes_ended_by_its_deadline(deadline, kept, count):
    ends = [10.0, 20.0, 30.0, 40.0]
    assert spans_until([0, 2, 2, 4], ends, deadline) == (kept, count)


def test_spans_skip_what_lies_past_the_deadline_and_keep_gaps():
    ends = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    assert spans_until([0, 1, 3, 5], ends, 4.0) == ([0, 1, 3, 4], 2)
    assert spans_until([3, 5], ends, 3.0) == ([], 0), "a span starting at the cut keeps nothing"
    assert spans_until([], ends, 10.0) == ([], 0)
    assert spans_until([0, 2], None, 10.0) == ([], 0)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 4), min_size=1, max_size=6), st.floats(0, 30))
def test_the_kept_count_is_the_tokens_of_passes_ended_by_the_deadline(widths, deadline):
    ends = [float(i) for i in range(1, 31)]
    spans, start = [], 0
    for w in widths:
        spans += [start, start + w]
        start += w + 1
    kept, count = spans_until(spans, ends, deadline)
    ended = sum(1 for e in ends if e <= deadline)
    assert count == sum(max(0, min(b, ended) - a) for a, b in zip(spans[::2], spans[1::2], strict=True))
    assert count == sum(b - a for a, b in zip(kept[::2], kept[1::2], strict=True))
    assert all(b <= ended for b in kept[1::2])


def _place(worker: str, rid: int):
    return (worker, 0, SimpleNamespace(rid=rid))


def test_client_timeouts_keep_places_until_forgotten_and_defer_per_worker():
    t = ClientTimeouts(50.0)
    a, b = _place("w0", 1), _place("w1", 2)
    t.watch(1, 0.0, 0.0, a)
    t.watch(2, 10.0, 10.0, b)
    assert t.place(1) is a and t.place(3) is None
    assert t.next_time(lambda rid: True) == 50.0
    assert t.due(60.0, lambda rid: True) == [a, b]
    assert t.take_abandoned("w0") == []
    t.defer(a, 50.0)
    assert t.abandoned(1) and not t.abandoned(2)
    assert t.take_abandoned("w1") == []
    assert t.take_abandoned("w0") == [(a, 50.0)]
    assert not t.abandoned(1) and t.take_abandoned("w0") == []
    t.forget(1)
    assert t.place(1) is None and t.place(2) is b


def test_given_up_requests_vanish_from_the_pass_records():
    r1, r2, r3 = (SimpleNamespace(rid=i) for i in (1, 2, 3))
    result = SimpleNamespace(first_tokens=[r1, r2], finished=[r2, r3], rejected=[r1, r3])
    without([(0, result)], {2})
    assert result.first_tokens == [r1] and result.finished == [r3] and result.rejected == [r1, r3]
