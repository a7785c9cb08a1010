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
"""Answers per batch compared with the engine's before the rest are trusted."""
_KV_MEMORY = {"bfloat16": 2.0, "fp8": 1.0, "int8": 1.0}


class _OutOfRange(Exception):
    pass


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
        self._table = table
        self._sol = sol
        self._n = float(n)
        self._leaves = _Leaves(table, sol)
        self._others: dict[int, list[float]] = {}
        self._holds: dict[tuple[int, int], np.ndarray] = {}
        self._samples: dict[tuple[int, int], float] = {}
        self._checked: dict[int, int] = {}
        self.enabled = True

    # -- the calls ---------------------------------------------------------------------------

    def decode(self, batch: int, contexts: list[int]) -> list[float]:
        """The engine's ``predict_decode_latency(batch, c, 2)`` for each c of `contexts`."""
        engine = self._engine
        if not self.enabled:
            return [engine.predict_decode_latency(batch, c, 2) for c in contexts]
        lo, hi = self._inner_range(batch)
        out = []
        for c in contexts:
            s = c + 1
            s_min = max(1, int(s * 0.9))
            s_max = max(s_min, int(s * 1.1))
            if lo <= s_min and s_max <= hi:
                out.append(engine.predict_decode_latency(batch, c, 2))
                continue
            value = self._computed(batch, s, s_min, s_max)
            if value is None or not self._trusted(batch, c, value):
                value = engine.predict_decode_latency(batch, c, 2)
            out.append(value)
        return out

    def _trusted(self, batch: int, ctx: int, value: float) -> bool:
        done = self._checked.get(batch, 0)
        if done >= _CHECKS:
            return True
        if self._engine.predict_decode_latency(batch, ctx, 2) != value:
            self.enabled = False
            return False
        self._checked[batch] = done + 1
        return True

    def _computed(self, batch: int, s: int, s_min: int, s_max: int) -> float | None:
        others = self._other_ops(batch)
        if others is None:
            return None
        total = 0.0
        for i in range(_SAMPLES):
            s_i = s_min + (s_max - s_min) * i // (_SAMPLES - 1)
            sample = self._sample(batch, s_i)
            if sample is None:
                return None
            total += sample
        attn = max(total / _SAMPLES, 0.0) * self._scale
        acc = 0.0
        for i, value in enumerate(others):
            acc += attn if i == self._attn else value
        return acc

    def _other_ops(self, batch: int) -> list[float] | None:
        """The op values at `batch` (the attention op's is a placeholder); None when one of the
        others varies with the context."""
        found = self._others.get(batch)
        if found is None:
            indices = list(range(len(self._ops)))
            first = self._engine.evaluate_generation_ops(indices, batch, 2, 1.0, 0, None)
            second = self._engine.evaluate_generation_ops(indices, batch, 65537, 1.0, 0, None)
            values = [v[1] for v in first]
            if any(a[1] != b[1] for i, (a, b) in enumerate(zip(first, second, strict=True)) if i != self._attn):
                self.enabled = False
                return None
            found = self._others[batch] = values
        return found

    # -- one lookup of the table -------------------------------------------------------------

    def _sample(self, batch: int, s: int) -> float | None:
        key = (batch, s)
        value = self._samples.get(key)
        if value is None:
            try:
                value = _interior(self._table, (self._n, float(batch), float(s)), 0, self._sol)
            except _OutOfRange:
                value = self._held(batch, s)
            except _Miss:
                return None
            self._samples[key] = value
        return value

    def _held(self, batch: int, s: int) -> float:
        start = s - s % _BLOCK
        block = self._holds.get((batch, start))
        if block is None:
            block = self._holds[(batch, start)] = self._leaves.hold(self._n, float(batch),
                                                                  np.arange(max(start, 1), start + _BLOCK))
        return float(block[s - max(start, 1)])

    _ranges: dict[int, tuple[int, int]]

    def _inner_range(self, batch: int) -> tuple[int, int]:
        """Contexts [lo, hi] whose lookups at `batch` are inside some measured branch (the
        engine's own answer is cheap there)."""
        ranges = self.__dict__.setdefault("_ranges", {})
        found = ranges.get(batch)
        if found is None:
            spans = _branch_spans(self._table, (self._n, float(batch)))
            lo = min((a for a, _ in spans), default=1 << 62)
            hi = max((b for _, b in spans), default=-1)
            # only contiguous coverage is trusted as "inside"
            if any(a > lo for a, _ in spans):
                lo, hi = 1 << 62, -1
            found = ranges[batch] = (lo, hi)
        return found


