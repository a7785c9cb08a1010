"""Which calibration parameters a set of measurements can tell apart, and the grouped TTFT fit.

A calibration's prefill scale ``a`` and front-end latency ``f`` both lengthen TTFT. They can
be told apart only when the measured requests answer them differently: ``f`` adds the same
milliseconds to every request, ``a`` adds most to long prompts and to requests that queue
behind other prefills. So the requests are grouped — by measured run and, within a run, by
prompt-length tercile — and the two parameters' effects on the groups' mean TTFT are compared,
each relative to the group's measured mean: the effect of ``a`` from two simulations
(``a`` and 1.2·``a``, ``f`` = 0), the effect of ``f`` exactly (under replayed timestamps a
front-end delay shifts every TTFT by itself). When the two vectors point the same way (their
request-weighted cosine ≥ `COLLINEAR`), a mean-TTFT gap could be closed by either, and any
split between them is a guess that does not extrapolate: one load and one prompt length (a
synthetic run, a fixed-length benchmark) always gives that. Then `calibrate` leaves ``f`` at
the deployment's default and fits ``a`` alone.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from servesim.perf.calibration import Calibration

COLLINEAR = 0.98
"""Cosine above which the prefill scale's and the front-end latency's effects are one direction."""
STEP = 1.2
"""The prefill-scale factor of the second simulation."""
TERCILES = 3


@dataclass(frozen=True)
class Separability:
    """Whether the data tells the prefill scale from the front-end latency, and why."""

    prefill_frontend: bool
    cosine: float | None
    """Request-weighted cosine of the two effects over the groups (None: not computable)."""
    groups: int
    reason: str = ""

    def summary(self) -> dict[str, Any]:
        """For the calibration file's `fitted_on`."""
        return {"prefill_scale/frontend_ms": "separated" if self.prefill_frontend else "not separable",
                "cosine": None if self.cosine is None else round(self.cosine, 4), "groups": self.groups}

    def notes(self) -> list[str]:
        """Lines for `calibrate`'s output."""
        cos = "" if self.cosine is None else f"cosine {self.cosine:.3f} over {self.groups} groups"
        if self.prefill_frontend:
            return [f"the data separates prefill scale from front-end latency ({cos}): both fitted"]
        why = self.reason or cos
        return [f"warning: the data cannot separate prefill scale from front-end latency ({why}): "
                "front-end latency not fitted (the deployment's default stays), prefill scale fitted alone; "
                "measure runs at other loads or prompt lengths to fit both"]


def group_labels(input_tokens: Sequence[np.ndarray], fits: Sequence[np.ndarray | None]) -> np.ndarray:
    """Run × prompt-length tercile of every selected request, pooled in run order."""
    labels = []
    for index, (tokens, fit) in enumerate(zip(input_tokens, fits, strict=True)):
        picked = tokens[fit] if fit is not None and len(fit) == len(tokens) else tokens
        if len(picked) == 0:
            continue
        cuts = np.quantile(picked, [1 / 3, 2 / 3])
        labels.append(index * TERCILES + np.searchsorted(cuts, picked, side="right"))
    return np.concatenate(labels) if labels else np.zeros(0, dtype=np.int64)


def _group_means(values: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(mean, count) per non-empty group of the finite values."""
    ok = np.isfinite(values)
    keys = np.unique(labels[ok])
    means = np.array([float(np.mean(values[ok & (labels == k)])) for k in keys])
    counts = np.array([int(np.sum(ok & (labels == k))) for k in keys])
    return means, counts


def _grouped(replay: Any, sim: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(simulated, measured, count) mean TTFT per group; one pooled group when a simulation
    lost requests."""
    labels = replay.groups if replay.complete(sim) and len(replay.groups) == len(sim["ttft"]) \
        else np.zeros(len(sim["ttft"]), dtype=np.int64)
    sim_means, counts = _group_means(sim["ttft"], labels)
    if len(labels) == len(replay.real["ttft"]):
        real_means, _ = _group_means(replay.real["ttft"], labels)
    else:
        real_means = np.full(len(sim_means), float(np.nanmean(replay.real["ttft"])))
    return sim_means, real_means, counts


def frontend_and_misfit(replay: Any, sim: dict[str, np.ndarray]) -> tuple[float, float]:
    """For a simulation without front-end latency: the front-end latency (ms, ≥ 0) that best
    closes the groups' relative TTFT gaps, and the misfit left (request-weighted squared
    relative error)."""
    simulated, measured, counts = _grouped(replay, sim)
    weights = counts / np.maximum(measured, 1e-9) ** 2
    frontend = max(0.0, float(np.sum(weights * (measured - simulated)) / np.sum(weights)))
    return frontend, float(np.sum(weights * (simulated + frontend - measured) ** 2))


def separability(replay: Any, current: Calibration) -> Separability:
    """Whether `replay`'s measurements tell the prefill scale from the front-end latency (two
    simulations around `current`)."""
    base = replay.run(replace(current, frontend_ms=0.0))
    bumped = replay.run(replace(current, frontend_ms=0.0, prefill_scale=current.prefill_scale * STEP))
    if not (replay.complete(base) and replay.complete(bumped)):
        return Separability(False, None, 1, "a simulation lost requests, so the groups cannot be compared")
    s0, measured, counts = _grouped(replay, base)
    s1, _, _ = _grouped(replay, bumped)
    if len(counts) < 2:
        return Separability(False, None, len(counts), "one group of requests")
    prefill = (s1 - s0) / math.log(STEP) / measured
    frontend = 1.0 / measured
    norm = math.sqrt(float(np.sum(counts * prefill**2)) * float(np.sum(counts * frontend**2)))
    if norm == 0:
        return Separability(False, None, len(counts), "TTFT does not react to the prefill scale")
    cosine = float(np.sum(counts * prefill * frontend)) / norm
    return Separability(cosine < COLLINEAR, cosine, len(counts))
