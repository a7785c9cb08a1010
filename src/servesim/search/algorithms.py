"""Search algorithms: which candidates of a branch to try next.

* ``grid`` — every candidate of the branch, in a fixed order (finite spaces only).
* ``random`` — the reference's random search: seeded uniform draws (backend, then a deployment
  legal for it, then each knob), never the same candidate twice.
* ``bayesian`` — Optuna's TPE sampler (seeded, multivariate over the branch's knobs), asked in
  rounds of fixed size and told each score; Optuna is an optional extra (``servesim[search]``).
* ``auto`` — grid when the whole space fits ``max_trials``, else bayesian (random when Optuna is
  not installed).

A strategy never sees how many workers evaluate its candidates: rounds have fixed sizes and
results are told in proposal order, so the search is the same at any `optimizer.parallelism`.
"""

from __future__ import annotations

import random
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

from servesim.search.score import Objective
from servesim.search.screen import SCREEN_LIMIT
from servesim.search.space import Branch, Candidate, Dim, Shape

BAYESIAN_ROUND = 4
"""Candidates a model-guided round proposes at once (after the random start-up round)."""
REPEATS_BEFORE_FILL = 4
"""Proposals in a row of already-tried candidates after which the model-guided search takes the
next untried one of the screened ranking (or of the grid) instead."""
CATEGORICAL_LIMIT = 64
"""Values of an integer step range above which the model-guided search samples it as an ordered
integer (a categorical parameter costs Optuna time in proportion to its values, every trial)."""
SPREAD_LIMIT = 20_000
"""Deployments of a backend the start-up round groups by GPU count (a seeded sample beyond)."""
CHUNK = 32
"""Candidates per round of grid and random search (they do not learn: only the ledger's flush
granularity)."""


class GridStrategy:
    """Every candidate of a branch, in order."""

    def __init__(self, branch: Branch) -> None:
        self._grid: Iterator[Candidate] = branch.grid()
        self.exhausted = False

    def ask(self, n: int) -> list[Candidate]:
        out = []
        for cand in self._grid:
            out.append(cand)
            if len(out) == n:
                break
        self.exhausted = len(out) < n
        return out

    def tell(self, cand: Candidate, values: dict[str, float] | None) -> None:
        """Grid search does not learn."""

    def round_size(self, first: bool) -> int:
        return CHUNK


class RandomStrategy:
    """Seeded uniform draws without repetition."""

    MAX_MISSES = 500

    def __init__(self, branch: Branch, seed: int) -> None:
        self.branch = branch
        self._rng = random.Random(seed)
        self._seen: set[Candidate] = set()
        self.exhausted = False

    def ask(self, n: int) -> list[Candidate]:
        out: list[Candidate] = []
        misses = 0
        while len(out) < n and misses < self.MAX_MISSES:
            cand = self.branch.sample(self._rng)
            if cand is None or cand in self._seen:
                misses += 1
                continue
            self._seen.add(cand)
            out.append(cand)
        self.exhausted = len(out) < n
        return out

    def tell(self, cand: Candidate, values: dict[str, float] | None) -> None:
        """Random search does not learn."""

    def round_size(self, first: bool) -> int:
        return CHUNK


