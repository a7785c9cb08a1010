"""Chained content keys of full KV blocks.

A block's key identifies its tokens *and* everything before it: key(i) = H(key(i−1), content
of block i). Two sequences share a key for block i exactly when their first (i+1)·block_size
tokens are equal, which is all prefix caching needs. Content is described by runs (see
`servesim.traffic.workload`); a block's runs are canonicalised, so equal tokens give equal keys
however the runs were split: trace values (>= 0) as maximal runs of one value, generated
values (< 0) as maximal runs of consecutive values.
"""

from __future__ import annotations

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
    # Skip runs entirely before the first block.
    while index < len(runs):
        count = runs[index][1]
        length = count if count > 0 else -count
        if pos + length > start:
            break
        pos += length
        index += 1
    stop_block = first_block + num_blocks
    b = first_block
    n_runs = len(runs)
    while b < stop_block:
        lo = b * block_size
        if index < n_runs:
            value, count = runs[index]
            if 0 < count and value >= 0 and pos <= lo and lo + block_size <= pos + count:
                # Fast path: whole blocks inside one run of a repeated value.
                whole = min((pos + count - lo) // block_size, stop_block - b)
                content = (value, block_size)
                for _ in range(whole):
                    parent = hash((parent, content))
                    keys.append(parent)
                b += whole
                if pos + count == b * block_size:
                    pos += count
                    index += 1
                continue
        content, index, pos = _slice_runs(runs, lo, lo + block_size, pos, index)
        parent = hash((parent, content))
        keys.append(parent)
        b += 1
    return keys
