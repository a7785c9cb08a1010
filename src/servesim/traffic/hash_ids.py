"""Trace hash ids: checked into compact arrays, and which occur exactly once in a whole trace (the
blocks no other request shares)."""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from typing import Any

import numpy as np

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