class BayesianStrategy:
    """Optuna TPE over one branch: backend, each role's shape and every knob are parameters."""

    def __init__(self, branch: Branch, budget: int, seed: int, objective: Objective,
                 ranked: list[Candidate] | None = None) -> None:
        optuna = import_optuna()
        self.branch = branch
        self.exhausted = False
        self._optuna = optuna
        self._startup = _opening_size(budget, ranked)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # multivariate/group/constant_liar are "experimental"
            sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=self._startup, multivariate=True,
                                                 group=True, constant_liar=True, n_ei_candidates=64)
        directions = ["maximize"] * len(objective.names) if objective.is_pareto else ["maximize"]
        self._study = optuna.create_study(directions=directions, sampler=sampler)
        self._objective = objective
        self._pending: dict[Candidate, list[Any]] = {}
        self._distributions: dict[str, Any] = {}
        """Every parameter's distribution over the trials asked so far (the neighbours' space)."""
        self._labels = {role: _shape_labels(branch, role) for role in branch.roles}
        self._rng = random.Random(seed)
        opening = (self._spread(self._startup, self._rng) if ranked is None
                   else [self._params_of(c) for c in _opening(ranked, self._startup)])
        for params in opening:
            self._study.enqueue_trial(params)
        self._polish_from = budget - budget // 4
        self._asked = 0
        self._seen: set[Candidate] = set()
        self._best: tuple[float, dict[str, Any]] | None = None
        enumerable = branch.finite and branch.grid_size() <= SCREEN_LIMIT
        self._fill = iter(ranked if ranked is not None else branch.grid() if enumerable else ())
        self._fill_covers_space = enumerable
        self._repeats = 0

    def round_size(self, first: bool) -> int:
        return self._startup if first else BAYESIAN_ROUND

    def _spread(self, n: int, rng: random.Random) -> list[dict[str, Any]]:
        """The start-up round: n deployments spread over GPU counts and backends (round robin
        over the (GPUs, backend) groups, a seeded draw within each), random knobs."""
        branch = self.branch
        groups: dict[tuple[int, str], list[tuple[Shape, ...]]] = {}
        for backend in branch.backends:
            everything = branch.deployments(backend)
            deployments: Sequence[tuple[Shape, ...]] = everything
            if len(everything) > SPREAD_LIMIT:  # a seeded sample stands for the many
                deployments = [everything[rng.randrange(len(everything))] for _ in range(SPREAD_LIMIT)]
            for shapes in deployments:
                groups.setdefault((sum(s.gpus for s in shapes), backend), []).append(shapes)
        for members in groups.values():
            rng.shuffle(members)
        order = sorted(groups)
        rng.shuffle(order)
        plan: list[dict[str, Any]] = []
        while len(plan) < n and any(groups.values()):
            for key in order:
                if groups[key] and len(plan) < n:
                    plan.append(self._params(key[1], groups[key].pop(), rng))
        return plan

    def _params_of(self, cand: Candidate) -> dict[str, Any]:
        """Optuna parameters that decode to `cand`."""
        knobs = dict(cand.knobs)
        params = self._params(cand.backend, tuple(shape for _, shape in cand.shapes), None)
        params.update({d.name: knobs[d.name] for d in self.branch.dims})
        return params

    def _params(self, backend: str, shapes: tuple[Shape, ...], rng: random.Random | None) -> dict[str, Any]:
        """Optuna parameters that decode to this backend and deployment (knobs drawn at random,
        none without `rng`)."""
        params: dict[str, Any] = {"engine.backend": backend}
        for role, shape in zip(self.branch.roles, shapes, strict=True):
            pool, base = self.branch.pools[role], f"engine.workers.{role}.parallelism"
            if pool.kind == "independent":
                params.update({d.name: getattr(shape, d.name.rsplit(".", 1)[1]) for d in pool.knob_dims})
            elif pool.kind == "list":
                params[base] = shape.label
            else:
                g = shape.gpus_per_worker
                splits = sorted({_split(s) for s in self._labels[role].values() if s.gpus_per_worker == g})
                params[f"{base}.gpus_per_worker"] = g
                params[f"{base}.replicas"] = shape.replicas
                if len(splits) > 1:
                    params[f"{base}.split_of_{g}"] = str(splits.index(_split(shape)))
        if rng is not None:
            params.update({dim.name: dim.sample(rng) for dim in self.branch.dims})
        return params

    def ask(self, n: int) -> list[Candidate]:
        out = []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for _ in range(n):
                if self._repeats >= REPEATS_BEFORE_FILL and not self._enqueue_untried():
                    self.exhausted = self._fill_covers_space
                    if self.exhausted:
                        break
                elif self._asked >= self._polish_from:
                    self._enqueue_neighbour()
                trial = self._study.ask()
                cand = self._decode(trial)
                self._distributions.update(trial.distributions)  # (study.trials deep-copies every trial)
                self._repeats = self._repeats + 1 if cand in self._seen else 0
                self._pending.setdefault(cand, []).append(trial)
                self._seen.add(cand)
                self._asked += 1
                out.append(cand)
        return out

    def _enqueue_untried(self) -> bool:
        """After repeated proposals, the next untried candidate of the ranking (or of the grid)
        is enqueued; False when there is none."""
        for cand in self._fill:
            if cand not in self._seen:
                self._study.enqueue_trial(self._params_of(cand))
                return True
        return False

    def _enqueue_neighbour(self) -> None:
        """The last quarter of the budget polishes the best candidate so far: an untried
        neighbour (one parameter changed, or the same GPUs split differently) is enqueued."""
        if self._best is None:
            return
        optuna = self._optuna
        moves = _neighbours(self._best[1], self._distributions)
        self._rng.shuffle(moves)
        for params in moves:
            try:
                cand = self._decode(optuna.trial.FixedTrial(params))
            except (ValueError, KeyError, IndexError):
                continue
            if cand not in self._seen:
                self._study.enqueue_trial(params)
                return

    def tell(self, cand: Candidate, values: dict[str, float] | None) -> None:
        trials = self._pending.get(cand, [])
        if values is not None and trials and not self._objective.is_pareto:
            if self._best is None or values["score"] > self._best[0]:
                self._best = (values["score"], dict(trials[0].params))
        for trial in self._pending.pop(cand, []):
            if values is None:
                self._study.tell(trial, state=self._optuna.trial.TrialState.FAIL)
            elif self._objective.is_pareto:
                self._study.tell(trial, [values[name] for name in self._objective.names])
            else:
                self._study.tell(trial, values["score"])

    def _decode(self, trial: Any) -> Candidate:
        branch = self.branch
        backend = trial.suggest_categorical("engine.backend", branch.backends)
        shapes = []
        for role in branch.roles:
            pool = branch.pools[role]
            if pool.kind == "independent":
                shapes.append(Shape(*(_suggest(trial, d) for d in pool.knob_dims)))
            elif pool.kind == "list":
                labels = self._labels[role]
                shapes.append(labels[trial.suggest_categorical(f"engine.workers.{role}.parallelism", list(labels))])
            else:
                shapes.append(self._ladder_shape(trial, role))
        values = {d.name: _suggest(trial, d) for d in branch.dims}
        return branch.candidate(backend, tuple(shapes), values)

    def _ladder_shape(self, trial: Any, role: str) -> Shape:
        """A default-pool shape from ordinal parameters the model can learn along: GPUs per
        worker, the split of such a worker (MoE) and the replica count. A combination outside
        the pool is rejected before replay (over budget, or not a split the backend runs)."""
        shapes = list(self._labels[role].values())
        base = f"engine.workers.{role}.parallelism"
        g = trial.suggest_categorical(f"{base}.gpus_per_worker", sorted({s.gpus_per_worker for s in shapes}))
        splits = sorted({_split(s) for s in shapes if s.gpus_per_worker == g})
        split = splits[0] if len(splits) == 1 else splits[int(trial.suggest_categorical(
            f"{base}.split_of_{g}", [str(i) for i in range(len(splits))]))]
        replicas = trial.suggest_int(f"{base}.replicas", 1, max(s.replicas for s in shapes))
        return Shape(replicas, *split)


