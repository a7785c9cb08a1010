"""Traffic rules at their edges: synthetic prompts share round-half-away(blocks × ratio) blocks
of their group's prefix (block values laid out group by group, fresh ones after), a cached
prefix of C tokens shares exactly C tokens in units of gcd(C, block); hash ids occurring once over
the whole trace mark where a prompt stops sharing (its first such id × block size, else its
length); a Mooncake trace keeps ceil(input / block) ids, warns once naming the FIRST session
without a timestamp and how many there are, and rejects an empty id list at its line."""

from __future__ import annotations

import logging
from array import array

import numpy as np
import pytest

from servesim.errors import TraceError
from servesim.traffic import hash_ids
from servesim.traffic.mooncake import read_mooncake
from servesim.traffic.synthetic import SyntheticSessions


def _sessions(count=2, input_tokens=80, block=16, turns=1, ratio=0.0, groups=0, delay=0.0, cached=0):
    return SyntheticSessions(count, input_tokens, 4, block, turns, ratio, groups, delay, cached)


@pytest.mark.parametrize(("ratio", "shared"), [
    (0.5, 3),   # 5 × 0.5 = 2.5: half rounds away from zero (not to even, not down)
    (0.3, 2),   # 1.5 → 2
    (0.29, 1),  # 1.45 → 1
    (0.1, 1),   # 0.5 → 1
    (0.09, 0),  # 0.45 → 0
    (1.0, 5),
])
def test_the_shared_prefix_rounds_half_away(ratio, shared):
    s = _sessions(input_tokens=80, ratio=ratio, groups=1, turns=2)
    assert s.shared == shared and s.fresh == 5 - shared


def test_blocks_are_counted_by_ceiling():
    s = _sessions(input_tokens=81, ratio=0.5, groups=1, turns=2)
    assert s.shared + s.fresh == 6, "81 tokens need 6 blocks of 16"
    assert s.shared == 3


def test_group_values_then_fresh_values():
    s = _sessions(count=3, input_tokens=64, ratio=0.5, groups=2, turns=2, delay=7.0)  # 4 blocks: 2 shared
    assert s.first_fresh == 4, "2 groups × 2 shared values"
    for i in range(3):
        session = s[i]
        group = s._group_of(i)
        assert 0 <= group < 2
        first, second = session.turns
        assert list(first.block_values) == [2 * group, 2 * group + 1, 4 + 4 * i, 4 + 4 * i + 1]
        assert list(second.block_values) == [2 * group, 2 * group + 1, 4 + 4 * i + 2, 4 + 4 * i + 3]
        assert first.delay_ms == 0.0 and second.delay_ms == 7.0, "think time from the second turn on"
        assert first.unique_from == 32 == second.unique_from


def test_unique_from_never_passes_the_prompt():
    s = _sessions(input_tokens=70, ratio=1.0, groups=1, turns=2)
    assert s.shared == 5 and s.unique_from == 70


def test_without_groups_nothing_is_shared():
    s = _sessions(count=2, input_tokens=40, ratio=0.5, groups=0)
    assert s.shared == 0
    assert list(s[0].turns[0].block_values) == [0, 1, 2] and list(s[1].turns[0].block_values) == [3, 4, 5]
    assert s[1].turns[0].unique_from == 0


def test_a_cached_prefix_is_token_exact():
    s = _sessions(count=2, input_tokens=100, block=16, cached=24)
    assert s.block_size == 8, "gcd(24, 16)"
    a, b = s[0].turns[0], s[1].turns[0]
    assert list(a.block_values[:3]) == [0, 1, 2] == list(b.block_values[:3])
    assert len(a.block_values) == 3 + 10, "ceil(76 / 8) fresh units"
    assert list(b.block_values[3:]) == list(range(13, 23))
    assert a.unique_from == 24


def test_first_unique_is_the_first_id_used_once():
    lists = [array("Q", [1, 2, 3]), array("Q", [1, 2, 4]), array("Q", [1, 5]), array("Q", [1, 2])]
    assert hash_ids.first_unique(lists) == [2, 2, 1, -1]
    assert hash_ids.unique_positions(lists, [48, 40, 20, 30], 16) == [32, 32, 16, 30]


def test_an_id_repeated_within_one_prompt_is_not_unique():
    assert hash_ids.first_unique([array("Q", [7, 7, 8])]) == [2]
    assert hash_ids.first_unique([array("Q", [0])]) == [0]
    assert hash_ids.first_unique([]) == []


