"""Chained content keys of full KV blocks.

A block's key identifies its tokens *and* everything before it: key(i) = H(key(i−1), content
of block i), except that a block repeating the content of the block before it takes key(i−1) + 1
(a trace block of one value spans several KV blocks: their keys are then one `range`, not one
hash each). Two sequences share a key for block i exactly when their first (i+1)·block_size
tokens are equal (barring 64-bit hash collisions, as before), which is all prefix caching needs. Content is described by runs (see
`servesim.traffic.workload`); a block's runs are canonicalised, so equal tokens give equal keys
however the runs were split: trace values (>= 0) as maximal runs of one value, generated
values (< 0) as maximal runs of consecutive values.
"""

from __future__ import annotations

from itertools import islice

from servesim.traffic.workload import Run

ROOT_KEY = 0x5E57E51


def _slice_runs(runs: list[Run], start: int, stop: int, pos: int, index: int) -> tuple[tuple, int, int]:
    """Canonical content of tokens [start, stop), scanning runs from (index, pos = its start).

    Returns the content tuple and the run index/position to resume from for the next block.
    """
    parts: list[list[int]] = []
    while pos < stop:
        value, count = runs[index]
        length = count if count > 0 else -count
        end = pos + length
        lo = start if start > pos else pos
        hi = stop if stop < end else end
        if hi > lo:
            if count > 0 and value >= 0:
                if parts and parts[-1][1] > 0 and parts[-1][0] == value:
                    parts[-1][1] += hi - lo
                else:
                    parts.append([value, hi - lo])
            else:
                first = value + (lo - pos) if count < 0 else value
                if parts and parts[-1][1] < 0 and parts[-1][0] - parts[-1][1] == first:
                    parts[-1][1] -= hi - lo
                else:
                    parts.append([first, -(hi - lo)])
        if end <= stop:
            pos = end
            index += 1
        else:
            break
    if len(parts) == 1:
        return (parts[0][0], parts[0][1]), index, pos
    return tuple((v, c) for v, c in parts), index, pos


def chain_keys(runs: list[Run], block_size: int, num_blocks: int, first_block: int = 0,
               parent: int = ROOT_KEY) -> list[int]:
    """Keys of blocks [first_block, first_block + num_blocks) of the token sequence `runs`.

    `parent` is the key of block `first_block − 1` (ROOT_KEY for the first block).
    """
    keys: list[int] = []
    index = 0
    pos = 0
    start = first_block * block_size
    if first_block:  # the content of the block before, for the repeat rule
        start -= block_size
    # Skip runs entirely before the first block (or the one before it).
    while index < len(runs):
        count = runs[index][1]
        length = count if count > 0 else -count
        if pos + length > start:
            break
        pos += length
        index += 1
    previous: tuple | None = None
    if first_block:
        previous, index, pos = _slice_runs(runs, start, start + block_size, pos, index)
    stop_block = first_block + num_blocks
    b = first_block
    n_runs = len(runs)
    while b < stop_block:
        lo = b * block_size
        if pos == lo and index < n_runs:
            index, parent, previous, done = _whole_runs(runs, index, block_size, stop_block - b, parent, previous, keys)
            if done:
                b += done
                pos = lo = b * block_size
                if b == stop_block:
                    break
        if index < n_runs:
            value, count = runs[index]
            if 0 < count and value >= 0 and pos <= lo and lo + block_size <= pos + count:
                # Fast path: whole blocks inside one run of a repeated value.
                whole = min((pos + count - lo) // block_size, stop_block - b)
                content = (value, block_size)
                first = parent + 1 if content == previous else hash((parent, content))
                parent = first + whole - 1
                keys.extend(range(first, parent + 1))
                previous = content
                b += whole
                if pos + count == b * block_size:
                    pos += count
                    index += 1
                continue
        content, index, pos = _slice_runs(runs, lo, lo + block_size, pos, index)
        parent = parent + 1 if content == previous else hash((parent, content))
        keys.append(parent)
        previous = content
        b += 1
    return keys


def _whole_runs(runs: list[Run], index: int, block_size: int, blocks_left: int, parent: int,
                previous: tuple | None, keys: list[int]) -> tuple[int, int, tuple | None, int]:
    """Append the keys of the runs from `index` on that are whole blocks of one value (at most
    `blocks_left` blocks); returns the next run index, the last key, its content and how many
    blocks were keyed."""
    extend = keys.extend
    done = 0
    for value, count in islice(runs, index, None):
        whole = count // block_size
        if value < 0 or whole <= 0 or whole * block_size != count or whole > blocks_left - done:
            break
        content = (value, block_size)
        first = parent + 1 if content == previous else hash((parent, content))
        parent = first + whole - 1
        extend(range(first, parent + 1))
        previous = content
        done += whole
        index += 1
    return index, parent, previous, done
