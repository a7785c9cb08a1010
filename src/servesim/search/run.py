"""The search loop: propose, reject what cannot run, replay the rest, score, learn, repeat.

`recommend(cfg)` runs one search and returns a `SearchResult` whose `entries` are the ledger:
every candidate the algorithm proposed, in proposal order, with its knobs and either its
metrics and score or the reason it was not replayed (or failed, or timed out).

``optimizer.max_trials`` counts *replays*: candidates rejected before any replay and repeated
proposals (answered from the first evaluation) are logged but cost no trial. The budget is split
evenly between the engine modes, as in the reference, and a mode that runs out of candidates
passes what it did not use to the next.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servesim.errors import ConfigError
from servesim.search import facts, sizing
from servesim.search.algorithms import BayesianStrategy, GridStrategy, RandomStrategy, optuna_available
from servesim.search.candidate import Materializer, Prepared
from servesim.search.executors import LocalExecutor, Outcome, RayExecutor
from servesim.search.schema import RecommendConfig
from servesim.search.screen import Screen
from servesim.search.score import Objective, metrics, pareto_front, rank_key
from servesim.search.space import Branch, Candidate, build_branches, ladder_shapes

GRID_CHECK_LIMIT = 4000
"""Largest grid `auto` checks candidate by candidate to decide whether it fits max_trials."""


@dataclass
class SearchResult:
    config: RecommendConfig
    algorithm: str
    entries: list[dict[str, Any]]
    configs: dict[int, dict[str, Any]]
    """Trial number -> the concrete predict config of every replayed candidate."""
    interrupted: bool = False
    interrupt_signal: int = 2
    """The signal that interrupted the search (SIGINT 2, SIGTERM 15): the exit code is 128 + it."""
    wall_seconds: float = 0.0
    screen_seconds: float = 0.0
    """Spent estimating candidates before any replay (`screen.py`)."""
    notes: list[str] = field(default_factory=list)
    sizing: list[dict[str, Any]] = field(default_factory=list)
    """Per shape: the fewest GPUs that meet the target and the capacity curve (`sizing.py`)."""
    workers: dict[str, Any] = field(default_factory=dict)
    """The workers' memory: the peak resident MB after a candidate, how many were retired; under
    Ray also `ray_nodes`, the candidates each node replayed."""
    coverage: dict[str, Any] = field(default_factory=dict)
    """How much of the space was evaluated: {"evaluated": n, "space": m or None (infinite)}."""

    @property
    def feasible(self) -> list[dict[str, Any]]:
        """Replayed candidates that meet the target (the only ones ever recommended)."""
        return [e for e in self.entries if e["feasible"]]

    @property
    def replayed(self) -> list[dict[str, Any]]:
        """Candidates with a report: those that meet the target and those that miss it."""
        return [e for e in self.entries if e["metrics"] is not None and e["objectives"] is not None]

    def closest(self) -> dict[str, Any] | None:
        """When none meets the target: the replayed candidate that missed it by the least."""
        missed = [e for e in self.replayed if not e["feasible"]]
        return min(missed, key=lambda e: (e["shortfall"], e["used_gpus"], e["trial"]), default=None)

    def ranked(self) -> list[dict[str, Any]]:
        """The recommendations, best first: the Pareto front for `pareto`, else by score."""
        target = self.config.optimization.target
        if target == "pareto":
            return pareto_front(self.feasible)
        return sorted(self.feasible, key=lambda entry: rank_key(entry, target))


@dataclass
class _BranchRun:
    branch: Branch
    strategy: Any
    budget: int
    replayed: int = 0
    asked: int = 0
    rounds: int = 0
    active: bool = True


class Search:
    """One recommend run over a validated config."""

    def __init__(self, cfg: RecommendConfig, *, base_dir: Path | None = None, executor: str = "local",
                 ray_address: str | None = None, progress: Callable[[SearchResult], None] | None = None,
                 on_round: Callable[[SearchResult], None] | None = None) -> None:
        self.cfg = cfg
        self.materializer = Materializer(cfg, base_dir)
        constraints = cfg.optimization.constraints
        opt = cfg.optimization
        self.objective = Objective(opt.target, min_goodput_rps=opt.goodput_floor, max_gpus=constraints.max_candidate_gpus,
                                   sla=(cfg.evaluation or {}).get("sla"), sla_attainment=opt.sla_attainment,
                                   strict_sla=opt.strict_sla)
        moe = facts.is_moe(self.materializer.model)
        self.branches = build_branches(cfg, moe, self.materializer.shape_can_serve)
        self._check_pools(moe)
        self.executor_kind, self.ray_address = executor, ray_address
        self.progress, self.on_round = progress, on_round
        self._prepared: dict[Candidate, Prepared] = {}
        self._by_candidate: dict[Candidate, dict[str, Any]] = {}
        self._by_config: dict[str, dict[str, Any]] = {}
        self.screen = Screen(self.objective, self.prepare)
        self._estimates: dict[Candidate, float] = {}
        self.result = SearchResult(cfg, cfg.optimizer.algorithm, [], {})
        self.sizing_reserve = 0

    # -- static checks --------------------------------------------------------------------

    def _check_pools(self, moe: bool) -> None:
        """A ConfigError when no branch has any deployment (every shape was filtered out)."""
        if any(b.deployments(backend) for b in self.branches for backend in b.backends):
            return
        branch = self.branches[0]
        backend = branch.backends[0]
        shapes = tuple(ladder_shapes(moe, backend, 1)[0] for _ in branch.roles)
        why = self.materializer.prepare(branch.candidate(backend, shapes, branch.first_values())).reason
        raise ConfigError(f"no parallel shape within {branch.max_gpus} GPUs can serve {self.materializer.model} "
                          f"(e.g. one GPU per worker: {why})")

    def prepare(self, branch: Branch, cand: Candidate) -> Prepared:
        found = self._prepared.get(cand)
        if found is None:
            found = self._prepared[cand] = self.materializer.prepare(cand, branch.unsupported(cand))
        return found

    def probes(self) -> list[Any]:
        """The first candidate of every branch and backend, parsed by the predict schema.

        When none parses, the passed-through sections are invalid: the first error (naming the
        key) is raised as a ConfigError. One that only some branch or backend refuses is left to
        the candidates' own checks."""
        from servesim.config import parse_config

        parsed, errors = [], []
        for branch in self.branches:
            for backend in branch.backends:
                deployments = branch.deployments(backend)
                if not deployments:
                    continue
                cand = branch.candidate(backend, deployments[0], branch.first_values())
                mapping = self.materializer.config(cand, load_value=1)
                try:
                    parsed.append(parse_config(mapping))
                except ConfigError as exc:
                    errors.append(exc)
        if errors and not parsed:
            raise errors[0]
        return parsed

    # -- the algorithm --------------------------------------------------------------------

    def choose_algorithm(self) -> str:
        algorithm = self.cfg.optimizer.algorithm
        if algorithm == "bayesian" and not optuna_available():
            raise ConfigError("optimizer.algorithm 'bayesian' needs Optuna: pip install 'servesim[search]'")
        if algorithm != "auto":
            return algorithm
        if self._grid_fits():
            return "grid"
        if optuna_available():
            return "bayesian"
        self.result.notes.append("Optuna is not installed (pip install 'servesim[search]'): random search")
        return "random"

    def _grid_fits(self) -> bool:
        if not all(b.finite for b in self.branches):
            return False
        if sum(b.grid_size() for b in self.branches) > max(GRID_CHECK_LIMIT, self.cfg.optimizer.max_trials):
            return False
        runnable = sum(self.prepare(b, c).status == "ok" for b in self.branches for c in b.grid())
        return runnable <= self.cfg.optimizer.max_trials

    def _runs(self, algorithm: str) -> list[_BranchRun]:
        opt = self.cfg.optimizer
        if algorithm == "grid":  # one budget for all branches (see _round)
            continuous = [d.name for b in self.branches for d in b.dims if not d.finite]
            if continuous:
                raise ConfigError(f"{continuous[0]}: optimizer.algorithm grid needs a finite domain, and this range "
                                  "has no step (continuous); give it a step or choices, or use random or bayesian")
            return [_BranchRun(b, GridStrategy(b), opt.max_trials) for b in self.branches]
        self.sizing_reserve = sizing.sizing_budget(opt.max_trials)
        base, extra = divmod(opt.max_trials - self.sizing_reserve, len(self.branches))
        runs = []
        for index, branch in enumerate(self.branches):
            budget = base + (1 if index < extra else 0)
            seed = (opt.seed + (0 if branch.mode == "aggregated" else 1)) % 2**32  # a 32-bit seed
            strategy: Any = RandomStrategy(branch, seed)
            if algorithm == "bayesian":
                ranked = self._screened(branch, seed) if opt.screen else None
                strategy = BayesianStrategy(branch, max(budget, 1), seed, self.objective, ranked)
            runs.append(_BranchRun(branch, strategy, budget))
        if self.screen.count:
            self.result.notes.append(f"screened {self.screen.count} candidates by their analytic estimate "
                                     "before any replay (no trial spent)")
        if self.screen.unestimated:
            self.result.notes.append(f"{self.screen.unestimated} runnable candidates had no analytic estimate: "
                                     "kept, ranked after the estimated ones")
        self.result.screen_seconds = self.screen.seconds
        return runs

    def _screened(self, branch: Branch, seed: int) -> list[Candidate]:
        """The branch's candidates best estimate first (`screen.py`); their estimates are kept
        for the ledger."""
        ranked = self.screen.rank(branch, seed)
        self._estimates.update({s.candidate: s.score for s in ranked if math.isfinite(s.score)})
        return [s.candidate for s in ranked]

    # -- the loop -------------------------------------------------------------------------

    def run(self) -> SearchResult:
        started = time.perf_counter()
        probes = self.probes()
        algorithm = self.choose_algorithm()
        self.result.algorithm = algorithm
        runs = self._runs(algorithm)
        if self.executor_kind == "local":
            facts.warm_up(probes)
        executor = self._executor()
        search_budget = self.cfg.optimizer.max_trials - self.sizing_reserve
        try:
            while any(r.active for r in runs):
                for index, run in enumerate(runs):
                    if run.active:
                        self._round(run, executor, search_budget - sum(r.replayed for r in runs))
                        if not run.active:
                            _pass_on(runs, index)
            self._size(executor, self.cfg.optimizer.max_trials - sum(r.replayed for r in runs))
        except KeyboardInterrupt as exc:
            self.result.interrupted = True
            self.result.interrupt_signal = int(getattr(exc, "signum", 2))
        finally:
            executor.close()
            self.result.workers = {"retired_for_memory": getattr(executor, "retired", 0),
                                   "peak_rss_mb": round(getattr(executor, "peak_rss_mb", 0.0), 1)}
            if getattr(executor, "nodes", None):
                self.result.workers["ray_nodes"] = dict(sorted(executor.nodes.items()))
            self.result.wall_seconds = time.perf_counter() - started
            self._mark_front()
            self._note_coverage()
        return self.result

    def _size(self, executor: Any, budget: int) -> None:
        """The sizing phase (`sizing.py`): bisect the best shapes' replica counts with the
        replays left (a reserved fifth of max_trials plus what the search did not use)."""
        if self.sizing_reserve == 0:
            return
        by_mode = {b.mode: b for b in self.branches}
        max_gpus = self.cfg.optimization.constraints.max_candidate_gpus
        spent = 0
        for _ in range(64):
            cands = sizing.proposals(self._by_candidate, max_gpus, lambda c: c in self._by_candidate)
            cands = cands[:max(0, min(budget - spent, self.cfg.optimizer.parallelism))]
            if not cands:
                return
            jobs = []
            for cand in cands:
                entry = self._new_entry(by_mode[cand.mode], cand)
                entry["phase"] = "sizing"
                if entry["status"] == "ready":
                    jobs.append((entry["trial"], self.result.configs[entry["trial"]]))
            for trial, outcome in executor.run(jobs):
                self._record(self._entry(trial), outcome)
            spent += len(jobs)
            if self.on_round is not None:
                self.on_round(self.result)

    def _note_coverage(self) -> None:
        """How much of the space was evaluated; a note when not all of a finite space was."""
        evaluated = len(self._by_candidate)
        space = sum(b.grid_size() for b in self.branches) if all(b.finite for b in self.branches) else None
        self.result.coverage = {"evaluated": evaluated, "space": space}
        self.result.sizing = sizing.sizing_table(self._by_candidate)
        if space is not None and evaluated < space:
            tried = {e["knobs"]["engine.backend"] for e in self.result.entries}
            untried = [b for b in self.cfg.engine.backends if b not in tried]
            tail = f"; never tried: {', '.join(untried)}" if untried else ""
            self.result.notes.append(f"{evaluated} of {space} candidates evaluated (optimizer.max_trials "
                                     f"{self.cfg.optimizer.max_trials}){tail}")

    def _executor(self) -> Any:
        opt = self.cfg.optimizer
        if self.executor_kind == "ray":
            return RayExecutor(opt.parallelism, opt.candidate_timeout_seconds, self.ray_address)
        return LocalExecutor(min(opt.parallelism, os.cpu_count() or 1), opt.candidate_timeout_seconds,
                             opt.worker_memory_mb)

    def _round(self, run: _BranchRun, executor: Any, left: int) -> None:
        """One round of a branch: ask, reject or replay, tell. `left`: replays left overall."""
        remaining = min(run.budget - run.replayed, left)
        if remaining <= 0 or run.asked > 20 * run.budget + 100:
            run.active = False
            return
        cands = run.strategy.ask(min(run.strategy.round_size(run.rounds == 0), remaining))
        run.rounds += 1
        run.asked += len(cands)
        order, jobs = [], []
        for cand in cands:
            entry = self._by_candidate.get(cand)
            if entry is None:
                entry = self._new_entry(run.branch, cand)
                if entry["status"] == "ready":
                    jobs.append((entry["trial"], self.result.configs[entry["trial"]]))
            order.append((cand, entry))
        for trial, outcome in executor.run(jobs):
            self._record(self._entry(trial), outcome)
        run.replayed += len(jobs)
        for cand, entry in order:
            run.strategy.tell(cand, _told(entry, self.objective))
        if run.strategy.exhausted or (not jobs and not cands):
            run.active = False
        if self.on_round is not None:
            self.on_round(self.result)

    def _new_entry(self, branch: Branch, cand: Candidate) -> dict[str, Any]:
        prepared = self.prepare(branch, cand)
        entry: dict[str, Any] = {
            "trial": len(self.result.entries) + 1, "mode": cand.mode, "status": prepared.status,
            "feasible": False, "reason": prepared.reason, "knobs": cand.flat_knobs(), "used_gpus": cand.used_gpus,
            "metrics": None, "objectives": None, "score": None, "meets_target": None, "pareto": False,
            "rank": None, "config_path": None, "eval_seconds": None, "warnings": [], "missed": [], "shortfall": None, "phase": "search",
            "estimated_score": self._estimates.get(cand),
        }
        if prepared.config is not None:
            key = json.dumps(prepared.config, sort_keys=True)
            twin = self._by_config.get(key)
            if twin is not None:  # a different point of the space with the same concrete config
                self._by_candidate[cand] = twin
                return twin
            self._by_config[key] = entry
            entry["status"] = "ready"
            self.result.configs[entry["trial"]] = prepared.config
        self._by_candidate[cand] = entry
        self.result.entries.append(entry)
        return entry

    def _entry(self, trial: int) -> dict[str, Any]:
        return self.result.entries[trial - 1]

    def _record(self, entry: dict[str, Any], outcome: Outcome) -> None:
        entry.update(eval_seconds=round(outcome.seconds, 4), warnings=outcome.warnings)
        if outcome.status != "ok":
            entry.update(status=outcome.status, reason=outcome.reason)
        else:
            assert outcome.summary is not None
            m = metrics(outcome.summary, self.cfg.optimization.gpu_hour_price)
            try:
                values = self.objective.values(m)
            except KeyError as exc:
                entry.update(status="failed", reason=str(exc).strip("'\""), metrics=m)
            else:
                missed = self.objective.misses(m)
                entry.update(status="misses_target" if missed else "feasible", feasible=not missed, metrics=m,
                             objectives=values, score=self.objective.score(m, values), meets_target=not missed,
                             missed=[text for text, _ in missed],
                             shortfall=max((miss for _, miss in missed), default=0.0))
                if missed:
                    entry["reason"] = "misses the target: " + "; ".join(text for text, _ in missed)
        if self.progress is not None:
            self.progress(self.result)

    def _mark_front(self) -> None:
        """Flag the Pareto front over (throughput/GPU, throughput/user) for every target, and rank."""
        feasible = self.result.feasible
        pairs = [dict(e, objectives={k: e["metrics"][k] for k in ("throughput_per_gpu", "throughput_per_user")})
                 for e in feasible]
        front = {e["trial"] for e in pareto_front(pairs)}
        for entry in feasible:
            entry["pareto"] = entry["trial"] in front
        for rank, entry in enumerate(self.result.ranked(), start=1):
            entry["rank"] = rank
        for entry in self.result.entries:
            if entry["status"] == "ready":  # interrupted before its replay finished
                entry.update(status="not_run", reason="the search was interrupted")


