"""Rules of the measurement readers (measured/readers.py): times are seconds unless the name
ends in _ms/_us/_ns, the first accepted name of a field wins; send ≤ first token ≤ end (equal
allowed) and a request lasts at most MAX_MS; token counts are integers in [0, MAX_TOKENS]
(integral floats accepted, booleans not); a line with an error or without a first-token time is
a failed request; replayable rows must carry both token counts; AIPerf units default to ms and
its token gaps add up to at most MAX_MS."""

from __future__ import annotations

import json

import pytest

from servesim.errors import TraceError
from servesim.limits import MAX_MS, MAX_TOKENS
from servesim.measured.readers import read_aiperf, read_request_lines


def _lines(*records: dict, replayable: bool = True):
    return read_request_lines("m.jsonl", "\n".join(json.dumps(r) for r in records), replayable).requests


def _req(**fields) -> dict:
    return {"send_ts": 1.0, "first_token_ts": 1.5, "end_ts": 3.0, "input_tokens": 10, "output_tokens": 5, **fields}


def test_units_follow_the_name_suffix():
    (row,) = _lines({"send_time_ms": 1000.0, "first_token_ns": 1.5e9, "end_ts": 3.0, "isl": 1, "osl": 2})
    assert row == (1.0, 1.5, 3.0, 1, 2)


def test_the_first_accepted_name_wins():
    (row,) = _lines(_req(queued_ts=0.5, input_length=99))
    assert row[0] == 1.0 and row[3] == 10


def test_equal_times_are_in_order_and_a_reversal_is_not():
    assert _lines(_req(send_ts=2.0, first_token_ts=2.0, end_ts=2.0))[0][:3] == (2.0, 2.0, 2.0)
    with pytest.raises(TraceError, match="out of order"):
        _lines(_req(first_token_ts=0.999))
    with pytest.raises(TraceError, match="out of order"):
        _lines(_req(end_ts=1.4))


def test_a_request_may_last_max_ms_and_no_longer():
    longest = MAX_MS / 1000
    assert _lines(_req(send_ts=0.0, first_token_ts=0.0, end_ts=longest))
    assert _lines(_req(send_ts=5.0, first_token_ts=5.0, end_ts=5.0 + longest)), "the duration, not the end time"
    with pytest.raises(TraceError, match="longer than"):
        _lines(_req(send_ts=0.0, first_token_ts=0.0, end_ts=longest * (1 + 1e-9)))


@pytest.mark.parametrize("count", [0, MAX_TOKENS, 7.0])
def test_token_counts_at_their_bounds(count):
    assert _lines(_req(output_tokens=count))[0][4] == int(count)


@pytest.mark.parametrize("count", [-1, MAX_TOKENS + 1, 7.5, True, "7"])
def test_token_counts_beyond_them(count):
    with pytest.raises(TraceError, match=r"integer in \[0,"):
        _lines(_req(output_tokens=count))


def test_failed_requests():
    rows = _lines(_req(error="boom"), {"send_ts": 1.0, "end_ts": 2.0}, _req(error=""))
    assert rows[0] == (1.0, None, None, -1, -1) and rows[1] == (1.0, None, None, -1, -1)
    assert rows[2] == (1.0, 1.5, 3.0, 10, 5), "an empty error is no error"


def test_replayable_rows_need_token_counts():
    record = {"send_ts": 1.0, "first_token_ts": 1.5, "end_ts": 3.0}
    assert _lines(record, replayable=False)[0][3:] == (-1, -1)
    with pytest.raises(TraceError, match="no input tokens count"):
        _lines(record)


def test_a_line_needs_a_send_and_an_end_time():
    with pytest.raises(TraceError, match="no send time"):
        _lines({"end_ts": 1.0})
    with pytest.raises(TraceError, match="no end time"):
        _lines({"send_ts": 1.0, "first_token_ts": 1.2})


def _aiperf(metrics: dict, **meta) -> dict:
    return {"metadata": {"request_start_ns": 2e9, **meta}, "metrics": metrics}


def _metrics(**extra) -> dict:
    return {"time_to_first_token": {"value": 100.0}, "request_latency": {"value": 1.0, "unit": "s"},
            "input_sequence_length": {"value": 12.0, "unit": "tokens"},
            "output_sequence_length": {"value": 4.4, "unit": "tokens"}, **extra}


def test_aiperf_units_default_to_milliseconds():
    rows = read_aiperf("p.jsonl", json.dumps(_aiperf(_metrics())), True)
    assert rows.requests == [(2.0, pytest.approx(2.1), 3.0, 12, 4)]
    assert rows.gaps_ms is None, "no recorded gaps"


def test_aiperf_gaps_in_their_unit_up_to_max_ms():
    gaps = {"inter_chunk_latency": {"value": [0.5, 0.25], "unit": "s"}}
    assert read_aiperf("p.jsonl", json.dumps(_aiperf(_metrics(**gaps))), True).gaps_ms == [500.0, 250.0]
    at_limit = {"inter_chunk_latency": {"value": [MAX_MS / 2, MAX_MS / 2]}}
    assert read_aiperf("p.jsonl", json.dumps(_aiperf(_metrics(**at_limit))), True).gaps_ms == [MAX_MS / 2] * 2
    over = {"inter_chunk_latency": {"value": [MAX_MS / 2, MAX_MS / 2 * (1 + 1e-9)]}}
    with pytest.raises(TraceError, match="add up to more than"):
        read_aiperf("p.jsonl", json.dumps(_aiperf(_metrics(**over))), True)


def test_aiperf_cancelled_and_empty_requests_failed():
    text = "\n".join(json.dumps(r) for r in (_aiperf(_metrics(), was_cancelled=True), _aiperf({})))
    assert read_aiperf("p.jsonl", text, True).requests == [(2.0, None, None, -1, -1)] * 2
