"""Decode latencies of a compiled AIC engine, many at a time, equal bit for bit to its answers.

``predict_decode_latency(b, ctx, 2)`` is the sum, in op order, of the engine's generation ops
at ``s = ctx + 1``; only the generation-attention op depends on ``s``. That op averages five
lookups of the measured table at ``s_i`` spread over ``[0.9 s, 1.1 s]`` and scales the mean
by its layer count. A lookup inside the table's range is cheap for the engine (~2 µs a call);
one past it ("hold": SOL(query) / a util blended from the four nearest measured points in
log2 space) makes the engine walk every point of the table each time (~150 µs a call, the
bulk of a long-context trace's first run).

`DecodeLookup` answers a call whose five lookups are all inside the range by asking the engine
(cheap), and any other call itself: the in-range lookups as the engine's grid resolver does
them, the held ones vectorised over blocks of contexts (numpy over the few measured points
that can be among the nearest, proven by distance bounds), then the same sums in the same
order — the same IEEE operations, so the same doubles. It applies to the plain generation
attention op (``GenerationAttention``, default lane, SILICON database) and checks its first
answers per batch against the engine; anything else, or any disagreement, leaves every call
to the engine. ``tests/perf/test_aicdecode.py`` proves equality over the tables' whole grid.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from pathlib import Path
from typing import Any

import numpy as np

_SAMPLES = 5
_NN = 4
"""Hold anchors (the engine's ``nn_leaves``); the next point's distance is the support radius."""
_BLOCK = 256
"""Contexts per vectorised block of held lookups."""
_CHECKS = 2
_CHECK_EVERY = 64
"""The first `_CHECKS` blocks of each kind (with held lookups or without), and every
`_CHECK_EVERY`-th, are checked at one context against the engine; a difference turns the
lookup off (a guard: the tests prove equality over the whole grid)."""
_KV_MEMORY = {"bfloat16": 2.0, "fp8": 1.0, "int8": 1.0}


class _Miss(Exception):
    pass


class DecodeLookup:
    """Exact ``predict_decode_latency(batch, ctx, 2)`` values of one engine (see the module)."""

    def __init__(self, engine: Any, ops: list[dict[str, Any]], attn_index: int, table: dict[int, Any],
                 sol: _Sol, n: int) -> None:
        self._engine = engine
        self._ops = ops
        self._attn = attn_index
        self._scale = float(ops[attn_index]["GenerationAttention"]["scale_factor"])
        self._table = _Table(table)
        self._sol = sol
        self._n = float(n)
        self._leaves = _Leaves(table, sol)
        self._others: dict[int, list[float] | None] = {}
        self._blocks: dict[tuple[int, int], np.ndarray | None] = {}
        self._made = {False: 0, True: 0}
        """Blocks made without and with held lookups (some are checked against the engine)."""
        self.enabled = True

    def decode(self, batch: int, contexts: list[int]) -> list[float]:
        """The engine's ``predict_decode_latency(batch, c, 2)`` for each c of `contexts`."""
        engine = self._engine
        out: list[float] = []
        for c in contexts:
            block = self._block(batch, c) if self.enabled else None
            out.append(engine.predict_decode_latency(batch, c, 2) if block is None else float(block[c % _BLOCK]))
        return out

    def _block(self, batch: int, ctx: int) -> np.ndarray | None:
        """The values at `batch` for the `_BLOCK` contexts around `ctx`, checked at `ctx` against
        the engine when first made (None: the engine answers these itself)."""
        key = (batch, ctx // _BLOCK)
        if key in self._blocks:
            return self._blocks[key]
        block, held = self.compute(batch, np.arange(key[1] * _BLOCK, (key[1] + 1) * _BLOCK, dtype=np.int64))
        made = self._made[held] = self._made[held] + 1
        if block is not None and (made <= _CHECKS or made % _CHECK_EVERY == 0):
            if self._engine.predict_decode_latency(batch, ctx, 2) != float(block[ctx % _BLOCK]):
                self.enabled = False
                block = None
        self._blocks[key] = block
        return block

    def compute(self, batch: int, contexts: np.ndarray) -> tuple[np.ndarray | None, bool]:
        """The values at `contexts`, and whether any lookup was held (None: not reproducible)."""
        others = self._other_ops(batch)
        if others is None or batch < 1:
            return None, False
        s = np.maximum(contexts + 1, 1)
        s_min = np.maximum(1, (s * 0.9).astype(np.int64))
        s_max = np.maximum(s_min, (s * 1.1).astype(np.int64))
        samples = [s_min + (s_max - s_min) * i // (_SAMPLES - 1) for i in range(_SAMPLES)]
        wanted = np.unique(np.concatenate(samples))
        values, status = self._table.lookup((self._n, float(batch)), wanted.astype(np.float64), self._sol)
        if np.any(status == _MISS):
            return None, False
        held = status == _OUT
        any_held = bool(np.any(held))
        if any_held:
            if not self._leaves.valid:
                return None, True
            values[held] = self._leaves.hold(self._n, float(batch), wanted[held])
        total = np.zeros(len(contexts))
        for column in samples:
            total = total + values[np.searchsorted(wanted, column)]
        attn = np.maximum(total / _SAMPLES, 0.0) * self._scale
        acc = np.zeros(len(contexts))
        for i, value in enumerate(others):
            acc = acc + (attn if i == self._attn else value)
        return acc, any_held

    def _other_ops(self, batch: int) -> list[float] | None:
        """The op values at `batch` (the attention op's is a placeholder); None when one of the
        others varies with the context."""
        if batch in self._others:
            return self._others[batch]
        indices = list(range(len(self._ops)))
        first = self._engine.evaluate_generation_ops(indices, batch, 2, 1.0, 0, None)
        second = self._engine.evaluate_generation_ops(indices, batch, 65537, 1.0, 0, None)
        found: list[float] | None = [v[1] for v in first]
        if any(a[1] != b[1] for i, (a, b) in enumerate(zip(first, second, strict=True)) if i != self._attn):
            found = None
        self._others[batch] = found
        return found


# -- the grid resolver (inside the range) ---------------------------------------------------------

_OK, _OUT, _MISS = 0, 1, 2


class _Table:
    """The slice as nested levels with the innermost (context) axis as arrays."""

    def __init__(self, table: dict[int, Any]) -> None:
        self.root = self._level(table)

    @classmethod
    def _level(cls, node: dict[int, Any]) -> Any:
        first = next(iter(node.values()), None)
        if isinstance(first, dict):
            return {k: cls._level(v) for k, v in node.items()}
        return (np.array(list(node), dtype=np.float64), np.array(list(node.values()), dtype=np.float64))

    def lookup(self, outer: tuple[float, ...], s: np.ndarray, sol: _Sol) -> tuple[np.ndarray, np.ndarray]:
        """The engine's nested bracket-and-blend lookup at (*outer, s) for each s: raw blends, a
        lone surviving branch rescaled by the SOL ratio along the dropped axis; status `_OUT`
        past the data (the hold's), `_MISS` where the engine finds nothing."""
        return _resolve(self.root, outer, 0, s, sol)


def _resolve(node: Any, outer: tuple[float, ...], depth: int, s: np.ndarray,
             sol: _Sol) -> tuple[np.ndarray, np.ndarray]:
    count = len(s)
    if depth == len(outer):
        keys, lats = node
        if not len(keys):
            return np.zeros(count), np.full(count, _MISS)
        status = np.where((s < keys[0]) | (s > keys[-1]), _OUT, _OK)
        if len(keys) == 1:
            return np.full(count, lats[0]), status
        idx = np.clip(np.searchsorted(keys, s, side="left"), 1, len(keys) - 1)
        lo, hi = idx - 1, idx
        with np.errstate(invalid="ignore", divide="ignore"):
            w = (s - keys[lo]) / (keys[hi] - keys[lo])
            values = lats[lo] + (lats[hi] - lats[lo]) * w
        at = np.searchsorted(keys, s, side="left")
        exact = (at < len(keys)) & (keys[np.minimum(at, len(keys) - 1)] == s)
        values = np.where(exact, lats[np.minimum(at, len(keys) - 1)], values)
        return values, status
    if not node:
        return np.zeros(count), np.full(count, _MISS)
    c = outer[depth]
    if c >= 0.0 and c == int(c) and int(c) in node:
        return _resolve(node[int(c)], outer, depth + 1, s, sol)
    keys = list(node)
    if c < keys[0] or c > keys[-1]:
        return np.zeros(count), np.full(count, _OUT)
    pos = bisect_left(keys, c)
    k_lo, k_hi = keys[pos - 1], keys[pos]
    v_lo, st_lo = _resolve(node[k_lo], outer, depth + 1, s, sol)
    v_hi, st_hi = _resolve(node[k_hi], outer, depth + 1, s, sol)
    ok_lo, ok_hi = st_lo == _OK, st_hi == _OK
    w = (c - k_lo) / (k_hi - k_lo)
    values = np.where(ok_lo & ok_hi, v_lo + (v_hi - v_lo) * w, 0.0)
    status = np.where(ok_lo | ok_hi, _OK, np.where((st_lo == _OUT) | (st_hi == _OUT), _OUT, _MISS))
    lone = ok_lo ^ ok_hi
    if np.any(lone):
        coords = [*outer[:depth], c, *outer[depth + 1:]]
        sol_q = sol.at(coords, s)
        for ok, k, v in ((ok_lo & ~ok_hi, k_lo, v_lo), (ok_hi & ~ok_lo, k_hi, v_hi)):
            if np.any(ok):
                snapped = list(coords)
                snapped[depth] = float(k)
                sol_s = sol.at(snapped, s)
                usable = np.isfinite(sol_q) & np.isfinite(sol_s) & (sol_q > 0.0) & (sol_s > 0.0)
                with np.errstate(invalid="ignore", divide="ignore"):
                    values = np.where(ok, np.where(usable, v * (sol_q / sol_s), v), values)
    return values, status


# -- speed of light and the hold (past the range) --------------------------------------------------

class _Sol:
    """The generation-attention speed of light (ms) at (n, b, s)."""

    def __init__(self, n_kv_lookup: int, head_size: int, window: int, kv_memory: float, flops: float,
                 mem_bw: float) -> None:
        self.n_kv_lookup, self.h, self.window = n_kv_lookup, float(head_size), window
        self.kv_memory, self.flops, self.mem_bw = kv_memory, flops, mem_bw

    def scalar(self, n: float, b: float, s: float) -> float:
        return float(self.array(n, b, np.array([s], dtype=np.float64))[0])

    def at(self, outer: list[float], s: np.ndarray) -> np.ndarray:
        """The SOL at (*outer, s) for each s."""
        return self.array(outer[0], outer[1], s.astype(np.float64))

    def array(self, n: Any, b: Any, s: np.ndarray) -> np.ndarray:
        n_kv = n if self.n_kv_lookup == 0 else float(self.n_kv_lookup)
        kv_len = np.minimum(s - 1.0, float(self.window)) if self.window > 0 else s - 1.0
        h = self.h
        ops = 2.0 * b * n * h * 2.0 * kv_len
        mem = b * (n * h * 2.0 + 2.0 * n_kv * kv_len * h * self.kv_memory + n * h * 2.0)
        return np.maximum(ops / self.flops * 1000.0, mem / self.mem_bw * 1000.0)


def _log2(values: Any) -> np.ndarray:
    """log2 of each value as the C library computes it (numpy's SIMD log2 may differ in the last bit)."""
    return np.array([math.log2(max(float(v), 1e-12)) for v in values], dtype=np.float64)


_INT_LOG2 = np.zeros(0)


def _int_log2(values: np.ndarray) -> np.ndarray:
    """`_log2` of positive integers, from a table grown as needed."""
    global _INT_LOG2
    top = int(values.max()) + 1
    if top > len(_INT_LOG2):
        size = max(top, 2 * len(_INT_LOG2), 1 << 16)
        _INT_LOG2 = np.concatenate([_INT_LOG2, _log2(range(len(_INT_LOG2), size))])
        _INT_LOG2[0] = math.log2(1e-12)
    return _INT_LOG2[values]


class _Leaves:
    """The measured points of one table slice, in the engine's visiting order."""

    def __init__(self, table: dict[int, Any], sol: _Sol) -> None:
        rows = [(n, b, s, lat) for n, by_b in table.items() for b, by_s in by_b.items() for s, lat in by_s.items()]
        coords = np.array([r[:3] for r in rows], dtype=np.float64).reshape(-1, 3)
        self.lat = np.array([r[3] for r in rows], dtype=np.float64)
        self.sol = sol.array(coords[:, 0], coords[:, 1], coords[:, 2])
        self.logs = [_log2(coords[:, i]) for i in range(3)]
        self.sol_fn = sol
        self.valid = bool(len(rows) > _NN and np.all(np.isfinite(self.lat)) and np.all(self.lat > 0.0)
                          and np.all(np.isfinite(self.sol)) and np.all(self.sol > 0.0))

    def hold(self, n: float, b: float, s: np.ndarray) -> np.ndarray:
        """The engine's past-the-range value at (n, b, s) for each s (float64 array)."""
        if not self.valid:
            raise _Miss()
        ln, lb, ls = self.logs
        dn, db = ln - math.log2(max(n, 1e-12)), lb - math.log2(max(b, 1e-12))
        base = dn * dn + db * db
        q = _int_log2(s)
        q_lo, q_hi = float(q.min()), float(q.max())
        gap = np.where(ls < q_lo, q_lo - ls, np.where(ls > q_hi, ls - q_hi, 0.0))
        lower = base + gap * gap
        upper = base + np.maximum((ls - q_lo) ** 2, (ls - q_hi) ** 2)
        bound = np.partition(upper, _NN)[_NN]
        cand = np.flatnonzero(lower <= bound * (1.0 + 1e-9) + 1e-12)
        delta = ls[cand][None, :] - q[:, None]
        dist = np.sqrt(base[cand][None, :] + delta * delta)
        order = np.argsort(dist, axis=1, kind="stable")[:, :_NN + 1]
        d = np.take_along_axis(dist, order, axis=1)
        picked = cand[order]
        radius = d[:, _NN:_NN + 1]
        near = d[:, :_NN]
        t = np.maximum(radius - near, 0.0) / (radius * near + 1e-12)
        w = t * t
        wsum = np.zeros(len(s))
        util = np.zeros(len(s))
        ratio = self.sol[picked[:, :_NN]] / self.lat[picked[:, :_NN]]
        for i in range(_NN):
            wsum = wsum + w[:, i]
        if np.any(wsum <= 0.0):
            w = np.where((wsum <= 0.0)[:, None], 1.0, w)
            wsum = np.zeros(len(s))
            for i in range(_NN):
                wsum = wsum + w[:, i]
        for i in range(_NN):
            util = util + w[:, i] * ratio[:, i]
        sol_q = self.sol_fn.array(n, b, s.astype(np.float64))
        return sol_q / (util / wsum)


# -- building one ----------------------------------------------------------------------------------

def build(engine: Any, spec: dict[str, Any], systems: Path, data_dir: Path) -> DecodeLookup | None:
    """The batched decode lookup of `engine` compiled from `spec` (its JSON), or None when its
    generation ops are not of the kind it reproduces."""
    import yaml

    ops = spec.get("generation_ops") or []
    conf = spec.get("engine") or {}
    attn = [i for i, op in enumerate(ops) if "GenerationAttention" in op]
    if conf.get("database_mode") != "SILICON" or len(attn) != 1:
        return None
    op = ops[attn[0]]["GenerationAttention"]
    kv = str(op.get("kv_cache_dtype"))
    if op.get("lane_order") != ["default"] or kv not in _KV_MEMORY:
        return None
    n, n_kv, head, window = int(op["n"]), int(op["n_kv"]), int(op["head_size"]), int(op.get("window_size", 0))
    path = data_dir / "attention" / str(conf.get("backend")) / str(conf.get("backend_version")) \
        / "generation_attention_perf.parquet"
    try:
        gpu = (yaml.safe_load((systems / f"{conf.get('system_name')}.yaml").read_text()) or {})["gpu"]
        sm = gpu.get("sm_version")
        fp8_mma = kv == "fp8" and sm is not None and int(sm) >= 89
        flops = float(gpu["fp8_tc_flops" if fp8_mma else "bfloat16_tc_flops"])
        sol = _Sol(0 if n == n_kv else n_kv, head, window, _KV_MEMORY[kv], flops, float(gpu["mem_bw"]))
        table = _table(path, kv, 0 if n == n_kv else n_kv, head, window, sol)
    except (OSError, KeyError, TypeError, ValueError, ImportError):
        return None
    if not table:
        return None
    return DecodeLookup(engine, ops, attn[0], table, sol, n)


def _table(path: Path, kv: str, n_kv_lookup: int, head: int, window: int, sol: _Sol) -> dict[int, Any]:
    """{n: {b: {s: latency}}} of the slice, keys ascending, first row of a point kept, each
    latency raised to the speed of light (as the engine loads it)."""
    import pyarrow.parquet as pq

    names = ["num_heads", "num_key_value_heads", "head_dim", "kv_cache_dtype", "batch_size", "isl", "step",
             "latency"]
    schema = pq.read_schema(path)
    has_window = "window_size" in schema.names
    data = pq.read_table(path, columns=names + (["window_size"] if has_window else []))
    col = {name: data.column(name).to_numpy(zero_copy_only=False) for name in data.column_names}
    n, nk = col["num_heads"].astype(np.int64), col["num_key_value_heads"].astype(np.int64)
    win = np.nan_to_num(col["window_size"].astype(np.float64)).astype(np.int64) if has_window else np.zeros_like(n)
    keep = ((col["kv_cache_dtype"] == kv) & (col["head_dim"].astype(np.int64) == head) & (win == window)
            & (np.where(n == nk, 0, nk) == n_kv_lookup))
    rows = np.flatnonzero(keep)
    seq = col["isl"].astype(np.int64) + col["step"].astype(np.int64)
    found: dict[tuple[int, int, int], float] = {}
    for i, b, s, lat in zip(n[rows].tolist(), col["batch_size"][rows].astype(np.int64).tolist(), seq[rows].tolist(),
                            col["latency"][rows].astype(np.float64).tolist(), strict=True):
        found.setdefault((i, b, s), lat)
    table: dict[int, Any] = {}
    for key in sorted(found):
        lat = found[key]
        floor = sol.scalar(*map(float, key))
        table.setdefault(key[0], {}).setdefault(key[1], {})[key[2]] = floor if floor > lat else lat
    return table
