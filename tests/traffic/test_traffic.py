"""Traffic: trace parsing, synthetic workloads and the open/closed-loop driver."""

from __future__ import annotations

import json
from itertools import accumulate

import pytest

from servesim.errors import TraceError
from servesim.traffic.driver import Driver
from servesim.traffic.mooncake import read_mooncake
from servesim.traffic.synthetic import constant_rate_schedule, synthetic_workload


def _trace(tmp_path, rows, blank_lines=()):
    lines = [json.dumps(r) if isinstance(r, dict) else r for r in rows]
    for i in blank_lines:
        lines.insert(i, "")
    path = tmp_path / "trace.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_sessions_delays_and_defaults(tmp_path):
    path = _trace(tmp_path, [
        {"session_id": "A", "timestamp": 5000, "input_length": 600, "output_length": 3, "hash_ids": [1, 2]},
        {"session_id": "B", "timestamp": 5050, "output_length": 3, "hash_ids": [5]},
        {"session_id": "A", "delay": 100, "output_length": 3, "hash_ids": [1, 2, 3]},
        {"session_id": "B", "timestamp": 5400, "output_tokens": 2, "hash_ids": [5, 6]},
        {"session_id": "A", "output_length": 2, "hash_ids": [1]},
        {"timestamp": 7, "output_length": 1, "hash_ids": [9]},
    ], blank_lines=[5])
    workload = read_mooncake(path, 512)
    a, b, single = workload.sessions
    assert (a.session_id, b.session_id, single.session_id) == ("A", "B", "request_7")
    assert [t.delay_ms for t in a.turns] == [0.0, 100.0, 0.0]
    assert [t.delay_ms for t in b.turns] == [0.0, 350.0]
    assert b.turns[0].input_length == 512 and a.turns[1].input_length == 3 * 512
    assert a.first_arrival_ms == 5000 and single.first_arrival_ms == 7


@pytest.mark.parametrize("row, message", [
    ({"output_length": 1}, "hash_ids"),
    ({"hash_ids": [], "output_length": 1}, "hash_ids"),
    ({"hash_ids": [1, -2], "output_length": 1}, "hash_ids"),
    ({"hash_ids": [1]}, "output_length is required"),
    ({"hash_ids": [1], "output_length": 1.5}, "output_length"),
    ({"hash_ids": [1], "output_length": 1, "input_length": 513}, "input_length 513 exceeds hash_ids capacity 512"),
    ({"hash_ids": [1], "output_length": 1, "input_length": 0}, "input_length"),
    ({"hash_ids": [1], "output_length": 1, "delay": 5}, "first turn of a session"),
    ({"hash_ids": [1], "output_length": 2, "output_token_ids": [1]}, "output_token_ids"),
    ({"hash_ids": [1], "output_length": 1, "timestamp": "soon"}, "timestamp"),
    ({"hash_ids": [1], "output_length": 1, "timestamp": 10**400}, "timestamp must be a finite number"),
    ({"timestamp": -10**400, "input_length": 1, "output_length": 1, "hash_ids": [1]}, "timestamp must be a finite"),
    ("{not json", "invalid JSON"),
    ("[1, 2]", "JSON object"),
])
def test_bad_rows_name_file_and_line(tmp_path, row, message):
    path = _trace(tmp_path, [{"hash_ids": [1], "output_length": 1}, row], blank_lines=[1])
    with pytest.raises(TraceError, match=message) as info:
        read_mooncake(path, 512)
    assert info.value.path == path and info.value.line == 3
    assert str(info.value).startswith(f"{path}:3: ")


def test_later_turn_timestamp_needs_an_earlier_one(tmp_path):
    path = _trace(tmp_path, [{"session_id": "S", "hash_ids": [1], "output_length": 1},
                             {"session_id": "S", "timestamp": 9, "hash_ids": [1], "output_length": 1}])
    with pytest.raises(TraceError, match="earlier timestamp"):
        read_mooncake(path, 512)


def test_missing_file_is_a_trace_error(tmp_path):
    with pytest.raises(TraceError, match="cannot read trace"):
        read_mooncake(str(tmp_path / "absent.jsonl"), 512)


def test_synthetic_prefix_groups_share_leading_blocks():
    workload = synthetic_workload(4, 200, 4, 64, turns=3, shared_prefix_ratio=0.5, prefix_groups=2)
    first_turns = [s.turns[0] for s in workload.sessions]
    shared = {tuple(t.block_values[:2]) for t in first_turns}
    assert len(shared) == 1, "the reference's seed-0 draws put all four sessions in one group"
    fresh = [v for t in first_turns for v in t.block_values[2:]]
    assert len(fresh) == len(set(fresh)) == 8
    assert workload.accumulate


def test_constant_rate_accumulates_by_repeated_addition():
    times = list(constant_rate_schedule(50, 300.0))
    gap = 1000.0 / (1000.0 / (1000.0 / 300.0))
    assert times == list(accumulate([0.0] + [gap] * 49))


def test_open_loop_orders_by_time_session_and_turn():
    workload = synthetic_workload(3, 10, 2, 4, turns=2, inter_turn_delay_ms=5)
    driver = Driver(workload, first_arrivals=[2.0, 0.0, 2.0])
    assert driver.next_ready_time() == 0.0
    assert [(a.session_index, a.turn_index) for a in driver.release(0.0)] == [(1, 0)]
    first = driver.release(2.0)
    assert [(a.session_index, a.turn_index) for a in first] == [(0, 0), (2, 0)]
    driver.on_terminal(first[1], 4.0, 2)
    driver.on_terminal(first[0], 4.0, 2)
    assert driver.next_ready_time() == 9.0
    second = driver.release(9.0)
    assert [(a.session_index, a.turn_index) for a in second] == [(0, 1), (2, 1)]
    assert second[0].input_length == 10 + 2 + 10, "accumulated: prompt + outputs + new tokens"


def test_closed_loop_holds_a_slot_across_turns():
    workload = synthetic_workload(3, 10, 2, 4, turns=2)
    driver = Driver(workload, concurrency=2)
    driver.start(0.0)
    first = driver.release(0.0)
    assert [(a.session_index, a.turn_index) for a in first] == [(0, 0), (1, 0)]
    driver.on_terminal(first[0], 3.0, 2)
    nxt = driver.release(3.0)
    assert [(a.session_index, a.turn_index) for a in nxt] == [(0, 1)], "session 2 waits for a free slot"
    driver.on_terminal(nxt[0], 6.0, 2)
    assert [(a.session_index, a.turn_index) for a in driver.release(6.0)] == [(2, 0)]
    assert not driver.drained()


@pytest.mark.parametrize("value, expected", [
    (1, 1.0), (-2.5, -2.5), (0, 0.0), (2**53 + 1, float(2**53 + 1)),
    (10**400, None), (-10**400, None), (float("inf"), None), (float("nan"), None),
    (True, None), ("1", None), (None, None), ([1], None),
])
def test_finite_float_takes_json_numbers_only(value, expected):
    from servesim.traffic.jsonl import finite_float
    assert finite_float(value) == expected
