"""The Mooncake reader's fast path for common rows reads exactly what the general one does."""

from __future__ import annotations

import copy
from array import array

from hypothesis import given, settings
from hypothesis import strategies as st

from servesim.limits import MAX_MS, MAX_TOKENS
from servesim.traffic.mooncake import _parse_row, _plain_row

_EDGES = [0, 1, -1, MAX_TOKENS, MAX_TOKENS + 1, int(MAX_MS), int(MAX_MS) + 1, 10**400]
_ODD = st.one_of(st.sampled_from(_EDGES), st.floats(allow_nan=True, allow_infinity=True), st.booleans(), st.none(),
                 st.text(max_size=2), st.lists(st.integers(0, 2**64 - 1), max_size=3))
_OTHER_KEYS = ["session_id", "delay", "created_time", "output_tokens", "input_tokens", "output_token_ids"]


@st.composite
def _rows(draw):
    """Mostly rows of the common shape (as the JSONL reader gives them), some with one odd value,
    an extra key or a missing one."""
    ids = draw(st.lists(st.integers(0, 2**64 - 1), min_size=1, max_size=8))
    row = {"timestamp": draw(st.one_of(st.integers(0, 10**6), st.floats(0, 1e6))),
           "input_length": draw(st.integers(1, 600 * len(ids))), "output_length": draw(st.integers(0, 100)),
           "hash_ids": array("Q", ids)}
    change = draw(st.sampled_from(["none", "none", "value", "add", "drop"]))
    if change == "value":
        row[draw(st.sampled_from(sorted(row)))] = draw(_ODD)
    elif change == "add":
        row[draw(st.sampled_from(_OTHER_KEYS))] = draw(st.one_of(st.integers(0, 3), st.text(max_size=2)))
    elif change == "drop":
        del row[draw(st.sampled_from(sorted(row)))]
    return row


def _read(parse, row, block_size):
    row = copy.deepcopy(row)  # both parsers trim the hash ids in place
    try:
        result = parse(row, block_size)
    except ValueError as exc:  # every bad value is one (an OverflowError would be a bug)
        return type(exc), str(exc)
    if result is None:
        return None
    turn, timestamp, delay = result
    return (list(turn.block_values), turn.block_size, turn.input_length, turn.max_output_tokens, turn.delay_ms,
            turn.output_ids, turn.unique_from, type(timestamp), timestamp, delay)


@settings(max_examples=300)
@given(_rows(), st.sampled_from([1, 16, 512]))
def test_fast_path_reads_rows_as_the_general_parser(row, block_size):
    fast = _read(_plain_row, row, block_size)
    if fast is not None:
        assert fast == _read(_parse_row, row, block_size)


def test_fast_path_takes_the_common_row():
    row = {"timestamp": 3, "input_length": 600, "output_length": 2, "hash_ids": array("Q", [4, 5, 6])}
    assert _read(_plain_row, row, 512) == _read(_parse_row, row, 512) == (
        [4, 5], 512, 600, 2, 0.0, None, 1 << 62, float, 3.0, None)