@pytest.mark.parametrize("base", [0, 1 << 40])
def test_occurs_once_dense_and_sparse(base):
    values = np.array([base + 3, base + 1, base + 3, base + 0, base + 2, base + 2], dtype=np.uint64)
    assert hash_ids.occurs_once(values).tolist() == [False, True, False, True, False, False]
    assert hash_ids.occurs_once(np.array([base + 5, base + 5], dtype=np.uint64)).tolist() == [False, False]


def test_the_first_unique_id_of_the_first_and_last_list():
    lists = [array("Q", [9, 1]), array("Q", [1, 1 << 50])]
    assert hash_ids.first_unique(lists) == [0, 1]


def _trace(tmp_path, rows: list[str]):
    path = tmp_path / "t.jsonl"
    path.write_text("".join(row + "\n" for row in rows))
    return str(path)


def test_ids_are_kept_up_to_the_prompt_and_shared_prefixes_found(tmp_path):
    path = _trace(tmp_path, [
        '{"input_length": 17, "output_length": 2, "hash_ids": [1, 2, 3]}',
        '{"input_length": 48, "output_length": 2, "hash_ids": [1, 2, 9]}',
        '{"output_length": 2, "hash_ids": [1, 3]}',
    ])
    first, second, third = (s.turns[0] for s in read_mooncake(path, 16).sessions)
    assert list(first.block_values) == [1, 2], "ceil(17 / 16) ids"
    assert third.input_length == 32, "no input_length: the ids' capacity"
    assert first.unique_from == 17, "1 and 2 are shared: no id of its own"
    assert second.unique_from == 32, "9 starts at block 2"
    assert third.unique_from == 16, "3 is used once (the first row's 3 was cut)"


def test_think_time_is_the_timestamp_gap(tmp_path):
    path = _trace(tmp_path, [
        '{"session_id": "a", "timestamp": 100, "output_length": 1, "hash_ids": [1]}',
        '{"session_id": "a", "timestamp": 250, "output_length": 1, "hash_ids": [2]}',
        '{"session_id": "a", "timestamp": 250, "output_length": 1, "hash_ids": [3]}',
    ])
    (session,) = read_mooncake(path, 16).sessions
    assert [t.delay_ms for t in session.turns] == [0.0, 150.0, 0.0]


def test_the_missing_timestamp_warning_names_the_first_line_and_the_count(tmp_path, caplog):
    path = _trace(tmp_path, [
        '{"timestamp": 5, "output_length": 1, "hash_ids": [1]}',
        '{"output_length": 1, "hash_ids": [2]}',
        '{"timestamp": 6, "output_length": 1, "hash_ids": [3]}',
        '{"output_length": 1, "hash_ids": [4]}',
        '{"output_length": 1, "hash_ids": [5]}',
    ])
    with caplog.at_level(logging.WARNING, logger="servesim"):
        read_mooncake(path, 16, timestamped=True)
    (message,) = [r.getMessage() for r in caplog.records if "without a timestamp" in r.getMessage()]
    assert f"{path}:2: 3 session(s)" in message


def test_no_warning_when_every_session_has_a_timestamp_or_timestamps_are_not_used(tmp_path, caplog):
    stamped = _trace(tmp_path, ['{"timestamp": 5, "output_length": 1, "hash_ids": [1]}'])
    with caplog.at_level(logging.WARNING, logger="servesim"):
        read_mooncake(stamped, 16, timestamped=True)
        read_mooncake(_trace(tmp_path, ['{"output_length": 1, "hash_ids": [1]}']), 16)
    assert not [r for r in caplog.records if "without a timestamp" in r.getMessage()]


@pytest.mark.parametrize("ids", ["[]", "null", "[1, -1]", "[1.5]", "[true]"])
def test_bad_hash_ids_name_their_line(tmp_path, ids):
    path = _trace(tmp_path, ['{"output_length": 1, "hash_ids": [1]}', f'{{"output_length": 1, "hash_ids": {ids}}}'])
    with pytest.raises(TraceError, match="hash_ids") as err:
        read_mooncake(path, 16)
    assert ":2" in str(err.value)


def test_an_input_past_the_ids_capacity_is_an_error(tmp_path):
    path = _trace(tmp_path, ['{"input_length": 33, "output_length": 1, "hash_ids": [1, 2]}'])
    with pytest.raises(TraceError, match="exceeds hash_ids capacity 32"):
        read_mooncake(path, 16)
    ok = _trace(tmp_path, ['{"input_length": 32, "output_length": 1, "hash_ids": [1, 2]}'])
    assert read_mooncake(ok, 16).sessions[0].turns[0].input_length == 32
