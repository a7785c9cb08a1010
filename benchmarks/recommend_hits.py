"""How reliably `servesim recommend` finds the optimum at a small `max_trials`, over many seeds.

Every runnable candidate of a case is replayed once (a *full-space cache*, kept under
``~/.cache/servesim/recommend-hits/`` keyed by the case's text); then searches of each algorithm
are run for many seeds with the replays answered from the cache, so a seed costs the search's
own work only. For every algorithm it prints the optimum-hit rate (the search's best equals the
best of the whole space), the mean best score and the mean best as a fraction of the optimum
(target `pareto`: the hypervolume of the found front over the whole space's).

    python3 benchmarks/recommend_hits.py [CASE.yaml ...] [--seeds 20] [--algorithms bayesian,random]
                                         [--set optimizer.max_trials=16] [--json OUT]

Cases default to benchmarks/recommend/*.yaml and benchmarks/recommend/search/*.yaml. A replay
the cache lacks (a continuous knob) is run on the spot and added to it.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import statistics
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from recommend import hypervolume  # benchmarks/recommend.py, beside this script

HERE = Path(__file__).resolve().parent
CACHE = Path.home() / ".cache" / "servesim" / "recommend-hits"


def load(path: Path, overrides: list[str]) -> Any:
    from servesim.search.cli import load_recommend_config

    return load_recommend_config(str(path), overrides)


def config_key(config: dict[str, Any]) -> str:
    return json.dumps(config, sort_keys=True)


class CachedExecutor:
    """Answers replays from the cache (replaying and storing what it lacks)."""

    def __init__(self, cache: dict[str, dict[str, Any]]) -> None:
        self.cache = cache
        self.misses = 0

    def run(self, jobs: Iterable[tuple[int, dict[str, Any]]]) -> Iterator[tuple[int, Any]]:
        from servesim.search.executors import Outcome, evaluate

        for key, config in jobs:
            text = config_key(config)
            if text not in self.cache:
                self.misses += 1
                self.cache[text] = dataclasses.asdict(evaluate(config))
            yield key, Outcome(**self.cache[text])

    def close(self) -> None:
        pass


class RecordingExecutor:
    """The search's own executor, keeping every outcome in the cache."""

    def __init__(self, inner: Any, cache: dict[str, dict[str, Any]]) -> None:
        self.inner, self.cache = inner, cache

    def run(self, jobs: Iterable[tuple[int, dict[str, Any]]]) -> Iterator[tuple[int, Any]]:
        jobs = list(jobs)
        configs = dict(jobs)
        for key, outcome in self.inner.run(jobs):
            self.cache[config_key(configs[key])] = dataclasses.asdict(outcome)
            yield key, outcome

    def close(self) -> None:
        self.inner.close()


def cache_path(case: Path) -> Path:
    digest = hashlib.sha256(case.read_bytes()).hexdigest()[:12]
    return CACHE / f"{case.stem}-{digest}.json"


def full_space(case: Path) -> dict[str, dict[str, Any]]:
    """Every runnable candidate of the case replayed once (built on first use)."""
    from servesim.search.run import Search

    path = cache_path(case)
    if path.exists():
        return json.loads(path.read_text())
    cache: dict[str, dict[str, Any]] = {}
    search = Search(load(case, ["optimizer.algorithm=grid", "optimizer.max_trials=100000"]), base_dir=case.parent)
    make = search._executor
    search._executor = lambda: RecordingExecutor(make(), cache)  # type: ignore[method-assign]
    started = time.perf_counter()
    search.run()
    print(f"{case.stem}: {len(cache)} candidates replayed in {time.perf_counter() - started:.0f} s",
          file=sys.stderr)
    CACHE.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(cache))
    return cache


def quality(result: Any) -> float:
    """A search's result as one number: the best score, or the front's hypervolume."""
    feasible = result.feasible
    if not feasible:
        return float("-inf")
    if result.config.optimization.target == "pareto":
        return hypervolume([(e["metrics"]["throughput_per_gpu"], e["metrics"]["throughput_per_user"])
                            for e in feasible])
    return max(e["score"] for e in feasible)


def search_once(case: Path, cache: dict[str, dict[str, Any]], overrides: list[str]) -> tuple[Any, float]:
    from servesim.search.run import Search

    search = Search(load(case, overrides), base_dir=case.parent)
    search._executor = lambda: CachedExecutor(cache)  # type: ignore[method-assign]
    started = time.perf_counter()
    result = search.run()
    return result, time.perf_counter() - started


def optimum(case: Path, cache: dict[str, dict[str, Any]]) -> float:
    result, _ = search_once(case, cache, ["optimizer.algorithm=grid", "optimizer.max_trials=100000"])
    return quality(result)


def measure(case: Path, algorithms: list[str], seeds: int, overrides: list[str]) -> dict[str, Any]:
    cache = full_space(case)
    best = optimum(case, cache)
    row: dict[str, Any] = {"case": case.stem, "space": len(cache), "optimum": best, "algorithms": {}}
    for algorithm in algorithms:
        values, seconds, replays = [], [], []
        for seed in range(seeds):
            result, wall = search_once(case, cache, [f"optimizer.algorithm={algorithm}", f"optimizer.seed={seed}",
                                                     *overrides])
            values.append(quality(result))
            seconds.append(wall)
            replays.append(sum(e["eval_seconds"] is not None for e in result.entries))
        hits = sum(abs(v - best) <= 1e-9 * max(1.0, abs(best)) for v in values)
        near = sum(abs(v - best) <= 0.01 * abs(best) for v in values)
        row["algorithms"][algorithm] = {
            "hit_rate": hits / seeds, "within_1pct": near / seeds, "mean_best": statistics.fmean(values),
            "mean_fraction": statistics.fmean(_fraction(v, best) for v in values),
            "worst": min(values), "replays": statistics.fmean(replays), "search_s": statistics.fmean(seconds)}
        print(json.dumps({"case": case.stem, "algorithm": algorithm, **row["algorithms"][algorithm]}), file=sys.stderr)
    return row


def _fraction(value: float, best: float) -> float:
    """How close `value` comes to `best` (1 = as good): value/best, or best/value for scores that
    are negated costs (GPUs, latencies)."""
    if best > 0:
        return value / best
    return best / value if value < 0 else 0.0


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| case | space | optimum | algorithm | hit rate | within 1 % | mean best | mean best / optimum | worst |",
             "|---|---:|---:|---|---:|---:|---:|---:|---:|"]
    for row in rows:
        for algorithm, r in row["algorithms"].items():
            fraction = f"{r['mean_fraction']:.3f}"
            lines.append(f"| {row['case']} | {row['space']} | {row['optimum']:,.4g} | {algorithm} | "
                         f"{r['hit_rate']:.0%} | {r['within_1pct']:.0%} | {r['mean_best']:,.4g} | {fraction} | "
                         f"{r['worst']:,.4g} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cases", nargs="*", type=Path)
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--algorithms", default="bayesian,random")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="PATH=YAML")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args()
    cases = args.cases or sorted((HERE / "recommend").glob("*.yaml")) + sorted((HERE / "recommend" / "search").glob("*.yaml"))
    rows = [measure(case.resolve(), args.algorithms.split(","), args.seeds, args.overrides) for case in cases]
    text = table(rows)
    print(text)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