def _told(entry: dict[str, Any], objective: Objective) -> dict[str, float] | None:
    """What a strategy learns from an entry: its score and objective values (below every
    qualifying candidate's when it misses the target), or None (not replayed, or failed)."""
    if entry["objectives"] is None or entry["score"] is None:
        return None
    shortfall = entry.get("shortfall") or 0.0
    if shortfall <= 0:
        return {"score": entry["score"], **entry["objectives"]}
    return {"score": objective.told(entry["score"], shortfall),
            **{name: objective.told(value, shortfall) for name, value in entry["objectives"].items()}}


def _pass_on(runs: list[_BranchRun], index: int) -> None:
    """Give a finished branch's unused budget to the next branch still searching."""
    run = runs[index]
    unused = run.budget - run.replayed
    for other in runs[index + 1:] + runs[:index]:
        if other.active and unused > 0:
            other.budget += unused
            run.budget -= unused
            return


def recommend(config: RecommendConfig, **options: Any) -> SearchResult:
    """Run one search (see `Search` for the options)."""
    return Search(config, **options).run()


def progress_line(stream: Any = sys.stderr) -> Callable[[SearchResult], None]:
    """A progress callback that redraws one stderr line (at most ~10 times a second): replays
    done, candidates rejected before replay, the best score so far, wall time."""
    started = time.perf_counter()
    last = [0.0]

    def draw(result: SearchResult) -> None:
        now = time.perf_counter()
        if now - last[0] < 0.1:
            return
        last[0] = now
        entries = result.entries
        replayed = sum(e["eval_seconds"] is not None for e in entries)
        rejected = sum(e["status"] in ("over_budget", "unsupported", "kv_too_small") for e in entries)
        scores = [e["score"] for e in entries if e["feasible"]]
        best = f"best {result.config.optimization.target} score {max(scores):.4g}" if scores else "no feasible yet"
        stream.write(f"\r[servesim recommend] {replayed}/{result.config.optimizer.max_trials} trials, "
                     f"{rejected} rejected before replay, {best}, wall {now - started:,.1f} s ")
        stream.flush()

    return draw
