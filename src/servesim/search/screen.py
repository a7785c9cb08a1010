"""Screening: every candidate of a branch ranked by its analytic estimate, before any replay.

Screening costs no trial: it reads facts servesim computes without replaying (the static
checks, each role's pass-time model and KV capacity, the workload's means) and scores the
estimate (`servesim.search.estimate`) with the search's own objective. The model-guided search
replays the best-ranked deployments first and refines from there (`algorithms.py`).

A branch with more than `SCREEN_LIMIT` candidates (or a continuous knob) is screened on a
seeded sample of that many draws, so the ranking is the same on every run.

Screening never rejects: a candidate the static checks pass but the estimate cannot score (a
missing table entry, a non-finite value) is kept at the end of the ranking, in grid order, with no
estimate; one the static checks reject is left out (its replay would be refused with a reason).
"""

from __future__ import annotations

import json
import logging
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from servesim.config import SimConfig
from servesim.errors import ConfigError, RunError
from servesim.search import facts
from servesim.search.candidate import Prepared
from servesim.search.estimate import RoleModel, estimate, role_model
from servesim.search.profile import Profile, profile
from servesim.search.score import PARETO_OBJECTIVES, Objective, metrics
from servesim.search.space import Branch, Candidate

SCREEN_LIMIT = 2000
"""Most candidates of one branch screened (a seeded sample beyond)."""

log = logging.getLogger("servesim")


@dataclass(frozen=True)
class Screened:
    """A runnable candidate and its estimated score (pareto: its non-domination layer first)."""

    candidate: Candidate
    score: float
    values: dict[str, float]
    order: tuple[Any, ...]
    """Sort key, best first."""

    @property
    def estimated(self) -> bool:
        """False for a runnable candidate the estimate could not score (ranked last)."""
        return math.isfinite(self.score)


class Screen:
    """Estimates candidates of a search (memoising the workload profile)."""

    def __init__(self, objective: Objective, prepare: Callable[[Branch, Candidate], Prepared]) -> None:
        self.objective = objective
        self.prepare = prepare
        self._profile: Profile | None = None
        self.seconds = 0.0
        self.count = 0
        self.unestimated = 0

    def rank(self, branch: Branch, seed: int) -> list[Screened]:
        """The branch's runnable candidates (or a sample of them), best estimate first."""
        started = time.perf_counter()
        log.disabled = True  # roofline fallbacks warn again in the replays that use them
        try:
            found = [s for s in (self._screen(branch, c) for c in _candidates(branch, seed)) if s is not None]
        finally:
            log.disabled = False
        self.seconds += time.perf_counter() - started
        self.count += len(found)
        scored = [s for s in found if s.estimated]
        unscored = [s for s in found if not s.estimated]
        self.unestimated += len(unscored)
        return (_by_layers(scored) if self.objective.is_pareto else sorted(scored, key=lambda s: s.order)) + unscored

    def _screen(self, branch: Branch, cand: Candidate) -> Screened | None:
        prepared = self.prepare(branch, cand)
        config = prepared.parsed
        if config is None:
            return None
        tie = (cand.used_gpus, json.dumps(cand.flat_knobs(), sort_keys=True))
        try:
            if self._profile is None:
                self._profile = profile(config)
            models: dict[str, RoleModel] = {role: self._role(config, role) for role in config.engine.roles}
            m = metrics(estimate(config, models, self._profile), None)
            values = self.objective.values(m)
            score = self.objective.score(m, values)
        except (ConfigError, RunError, KeyError, ValueError, ZeroDivisionError, OverflowError):
            score, values = math.nan, {}
        if not math.isfinite(score):
            return Screened(cand, math.nan, {}, (math.inf, *tie))
        return Screened(cand, score, values, (-score, *tie))

    def _role(self, config: SimConfig, role: str) -> RoleModel:
        return role_model(config, role, facts.timing_model(config, role))


def _candidates(branch: Branch, seed: int) -> list[Candidate]:
    """Every candidate of a finite branch within the limit, else a seeded sample."""
    if branch.finite and branch.grid_size() <= SCREEN_LIMIT:
        return list(branch.grid())
    rng = random.Random(seed)
    found: dict[Candidate, None] = {}
    for _ in range(4 * SCREEN_LIMIT):
        cand = branch.sample(rng)
        if cand is not None:
            found[cand] = None
            if len(found) == SCREEN_LIMIT:
                break
    return list(found)


LAYERED = 64
"""Pareto: candidates ordered by non-domination layer before the rest follow by score."""


def _by_layers(found: list[Screened]) -> list[Screened]:
    """Pareto: the estimated front first, then the next layers (each spread from its ends
    inwards along throughput per user) until `LAYERED` are placed; the rest by score."""
    out: list[Screened] = []
    rest = sorted(found, key=lambda s: s.order)
    layer = 0
    while rest and len(out) < LAYERED:
        front = _front(rest)
        for rank, index in enumerate(_spread_order(len(front))):
            s = front[index]
            out.append(Screened(s.candidate, s.score, s.values, (layer, rank, *s.order)))
        members = {id(s) for s in front}
        rest = [s for s in rest if id(s) not in members]
        layer += 1
    return out + [Screened(s.candidate, s.score, s.values, (layer, *s.order)) for s in rest]


def _front(entries: list[Screened]) -> list[Screened]:
    """The non-dominated entries over the two Pareto objectives, by throughput per user."""
    x, y = PARETO_OBJECTIVES
    front: list[Screened] = []
    best_y = -float("inf")
    for s in sorted(entries, key=lambda s: (-s.values[x], -s.values[y], s.order)):
        if s.values[y] > best_y or (front and s.values[y] == best_y and s.values[x] == front[-1].values[x]):
            front.append(s)
            best_y = max(best_y, s.values[y])
    return sorted(front, key=lambda s: (s.values[y], s.order))


def _spread_order(n: int) -> list[int]:
    """Indices 0..n-1 ends first, then repeatedly the middles of the gaps (0, n-1, n/2, ...)."""
    if n <= 2:
        return list(range(n))
    order, seen = [0, n - 1], {0, n - 1}
    gaps = [(0, n - 1)]
    while gaps:
        nxt = []
        for lo, hi in gaps:
            mid = (lo + hi) // 2
            if mid not in seen:
                seen.add(mid)
                order.append(mid)
            if mid - lo > 1:
                nxt.append((lo, mid))
            if hi - mid > 1:
                nxt.append((mid, hi))
        gaps = nxt
    return order
