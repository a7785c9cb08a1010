"""The sizing answer: for the load and the target, the fewest GPUs per shape that qualify.

A *shape* is a deployment without its replica counts: engine mode, backend and each role's
worker split (``tp2``, ``tp1 dp4 ep4``). Its *capacity curve* is, for every GPU count replayed,
the SLA-meeting request rate (`goodput_request_throughput_rps`) at the offered load and whether
the candidate met the target — so "4 GPUs miss, 6 hold" reads off one line.

After the search proper, a sizing phase spends a small reserved budget on the best shapes:
holding a shape's best knobs, it bisects each role's replica count between the largest count
known to miss and the smallest known to qualify (or doubles a count that misses), so the
fewest qualifying GPUs of each of those shapes is found, not guessed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from servesim.search.space import Candidate

SIZED_SHAPES = 4
"""Shapes (best first) the sizing phase bisects."""


def sizing_budget(max_trials: int) -> int:
    """Replays reserved for the sizing phase: a fifth of the budget, none below 10 trials."""
    return max_trials // 5 if max_trials >= 10 else 0


def shape_key(cand: Candidate) -> tuple[Any, ...]:
    """(mode, backend, per-role worker split): a candidate without its replica counts."""
    return (cand.mode, cand.backend, tuple((role, replace(shape, replicas=1)) for role, shape in cand.shapes))


def shape_label(cand: Candidate) -> str:
    """``vllm tp2`` or ``sglang P tp1 / D tp2``."""
    splits = [replace(shape, replicas=1).label.removeprefix("1x ") for _, shape in cand.shapes]
    roles = " / ".join(f"{role[0].upper()} {split}" for (role, _), split in zip(cand.shapes, splits, strict=True))
    return f"{cand.backend} {splits[0] if cand.mode == 'aggregated' else roles}"


def _replayed(entry: dict[str, Any]) -> bool:
    return entry["metrics"] is not None and entry["objectives"] is not None


def _order(entry: dict[str, Any]) -> tuple[Any, ...]:
    """Best first: meets the target with the highest score, else the smallest shortfall."""
    if entry["feasible"]:
        return (0, -entry["score"], entry["used_gpus"], entry["trial"])
    return (1, entry["shortfall"], entry["used_gpus"], entry["trial"])


def proposals(known: dict[Candidate, dict[str, Any]], max_gpus: int,
              tried: Callable[[Candidate], bool]) -> list[Candidate]:
    """The next sizing replays: per shape among the best SIZED_SHAPES, per role, the bisection
    step of its replica count (holding the shape's best candidate's other values)."""
    best: dict[tuple[Any, ...], tuple[Candidate, dict[str, Any]]] = {}
    for cand, entry in known.items():
        if _replayed(entry):
            key = shape_key(cand)
            if key not in best or _order(entry) < _order(best[key][1]):
                best[key] = (cand, entry)
    ranked = sorted(best.values(), key=lambda pair: _order(pair[1]))[:SIZED_SHAPES]
    out: list[Candidate] = []
    for cand, _ in ranked:
        for index in range(len(cand.shapes)):
            step = _bisect(cand, index, known, max_gpus)
            if step is not None and not tried(step) and step not in out:
                out.append(step)
    return out


def _with_replicas(cand: Candidate, index: int, replicas: int) -> Candidate:
    shapes = list(cand.shapes)
    role, shape = shapes[index]
    shapes[index] = (role, replace(shape, replicas=replicas))
    return replace(cand, shapes=tuple(shapes))


def _bisect(cand: Candidate, index: int, known: dict[Candidate, dict[str, Any]], max_gpus: int) -> Candidate | None:
    """One bisection step on role `index`'s replicas, or None when the boundary is known."""
    qualify: list[int] = []
    miss: list[int] = []
    for other, entry in known.items():
        if not _replayed(entry) or len(other.shapes) != len(cand.shapes):
            continue
        if _with_replicas(other, index, 1) == _with_replicas(cand, index, 1):
            (qualify if entry["feasible"] else miss).append(other.shapes[index][1].replicas)
    hi = min(qualify, default=None)
    lo = max((r for r in miss if hi is None or r < hi), default=0)
    if hi is None:
        per_replica = cand.shapes[index][1].gpus_per_worker
        others = cand.used_gpus - cand.shapes[index][1].gpus
        top = (max_gpus - others) // per_replica
        target = min(2 * lo, top) if lo else 0
        return _with_replicas(cand, index, target) if target > lo else None
    if hi - lo <= 1:
        return None
    return _with_replicas(cand, index, (lo + hi) // 2)


def sizing_table(known: dict[Candidate, dict[str, Any]]) -> list[dict[str, Any]]:
    """Per shape, best first: the fewest GPUs that met the target, the most GPUs below that
    that missed it, and the capacity curve (per GPU count the best replay: SLA-meeting rate)."""
    shapes: dict[tuple[Any, ...], dict[str, Any]] = {}
    for cand, entry in known.items():
        if not _replayed(entry):
            continue
        row = shapes.setdefault(shape_key(cand), {"mode": cand.mode, "backend": cand.backend,
                                                  "shape": shape_label(cand), "points": {}, "best": entry})
        if _order(entry) < _order(row["best"]):
            row["best"] = entry
        point = row["points"].get(entry["used_gpus"])
        if point is None or _order(entry) < _order(point):
            row["points"][entry["used_gpus"]] = entry
    out = []
    for row in sorted(shapes.values(), key=lambda r: _order(r["best"])):
        points = [row["points"][g] for g in sorted(row["points"])]
        fewest = min((e["used_gpus"] for e in points if e["feasible"]), default=None)
        below = [e["used_gpus"] for e in points if not e["feasible"] and (fewest is None or e["used_gpus"] < fewest)]
        out.append({
            "mode": row["mode"], "backend": row["backend"], "shape": row["shape"],
            "fewest_gpus": fewest, "misses_at": max(below, default=None),
            "curve": [{"gpus": e["used_gpus"], "trial": e["trial"], "meets_target": bool(e["feasible"]),
                       "goodput_request_throughput_rps": e["metrics"].get("goodput_request_throughput_rps"),
                       "request_throughput_rps": e["metrics"].get("request_throughput_rps")} for e in points],
        })
    return out
