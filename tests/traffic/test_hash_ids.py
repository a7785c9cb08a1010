"""Trace hash ids: the array check and the first-unique marking against plain implementations."""

from __future__ import annotations

import json
from array import array
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from servesim.errors import TraceError
from servesim.traffic.hash_ids import DENSE_FACTOR, first_unique, u64_array
from servesim.traffic.mooncake import read_mooncake

U64_MAX = (1 << 64) - 1


def plain_first_unique(id_lists: list[list[int]]) -> list[int]:
    counts = Counter(h for ids in id_lists for h in ids)
    return [next((k for k, h in enumerate(ids) if counts[h] == 1), -1) for ids in id_lists]


def plain_u64(values: list[object]) -> list[int] | None:
    ok = all(type(h) is int and 0 <= h <= U64_MAX for h in values)  # type: ignore[operator]
    return list(values) if ok else None  # type: ignore[arg-type]


small_ids = st.integers(0, 40)
"""Dense ids (counted by table), with many repeats."""
wide_ids = st.one_of(st.integers(0, 40), st.sampled_from([U64_MAX, U64_MAX - 1, 1 << 63, 1 << 32]),
                     st.integers(0, U64_MAX))
"""Ids up to 2**64 - 1 (counted by sorting)."""


@given(st.lists(st.lists(st.one_of(small_ids, wide_ids), max_size=12), max_size=12))
def test_first_unique_matches_counting(id_lists: list[list[int]]) -> None:
    assert first_unique([array("Q", ids) for ids in id_lists]) == plain_first_unique(id_lists)


@given(st.lists(st.lists(small_ids, min_size=1, max_size=12), min_size=1, max_size=12))
def test_first_unique_dense_ids(id_lists: list[list[int]]) -> None:
    assert first_unique([array("Q", ids) for ids in id_lists]) == plain_first_unique(id_lists)
    assert first_unique(id_lists) == plain_first_unique(id_lists)  # plain lists too


def test_first_unique_both_counting_paths() -> None:
    dense = [[0, 1, 2], [0, 1, 3], [2, 4]]
    assert max(max(ids) for ids in dense) < DENSE_FACTOR * 8
    assert first_unique(dense) == [-1, 2, 1]
    sparse = [[U64_MAX, 5, U64_MAX - 1], [U64_MAX, 5, 7], [U64_MAX - 1]]
    assert first_unique(sparse) == [-1, 2, -1]
    assert first_unique([[U64_MAX]]) == [0]
    assert first_unique([]) == []


json_values = st.one_of(st.integers(-3, 3), st.integers(U64_MAX - 2, U64_MAX + 2), st.integers(),
                        st.booleans(), st.floats(allow_nan=False), st.none(), st.text(max_size=3),
                        st.lists(st.integers(0, 3), max_size=2))


@given(st.lists(st.one_of(st.integers(0, U64_MAX), json_values), max_size=8))
def test_u64_array_matches_plain_check(values: list[object]) -> None:
    ids = u64_array(values)
    expected = plain_u64(values)
    assert (ids.tolist() if ids is not None else None) == expected
    assert ids is None or ids.typecode == "Q"


@pytest.mark.parametrize(("hash_ids", "bad"), [
    ([1, 2, True], "True"), ([1, -1, 2], "-1"), ([1 << 64, 2], str(1 << 64)), ([1.0], "1.0"),
    ([3, "4"], "'4'"), ([None], "None"), ([False, 7], "False"),
])
def test_mooncake_names_the_bad_hash_id(tmp_path, hash_ids: list[object], bad: str) -> None:
    trace = tmp_path / "t.jsonl"
    good = {"hash_ids": [0, 1], "output_length": 2}
    trace.write_text(json.dumps(good) + "\n" + json.dumps({"hash_ids": hash_ids, "output_length": 2}) + "\n")
    with pytest.raises(TraceError) as caught:
        read_mooncake(str(trace), 4)
    message = str(caught.value)
    assert str(trace) in message and ":2" in message
    assert f"hash_ids must hold unsigned 64-bit integers (got {bad})" in message


def test_mooncake_keeps_the_prompt_blocks_and_unique_start(tmp_path) -> None:
    trace = tmp_path / "t.jsonl"
    rows = [{"hash_ids": [0, 1, 2, U64_MAX], "input_length": 9, "output_length": 1},
            {"hash_ids": [0, 1, 5], "output_length": 1},
            {"hash_ids": [0, 1], "input_length": 5, "output_length": 1}]
    trace.write_text("".join(json.dumps(row) + "\n" for row in rows))
    turns = [s.turns[0] for s in read_mooncake(str(trace), 4).sessions]
    assert [list(t.block_values) for t in turns] == [[0, 1, 2], [0, 1, 5], [0, 1]]
    assert [t.unique_from for t in turns] == [8, 8, 5]


def _decoded(lines: list[str]) -> list[object]:
    """What `read_jsonl(..., id_list="hash_ids")` gives for `lines`, the 'Q' arrays as lists."""
    from servesim.traffic.jsonl import _parse_chunk

    rows = [row for _, row in _parse_chunk("t.jsonl", list(enumerate(lines, start=1)), "hash_ids")]
    return [{k: list(v) if isinstance(v, array) else v for k, v in row.items()} for row in rows]


@given(st.lists(st.lists(st.integers(0, U64_MAX), min_size=1, max_size=6), min_size=1, max_size=5))
def test_lifted_id_lists_decode_as_json_does(id_lists: list[list[int]]) -> None:
    lines = [json.dumps({"timestamp": k, "hash_ids": ids}) + "\n" for k, ids in enumerate(id_lists)]
    assert _decoded(lines) == [json.loads(line) for line in lines]


@pytest.mark.parametrize("odd", [
    '{"hash_ids": [1, 2], "hash_ids": null}',  # the later duplicate wins
    '{"hash_ids": [1, 2], "hash\\u005fids": null}',  # escaped spelling of the same key
    '{"m": {"hash_ids": [1, 2]}}',  # not at the top level
    '{"hash_ids": [1, 2], "m": {"hash_ids": [3]}}',
    '{"hash_ids": []}',
    '{"hash_ids": [1,, 2]}',
    '{"hash_ids": [1 2]}',
    '{"hash_ids": [18446744073709551615]}',
    '{"hash_ids": [18446744073709551616]}',
    '{"hash_ids": [1, 2.5]}',
    '{"hash_ids": [1,2 , 3]}',
])
def test_id_lists_that_cannot_be_lifted_decode_as_written(odd: str) -> None:
    lines = ['{"hash_ids": [7, 8]}\n', odd + "\n", '{"hash_ids": [9]}']
    try:
        expected = [json.loads(line) for line in lines]
    except ValueError:
        with pytest.raises(TraceError, match="t.jsonl:2: invalid JSON"):
            _decoded(lines)
        return
    assert _decoded(lines) == expected


def test_a_leading_zero_is_invalid_json() -> None:
    with pytest.raises(TraceError, match="t.jsonl:1: invalid JSON"):
        _decoded(['{"hash_ids": [1, 02]}\n'])
