"""Trace hash ids: checked into compact arrays, and which occur exactly once in a whole trace (the
blocks no other request shares)."""

from __future__ import annotations

import re
import warnings
from array import array
from collections.abc import Sequence
from itertools import accumulate, pairwise, repeat
from typing import Any

import numpy as np

U64_MAX = (1 << 64) - 1
DENSE_FACTOR = 4
"""Ids below ``DENSE_FACTOR`` × their number are counted in a table indexed by id (traces number
their blocks from 0); larger ones are counted by sorting."""


def u64_array(values: list[Any]) -> array | None:
    """`values` (as decoded from JSON) as an array of unsigned 64-bit integers (type 'Q'); None
    unless every value is an `int` (not a `bool`) in [0, 2**64)."""
    try:
        ids = array("Q", values)
    except (TypeError, OverflowError):  # a float, string, null, list or object; out of range
        return None
    return ids if list(map(type, values)).count(int) == len(values) else None  # it takes bools as 1, 0


def lift_id_lists(text: str, rows: int, key: str) -> tuple[str, list[array]] | None:
    """Take the ids out of `text`, `rows` JSON objects one per line (joined by commas), before
    JSON decodes them, when each object's `key` is a plainly written list of unsigned 64-bit
    integers (decimal digits, commas and spaces): the text with each such list replaced by
    ``null`` and the lists, in order, as arrays of type 'Q' — several times faster than decoding
    every id as a Python integer. None (decode the text as it is) unless that is surely so:
    every line names `key` exactly once (and nothing is escaped), with a list of well-formed
    JSON integers below 2**64 - 1. Whoever decodes the text checks that `key` is ``null`` at the
    top level of every object before putting the arrays there."""
    if "\\" in text or text.count(f'"{key}"') != rows:
        return None
    parts = re.compile(f'"{re.escape(key)}": \\[([^\\]]*)\\]').split(text)  # checked in `_plain_ids`
    texts = parts[1::2]
    if len(texts) != rows or "\n" in parts[0] or parts[-1].count("\n") > 1:
        return None
    if list(map(str.count, parts[2:-1:2], repeat("\n"))).count(1) != rows - 1:
        return None  # a line with two lists, one with none
    ids = _plain_ids(texts)
    if ids is None:
        return None
    return f'"{key}": null'.join(parts[0::2]), ids


def _plain_ids(texts: list[str]) -> list[array] | None:
    """The ids of each of `texts`, lists of digits, commas and spaces, as arrays of type 'Q';
    None unless each is a non-empty list of integers below 2**64 - 1 written as JSON allows."""
    joined = ",".join(texts).encode()
    chars = np.frombuffer(b"," + joined + b",", dtype=np.uint8)
    digit = (chars >= ord("0")) & (chars <= ord("9"))
    if not texts or not (digit | (chars == ord(",")) | (chars == ord(" "))).all():
        return None
    if (digit[2:] & (chars[1:-1] == ord("0")) & ~digit[:-2]).any():
        return None  # a number starting with a zero and more digits: JSON forbids it, numpy reads it
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy warns when the text does not parse to its end
        try:
            values = np.fromstring(joined, dtype=np.uint64, sep=",")
        except (ValueError, DeprecationWarning):
            return None
    ends = list(accumulate([text.count(",") + 1 for text in texts], initial=0))
    if len(values) != ends[-1] or int(values.max()) == U64_MAX:  # an empty item; saturated
        return None
    ids = array("Q")
    ids.frombytes(values.tobytes())
    return [ids[a:b] for a, b in pairwise(ends)]


def first_unique(id_lists: Sequence[Sequence[int]]) -> list[int]:
    """Per list of unsigned 64-bit ids (best as arrays of type 'Q'), the index of its first id
    that occurs exactly once over all the lists (-1 when it has none)."""
    if not id_lists:
        return []
    joined = array("Q")
    for ids in id_lists:
        joined.extend(ids)
    values = np.frombuffer(joined, dtype=np.uint64)
    lengths = np.fromiter(map(len, id_lists), dtype=np.intp, count=len(id_lists))
    starts = np.zeros(len(lengths), dtype=np.intp)
    np.cumsum(lengths[:-1], out=starts[1:])
    singles = np.append(np.flatnonzero(occurs_once(values)), len(values))
    first = singles[np.searchsorted(singles, starts)]
    first = np.where(first < starts + lengths, first - starts, -1)
    return first.tolist()


def unique_positions(id_lists: Sequence[Sequence[int]], lengths: Sequence[int], block_size: int) -> list[int]:
    """Per prompt (its hash ids, `block_size` tokens each, and its token length), the first token
    position no other prompt shares: where its first id occurring once starts, else its length."""
    return [length if k < 0 else k * block_size
            for length, k in zip(lengths, first_unique(id_lists), strict=True)]


def occurs_once(values: np.ndarray) -> np.ndarray:
    """Whether each of `values` (unsigned 64-bit) occurs exactly once among them."""
    if not len(values):
        return np.zeros(0, dtype=bool)
    if int(values.max()) < DENSE_FACTOR * len(values):
        indices = values.astype(np.intp)
        return np.bincount(indices)[indices] == 1
    ordered = np.sort(values)
    differs = ordered[1:] != ordered[:-1]
    alone = np.ones(len(ordered), dtype=bool)
    alone[1:] &= differs
    alone[:-1] &= differs
    singles = ordered[alone]
    if not len(singles):
        return np.zeros(len(values), dtype=bool)
    at = np.searchsorted(singles, values)
    return singles[np.minimum(at, len(singles) - 1)] == values
