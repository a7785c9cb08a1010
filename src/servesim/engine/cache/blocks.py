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

import math
from itertools import islice

from servesim.traffic.workload import Run, expand_hash_ids

ROOT_KEY = 0x5E57E51


class _Edge:
    """A stretch of whole runs in a `KeyMemo` trie: the runs, their keys and the node after."""

    __slots__ = ("runs", "keys", "child")

    def __init__(self, runs: list[Run], keys: list[int], child: dict[Run, _Edge]) -> None:
        self.runs = runs
        self.keys = keys
        self.child = child


class KeyMemo:
    """Keys of chain prefixes made of whole runs, as a radix trie from the chain's start (one
    per block size): a node maps the first run of each edge leaving it to that `_Edge`.

    Prompts sharing a prefix (a trace's common system prompts and histories) then key it once,
    and their key lists share the same int objects. Bounded: past `limit` keys it starts afresh.
    """

    __slots__ = ("roots", "size", "limit")

    def __init__(self, limit: int) -> None:
        self.roots: dict[int, dict[Run, _Edge]] = {}
        self.size = 0
        self.limit = limit

    def prefix(self, runs: list[Run], block_size: int, wanted: int, keys: list[int]) -> tuple[int, tuple]:
        """Append the memo's keys of the leading runs of `runs` (at most `wanted` blocks) to the
        empty `keys`; returns how many runs that covered and where the chain goes on (for `add`)."""
        if self.size > self.limit:
            self.roots.clear()
            self.size = 0
        node = self.roots.setdefault(block_size, {})
        i, n = 0, len(runs)
        while i < n:
            edge = node.get(runs[i])
            if edge is None:
                break
            seg = edge.runs
            m = len(seg)
            if len(keys) + len(edge.keys) <= wanted and runs[i:i + m] == seg:
                keys.extend(edge.keys)
                i += m
                node = edge.child
                continue
            j = 1  # the chain leaves the edge (or stops) after its j-th run
            while j < m and i + j < n and runs[i + j] == seg[j]:
                j += 1
            cut = sum(count // block_size for _, count in seg[:j])
            while len(keys) + cut > wanted:
                j -= 1
                cut -= seg[j][1] // block_size
            keys.extend(edge.keys[:cut])
            return i + j, (node, edge, j, cut)
        return i, (node, None, 0, 0)

    def add(self, where: tuple, runs: list[Run], keys: list[int]) -> None:
        """Record `runs` (whole runs, with their `keys`), which follow on from `where` (as
        `prefix` returned it)."""
        node, edge, j, cut = where
        if edge is not None and j:  # split the edge where the chain leaves it
            tail = _Edge(edge.runs[j:], edge.keys[cut:], edge.child)
            edge.runs = edge.runs[:j]
            edge.keys = edge.keys[:cut]
            node = edge.child = {tail.runs[0]: tail}
        node[runs[0]] = _Edge(runs, keys, {})
        self.size += len(keys)


MEMO = KeyMemo(1 << 18)
"""The process's memo (keys are a pure function of content, so it never changes a result)."""


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
               parent: int = ROOT_KEY, memo: KeyMemo | None = MEMO) -> list[int]:
    """Keys of blocks [first_block, first_block + num_blocks) of the token sequence `runs`.

    `parent` is the key of block `first_block − 1` (ROOT_KEY for the first block). A chain's
    leading whole runs go through `memo` (None: keyed afresh).
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
    where = None
    if memo is not None and not first_block and not index and parent == ROOT_KEY:  # a chain's start
        index, where = memo.prefix(runs, block_size, num_blocks, keys)
        if index:
            b = len(keys)
            pos = b * block_size
            parent = keys[-1]
            previous = (runs[index - 1][0], block_size)
    n_runs = len(runs)
    while b < stop_block:
        lo = b * block_size
        if pos == lo and index < n_runs:
            first_run, before = index, len(keys)
            index, parent, previous, done = _whole_runs(runs, index, block_size, stop_block - b, parent,
                                                        previous, keys)
            if where is not None:
                if done:
                    assert memo is not None
                    memo.add(where, runs[first_run:index], keys[before:])
                where = None
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
    before = len(keys)
    last = previous[0] if previous is not None and previous[1] == block_size else None
    size, whole = -1, 0  # size: the run length `whole` was worked out for
    for value, count in islice(runs, index, None):
        if count != size:
            whole = count // block_size
            if whole <= 0 or whole * block_size != count:
                break
            size = count
        if value < 0 or whole > blocks_left:
            break
        first = parent + 1 if value == last else hash((parent, (value, block_size)))
        parent = first + whole - 1
        extend(range(first, parent + 1))
        last = value
        blocks_left -= whole
        index += 1
    done = len(keys) - before
    return index, parent, ((last, block_size) if done else previous), done


class RangeKeys:
    """Keys of the prompts whose trace blocks are consecutive ids (a slice of one `range`, as
    an `applied_compute_agentic` session's turns are): every turn's prompt extends the one
    before, so the keys of one id range are kept and extended, and a turn keys only what is
    new instead of its whole history. Bounded: past `limit` keys it starts afresh."""

    __slots__ = ("chains", "size", "limit")

    def __init__(self, limit: int) -> None:
        self.chains: dict[tuple[int, int, int, int], list[int]] = {}
        self.size = 0
        self.limit = limit

    def keys(self, values: range, trace_block: int, block_size: int, num_blocks: int) -> list[int]:
        """A list whose first `num_blocks` entries are the keys of the first `num_blocks` blocks
        of ``expand_hash_ids(values, trace_block, ·)`` (each block inside the content)."""
        chain_id = (values.start, values.step, trace_block, block_size)
        keys = self.chains.get(chain_id)
        if keys is None:
            if self.size > self.limit:
                self.chains.clear()
                self.size = 0
            keys = self.chains[chain_id] = []
        have = len(keys)
        if have < num_blocks:
            start = window_start(have, trace_block, block_size)
            first_value = start // trace_block
            runs = expand_hash_ids(values[first_value:], trace_block, num_blocks * block_size - start)
            keys += chain_keys(runs, block_size, num_blocks - have, have - start // block_size,
                               keys[-1] if keys else ROOT_KEY)
            self.size += num_blocks - have
        return keys


def window_start(have: int, trace_block: int, block_size: int) -> int:
    """The latest token position at which a keying of blocks from `have` on may start its runs:
    on a trace block and a KV block boundary, at or before the block before `have`."""
    step = math.lcm(trace_block, block_size)
    return (max(have - 1, 0) * block_size) // step * step


RANGE_KEYS = RangeKeys(1 << 22)
"""The process's range-prompt keys (a pure function of content, so it never changes a result)."""