def _opening_size(budget: int, ranked: list[Candidate] | None) -> int:
    """Candidates of the first round: a quarter of the budget (4 to 10) drawn spread out, or,
    screened, half of it (2 to 16) taken from the top of the ranking."""
    if ranked is None:
        return min(10, max(4, budget // 4))
    return max(1, min(len(ranked), 16, max(2, budget // 2)))


def _opening(ranked: list[Candidate], n: int) -> list[Candidate]:
    """The first `n` of the ranking, one per deployment (backend and shapes) while there are
    enough deployments, then the next best."""
    chosen: list[Candidate] = []
    deployments: set[tuple[Any, ...]] = set()
    for cand in ranked:
        key = (cand.backend, cand.shapes)
        if key not in deployments:
            deployments.add(key)
            chosen.append(cand)
            if len(chosen) == n:
                return chosen
    taken = set(chosen)
    return chosen + [c for c in ranked if c not in taken][:n - len(chosen)]


def _neighbours(params: dict[str, Any], distributions: dict[str, Any]) -> list[dict[str, Any]]:
    """Parameter sets one step from `params`: another value of one categorical, an integer one
    up or down, or (for a default-pool shape) twice or half the GPUs per worker at the same GPUs."""
    out = []
    for name, value in params.items():
        dist = distributions.get(name)
        choices = getattr(dist, "choices", None)
        if choices is not None:
            out += [{**params, name: c} for c in choices if c != value]
        elif isinstance(value, int) and not isinstance(value, bool):
            stride = getattr(dist, "step", 1) or 1
            out += [{**params, name: value + step} for step in (-stride, stride)]
    for name, g in params.items():
        if name.endswith(".gpus_per_worker"):
            replicas = name.replace(".gpus_per_worker", ".replicas")
            r = params.get(replicas, 1)
            if r % 2 == 0:
                out.append({**params, name: g * 2, replicas: r // 2})
            if g % 2 == 0:
                out.append({**params, name: g // 2, replicas: r * 2})
    return out


def _split(shape: Shape) -> tuple[int, int, int, int, int]:
    return (shape.tensor, shape.pipeline, shape.attention_data, shape.moe_tensor, shape.moe_expert)


def _shape_labels(branch: Branch, role: str) -> dict[str, Any]:
    """Every shape a role's pool has for any backend, by label (a categorical parameter)."""
    shapes = sorted({s for shapes in branch.pools[role].by_backend.values() for s in shapes},
                    key=lambda s: (s.gpus, s.gpus_per_worker, s.as_dict()["tensor"], s.label))
    return {s.label: s for s in shapes}


def _suggest(trial: Any, dim: Dim) -> Any:
    if dim.log and dim.integer:
        return trial.suggest_int(dim.name, int(dim.low), int(dim.high), log=True)
    if dim.stride and len(dim.values) > CATEGORICAL_LIMIT:  # an ordered integer grid: learnt as one
        return trial.suggest_int(dim.name, dim.values[0], dim.values[-1], step=dim.stride)
    if dim.values:
        return trial.suggest_categorical(dim.name, list(dim.values))
    return trial.suggest_float(dim.name, dim.low, dim.high, log=dim.log)


def import_optuna() -> Any:
    """Optuna, quiet; raises ImportError with the install hint when it is missing."""
    try:
        import optuna
    except ImportError:
        raise ImportError("optimizer.algorithm 'bayesian' needs Optuna: pip install 'servesim[search]'") from None
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna


def optuna_available() -> bool:
    try:
        import_optuna()
    except ImportError:
        return False
    return True