# -- the grid resolver (inside the range) ---------------------------------------------------------

def _branch_spans(node: dict[int, Any], coords: tuple[float, ...]) -> list[tuple[int, int]]:
    """(first, last) of the innermost axis in each branch the bracket walk of `coords` reaches."""
    if not coords:
        keys = list(node)
        return [(keys[0], keys[-1])] if keys else []
    c = coords[0]
    keys = list(node)
    if c == int(c) and int(c) in node:
        return _branch_spans(node[int(c)], coords[1:])
    if not keys or c < keys[0] or c > keys[-1]:
        return []
    idx = bisect_left(keys, c)
    return _branch_spans(node[keys[idx - 1]], coords[1:]) + _branch_spans(node[keys[idx]], coords[1:])


def _interior(node: dict[int, Any], coords: tuple[float, ...], depth: int, sol: _Sol) -> float:
    """The engine's nested bracket-and-blend lookup (raw blend; a lone surviving branch is
    rescaled by the SOL ratio along the dropped axis); `_OutOfRange` past the data."""
    if depth == len(coords):
        return node  # type: ignore[return-value]
    if not node:
        raise _Miss()
    c = coords[depth]
    if c >= 0.0 and c == int(c):
        child = node.get(int(c))
        if child is not None:
            return _interior(child, coords, depth + 1, sol)
    keys = list(node)
    if c < keys[0] or c > keys[-1]:
        raise _OutOfRange()
    idx = bisect_left(keys, c)
    k_lo, k_hi = keys[idx - 1], keys[idx]
    results = []
    out_of_range = False
    for k in (k_lo, k_hi):
        try:
            results.append((k, _interior(node[k], coords, depth + 1, sol)))
        except _OutOfRange:
            out_of_range = True
        except _Miss:
            pass
    if not results:
        raise _OutOfRange() if out_of_range else _Miss()
    if len(results) == 1:
        k_surv, lat = results[0]
        snapped = list(coords)
        snapped[depth] = float(k_surv)
        sol_q, sol_s = sol.scalar(*coords), sol.scalar(*snapped)
        if math.isfinite(sol_q) and math.isfinite(sol_s) and sol_q > 0.0 and sol_s > 0.0:
            return lat * (sol_q / sol_s)
        return lat
    (_, lat_lo), (_, lat_hi) = results
    w = (c - k_lo) / (k_hi - k_lo)
    return lat_lo + (lat_hi - lat_lo) * w


# -- speed of light and the hold (past the range) --------------------------------------------------

class _Sol:
    """The generation-attention speed of light (ms) at (n, b, s)."""

    def __init__(self, n_kv_lookup: int, head_size: int, window: int, kv_memory: float, flops: float,
                 mem_bw: float) -> None:
        self.n_kv_lookup, self.h, self.window = n_kv_lookup, float(head_size), window
        self.kv_memory, self.flops, self.mem_bw = kv_memory, flops, mem_bw

    def scalar(self, n: float, b: float, s: float) -> float:
        return float(self.array(n, b, np.array([s], dtype=np.float64))[0])

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
        q = _log2(s)
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

    cols = pq.read_table(path).to_pydict()
    win = cols.get("window_size") or [0] * len(cols["latency"])
    found: dict[tuple[int, int, int], float] = {}
    for i, lat in enumerate(cols["latency"]):
        n, nk = int(cols["num_heads"][i]), int(cols["num_key_value_heads"][i])
        if (cols["kv_cache_dtype"][i] != kv or int(cols["head_dim"][i]) != head or int(win[i] or 0) != window
                or (0 if n == nk else nk) != n_kv_lookup):
            continue
        found.setdefault((n, int(cols["batch_size"][i]), int(cols["isl"][i]) + int(cols["step"][i])), float(lat))
    table: dict[int, Any] = {}
    for (n, b, s) in sorted(found):
        lat = found[(n, b, s)]
        floor = sol.scalar(float(n), float(b), float(s))
        table.setdefault(n, {}).setdefault(b, {})[s] = floor if floor > lat else lat
    return table
