"""Mooncake trace rules beyond test_bounds_trace_readers.py (traffic/mooncake.py): the largest
length and the longest delay are accepted and one more is an error, the first timestamps span at
most MAX_MS, a later turn's timestamp needs one earlier in its session, a turn without timestamp
or delay follows at once and leaves the anchor, the router hints and output ids are typed, and
the field aliases."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servesim.errors import TraceError
from servesim.limits import MAX_MS, MAX_TOKENS
from servesim.traffic.mooncake import read_mooncake


def _write(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def _row(**fields) -> dict:
    return {"hash_ids": [1, 2], "output_length": 4} | fields


def _read(tmp_path, rows, **kw):
    return read_mooncake(_write(tmp_path / "t.jsonl", rows), 16, **kw)


def _error(tmp_path, rows, match, **kw):
    with pytest.raises(TraceError, match=match):
        _read(tmp_path, rows, **kw)


@pytest.mark.parametrize("extra", [{}, {"session_id": "s"}], ids=["plain-row", "general-row"])
def test_the_largest_output_length_is_accepted_and_one_more_refused(tmp_path, extra):
    turn = _read(tmp_path, [_row(timestamp=0, input_length=20, output_length=MAX_TOKENS, **extra)]).sessions[0].turns[0]
    assert turn.max_output_tokens == MAX_TOKENS
    _error(tmp_path, [_row(timestamp=0, input_length=20, output_length=MAX_TOKENS + 1, **extra)],
           f"output_length must be <= {MAX_TOKENS}")


def test_a_delay_of_exactly_max_ms_is_accepted_and_more_refused(tmp_path):
    rows = [_row(session_id="a"), _row(session_id="a", delay=MAX_MS)]
    assert _read(tmp_path, rows).sessions[0].turns[1].delay_ms == MAX_MS
    _error(tmp_path, [_row(session_id="a"), _row(session_id="a", delay=MAX_MS * 1.000001)], r":2: the delay before")
    _error(tmp_path, [_row(session_id="a"), _row(session_id="a", delay=-0.001)], r":2: the delay before this turn is negative")


def test_first_timestamps_may_span_exactly_max_ms(tmp_path):
    rows = [_row(timestamp=MAX_MS), _row(timestamp=0), _row(timestamp=5)]
    assert [s.first_arrival_ms for s in _read(tmp_path, rows, timestamped=True).sessions] == [MAX_MS, 0.0, 5.0]
    _error(tmp_path, [_row(timestamp=5), _row(timestamp=MAX_MS + 6)], r":2: timestamp .* makes the trace span",
           timestamped=True)
    _error(tmp_path, [_row(timestamp=MAX_MS + 6), _row(timestamp=5)], r":2: timestamp .* makes the trace span",
           timestamped=True)
    assert len(_read(tmp_path, [_row(timestamp=5), _row(timestamp=MAX_MS + 6)]).sessions) == 2, "only when timestamped"


def test_a_later_timestamp_needs_an_earlier_one_in_its_session(tmp_path):
    _error(tmp_path, [_row(session_id="a"), _row(session_id="a", timestamp=5)], ":2: a later turn's timestamp needs")


def test_a_turn_without_timestamp_or_delay_follows_at_once_and_keeps_the_anchor(tmp_path):
    rows = [_row(session_id="a", timestamp=100), _row(session_id="a"), _row(session_id="a", timestamp=160)]
    assert [t.delay_ms for t in _read(tmp_path, rows).sessions[0].turns] == [0.0, 0.0, 60.0]


def test_sessions_interleave_and_keep_their_own_anchor(tmp_path):
    rows = [_row(session_id="a", timestamp=100), _row(session_id="b", timestamp=150),
            _row(session_id="a", timestamp=170), _row(session_id="b", timestamp=400)]
    a, b = _read(tmp_path, rows).sessions
    assert (a.session_id, b.session_id) == ("a", "b")
    assert [t.delay_ms for t in a.turns] == [0.0, 70.0] and [t.delay_ms for t in b.turns] == [0.0, 250.0]


def test_a_non_string_session_id_is_its_json(tmp_path):
    rows = [_row(session_id=7, timestamp=0), _row(session_id="7", timestamp=1), _row(session_id=7, timestamp=3)]
    sessions = _read(tmp_path, rows).sessions
    assert [s.session_id for s in sessions] == ["7"] and len(sessions[0].turns) == 3


@pytest.mark.parametrize(("hints", "message"), [
    ({"priority": -3, "strict_priority": 0, "policy_class": "x"}, None),
    ({"strict_priority": -1}, "strict_priority must be >= 0"),
    ({"priority": False}, "priority must be an integer"),
    ({"priority": 1.0}, "priority must be an integer"),
    ({"policy_class": 3}, "policy_class must be a string"),
])
def test_router_hints_are_typed(tmp_path, hints, message):
    rows = [_row(timestamp=0, **hints)]
    if message is None:
        assert _read(tmp_path, rows).sessions
    else:
        _error(tmp_path, rows, f":1: {message}")


def test_output_token_ids_must_match_the_output_length(tmp_path):
    turn = _read(tmp_path, [_row(timestamp=0, output_length=2, output_token_ids=[0, (1 << 64) - 1])]).sessions[0].turns[0]
    assert turn.output_ids == [0, (1 << 64) - 1]
    _error(tmp_path, [_row(timestamp=0, output_length=2, output_token_ids=[1])], "output_token_ids must be a list of")
    _error(tmp_path, [_row(timestamp=0, output_length=1, output_token_ids=[1 << 64])], "output_token_ids")
    _error(tmp_path, [_row(timestamp=0, output_length=1, output_token_ids=[-1])], "output_token_ids")


def test_field_aliases(tmp_path):
    rows = [{"hash_ids": [1, 2], "output_tokens": 3, "input_tokens": 20, "created_time": 50, "session_id": "a"},
            {"hash_ids": [1, 2], "output_length": 5, "output_tokens": 9, "session_id": "a", "delay_ms": 7}]
    first, second = _read(tmp_path, rows).sessions[0].turns
    assert (first.max_output_tokens, first.input_length) == (3, 20)
    assert (second.max_output_tokens, second.input_length, second.delay_ms) == (5, 32, 7.0), "the main name wins"
    assert _read(tmp_path, rows).sessions[0].first_arrival_ms == 50.0


def test_a_missing_output_length_and_an_empty_trace_are_errors(tmp_path):
    _error(tmp_path, [{"hash_ids": [1], "timestamp": 0}], ":1: output_length is required")
    (tmp_path / "t.jsonl").write_text("\n")
    with pytest.raises(TraceError, match="the trace has no requests"):
        read_mooncake(str(tmp_path / "t.jsonl"), 16)


def test_the_delta_form_accumulates(tmp_path):
    assert _read(tmp_path, [_row(timestamp=0)], accumulate=True).accumulate
    assert not _read(tmp_path, [_row(timestamp=0)]).accumulate


@pytest.mark.parametrize("timestamp", ["5", True, [1]])
def test_a_timestamp_must_be_a_finite_number(tmp_path, timestamp):
    _error(tmp_path, [_row(timestamp=timestamp)], ":1: timestamp must be a finite number")
    _error(tmp_path, [_row(session_id="a"), _row(session_id="a", delay=timestamp)], ":2: delay must be a finite number")
