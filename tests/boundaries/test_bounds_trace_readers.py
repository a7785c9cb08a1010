"""Trace reader boundaries (runtime spec §2.4): line numbers are 1-based physical lines (blank
lines counted, across read chunks), every row of a file is read whatever the chunking, a later
turn's think time is the gap to the *previous* turn's timestamp (zero allowed, negative not), a
first turn may carry delay 0 but no other, input_length may fill its hash ids exactly, and a
prompt keeps ceil(input_length / block_size) hash ids."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servesim.errors import TraceError
from servesim.traffic import jsonl
from servesim.traffic.jsonl import read_jsonl
from servesim.traffic.mooncake import read_mooncake


def _write(path: Path, lines: list[str]) -> str:
    path.write_text("".join(line + "\n" for line in lines))
    return str(path)


def _row(**fields) -> str:
    return json.dumps({"hash_ids": [1, 2], "output_length": 4, **fields})


@pytest.mark.parametrize("chunk", [1, 2, 3, 4096])
def test_line_numbers_are_physical_and_one_based(tmp_path, chunk):
    lines = ['{"a": 1}', "", '{"a": 2}', "   ", "", '{"a": 3}', '{"a": 4}']
    path = _write(tmp_path / "t.jsonl", lines)
    assert [(n, row["a"]) for n, row in read_jsonl(path, chunk)] == [(1, 1), (3, 2), (6, 3), (7, 4)]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.booleans(), min_size=0, max_size=25), st.integers(1, 6))
def test_every_row_is_read_with_its_line_whatever_the_chunking(tmp_path_factory, blanks, chunk):
    lines = ["" if blank else json.dumps({"line": i + 1}) for i, blank in enumerate(blanks)]
    path = _write(tmp_path_factory.mktemp("t") / "t.jsonl", lines)
    got = list(read_jsonl(path, chunk))
    assert [(n, row["line"]) for n, row in got] == [(i + 1, i + 1) for i, b in enumerate(blanks) if not b]


def test_a_bad_line_is_named_by_its_physical_number(tmp_path):
    path = _write(tmp_path / "t.jsonl", ['{"a": 1}', "", "{oops", '{"a": 2}'])
    with pytest.raises(TraceError) as info:
        list(read_jsonl(path, 2))
    assert info.value.line == 3 and str(info.value).startswith(f"{path}:3:")


def test_unnamed_rows_are_sessions_named_after_their_line(tmp_path):
    path = _write(tmp_path / "t.jsonl", [_row(timestamp=0), "", _row(timestamp=5)])
    assert [s.session_id for s in read_mooncake(path, 16).sessions] == ["request_1", "request_3"]


def test_think_time_is_the_gap_to_the_previous_turn(tmp_path):
    rows = [_row(session_id="a", timestamp=100.0), _row(session_id="a", timestamp=350.0),
            _row(session_id="a", timestamp=400.0), _row(session_id="a", timestamp=400.0)]
    (session,) = read_mooncake(_write(tmp_path / "t.jsonl", rows), 16).sessions
    assert session.first_arrival_ms == 100.0
    assert [t.delay_ms for t in session.turns] == [0.0, 250.0, 50.0, 0.0], "gaps, zero allowed"


def test_an_explicit_delay_does_not_move_the_timestamp_anchor(tmp_path):
    rows = [_row(session_id="a", timestamp=100.0), _row(session_id="a", delay=30.0),
            _row(session_id="a", timestamp=180.0)]
    (session,) = read_mooncake(_write(tmp_path / "t.jsonl", rows), 16).sessions
    assert [t.delay_ms for t in session.turns] == [0.0, 30.0, 80.0]


def test_a_timestamp_before_the_previous_one_is_an_error_naming_its_line(tmp_path):
    rows = [_row(session_id="a", timestamp=100.0), _row(session_id="a", timestamp=99.0)]
    with pytest.raises(TraceError, match=r":2: the delay before this turn is negative"):
        read_mooncake(_write(tmp_path / "t.jsonl", rows), 16)


def test_a_first_turn_may_have_delay_zero_but_no_other(tmp_path):
    ok = read_mooncake(_write(tmp_path / "ok.jsonl", [_row(session_id="a", delay=0)]), 16)
    assert ok.sessions[0].turns[0].delay_ms == 0.0
    with pytest.raises(TraceError, match=r":1: the first turn of a session cannot have a non-zero delay"):
        read_mooncake(_write(tmp_path / "bad.jsonl", [_row(session_id="a", delay=0.5)]), 16)


@pytest.mark.parametrize("extra", [{}, {"session_id": "s"}], ids=["plain-row", "general-row"])
def test_input_length_may_fill_its_hash_ids_exactly(tmp_path, extra):
    path = _write(tmp_path / "t.jsonl", [_row(timestamp=0, input_length=32, **extra)])
    assert read_mooncake(path, 16).sessions[0].turns[0].input_length == 32
    over = _write(tmp_path / "over.jsonl", [_row(timestamp=0, input_length=33, **extra)])
    with pytest.raises(TraceError, match="input_length 33 exceeds hash_ids capacity 32"):
        read_mooncake(over, 16)


@pytest.mark.parametrize("extra", [{}, {"session_id": "s"}], ids=["plain-row", "general-row"])
@pytest.mark.parametrize(("length", "kept"), [(1, 1), (16, 1), (17, 2), (32, 2), (33, 3), (48, 3)])
def test_a_prompt_keeps_the_ceiling_of_its_blocks(tmp_path, extra, length, kept):
    path = _write(tmp_path / "t.jsonl", [json.dumps({"timestamp": 0, "input_length": length, "output_length": 1,
                                                     "hash_ids": [11, 12, 13], **extra})])
    turn = read_mooncake(path, 16).sessions[0].turns[0]
    assert list(turn.block_values) == [11, 12, 13][:kept]


def test_an_explicit_delay_wins_on_a_row_of_every_field(tmp_path):
    rows = [json.dumps({"session_id": "a", "timestamp": 0, "input_length": 20, "output_length": 2, "hash_ids": [1, 2]}),
            json.dumps({"session_id": "a", "timestamp": 500, "input_length": 20, "output_length": 2,
                        "hash_ids": [1, 2], "delay": 30})]
    (session,) = read_mooncake(_write(tmp_path / "t.jsonl", rows), 16).sessions
    assert [t.delay_ms for t in session.turns] == [0.0, 30.0]


@pytest.mark.parametrize(("fields", "error"), [
    ({"input_length": 0}, "input_length must be >= 1"), ({"output_length": -1}, "output_length must be >= 0"),
    ({"output_length": 2.5}, "output_length must be an integer")])
def test_lengths_below_their_minimum_are_errors(tmp_path, fields, error):
    with pytest.raises(TraceError, match=f":1: {error}"):
        read_mooncake(_write(tmp_path / "t.jsonl", [_row(timestamp=0, **fields)]), 16)


def test_integral_floats_at_the_minimum_are_accepted(tmp_path):
    path = _write(tmp_path / "t.jsonl", [_row(timestamp=0, input_length=1.0, output_length=0.0)])
    turn = read_mooncake(path, 16).sessions[0].turns[0]
    assert (turn.input_length, turn.max_output_tokens) == (1, 0)



# -- the longest line read ------------------------------------------------------------------------

def _padded(length: int) -> str:
    """A row of exactly `length` characters (padding in an ignored field)."""
    row = _row(pad="")
    return _row(pad="x" * (length - len(row)))


@pytest.mark.parametrize("chunk", [1, 4096])
def test_a_line_of_exactly_the_limit_is_read(tmp_path, monkeypatch, chunk):
    """The limit is patched small (the real one is 64 MiB); its rule is 'longer than' it."""
    monkeypatch.setattr(jsonl, "MAX_LINE_CHARS", 200)
    path = tmp_path / "t.jsonl"
    path.write_text(_row() + "\n" + _padded(199) + "\n" + _padded(200))  # newline included: 200, 200
    assert [n for n, _ in read_jsonl(str(path), chunk)] == [1, 2, 3]


@pytest.mark.parametrize("last", [True, False])
def test_a_line_one_character_over_the_limit_is_an_error_naming_it(tmp_path, monkeypatch, last):
    monkeypatch.setattr(jsonl, "MAX_LINE_CHARS", 200)
    path = tmp_path / "t.jsonl"
    path.write_text(_row() + "\n" + (_padded(201) if last else _padded(200) + "\n" + _row()))
    with pytest.raises(TraceError) as info:
        list(read_jsonl(str(path), 4096))
    assert info.value.line == 2 and "line longer than" in str(info.value)
