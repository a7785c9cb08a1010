"""`servesim recommend` against the reference's `aisimulate recommend` at the same max_trials.

For every case in benchmarks/recommend/ both tools search (whole processes, wall time measured
around each), then the reference's own `predict` scores each tool's recommendation 0001.yaml
with the case's target (pareto: the hypervolume of each tool's front above (0, 0), every front
config scored by the reference). Prints a table; `--write-readme` puts it in benchmarks/README.md.

    python3 benchmarks/recommend.py [-k NAME] [--repeat N] [--write-readme] [--rerun-reference]
                                    [--cases DIR --marker NAME] [--python PATH]

`--cases DIR` runs the configs of another folder (their reference results cached in
DIR/reference-results.json, the table written between `<!-- NAME:begin -->` and `<!-- NAME:end -->`
of benchmarks/README.md with `--marker NAME`); `--python PATH` runs servesim with another
interpreter, e.g. a venv with the base install only (`pip install -e .`, no extras).

servesim's side runs `--repeat` times (default 3) and reports the range of its wall time and
candidates per minute (the machine is shared; its quality is the same on every run, checked).

The reference's side takes minutes per case (its Vizier search); its wall time and quality are
kept in benchmarks/recommend/reference-results.json, keyed by the case's config text, and reused
until the config changes or --rerun-reference is given.

Needs the reference (../shared/reference/install.sh). Until servesim's default timing uses the
reference's database, SERVESIM_AIC_SYSTEMS_PATH is pointed at it for servesim's runs.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
REFERENCE = HERE.parents[1] / "shared" / "reference"
CASES = HERE / "recommend"
README = HERE / "README.md"
REFERENCE_RESULTS = CASES / "reference-results.json"


def reference_bin() -> Path:
    venv = subprocess.run([str(REFERENCE / "install.sh"), "--check"], capture_output=True, text=True)
    if venv.returncode != 0:
        sys.exit("the reference is not installed: ../shared/reference/install.sh")
    return Path(venv.stdout.strip()) / "bin" / "aisimulate"


def timed(cmd: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, str]:
    started = time.perf_counter()
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if done.returncode not in (0, 1):
        sys.exit(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return wall, done.stdout


def score(aisimulate: Path, config: Path, target: str, env: dict[str, str]) -> dict[str, float]:
    """The reference's predict of one config, reduced to the objective(s) of `target`."""
    with tempfile.TemporaryDirectory() as out:
        _, text = timed([str(aisimulate), "predict", "-c", str(config), "--output-dir", out, "--overwrite",
                         "--format", "json"], config.parent, env)
    s = json.loads(text)
    gpus = s["gpu_hours"] / (s["duration_ms"] / 3_600_000) if s["gpu_hours"] > 0 else 0.0
    values = {"throughput": s["output_throughput_tok_s"], "goodput": s.get("goodput_output_throughput_tok_s", 0.0),
              "throughput_per_gpu": s["output_throughput_tok_s"] / gpus if gpus else 0.0,
              "goodput_per_gpu": s.get("goodput_output_throughput_tok_s", 0.0) / gpus if gpus else 0.0,
              "throughput_per_user": s["mean_output_token_throughput_per_user"]}
    return values


def hypervolume(points: list[tuple[float, float]]) -> float:
    """Area dominated by `points` (both maximised) above the origin."""
    area, best_y = 0.0, 0.0
    for x, y in sorted(points, reverse=True):
        if y > best_y:
            area += x * (y - best_y)
            best_y = y
    return area


def quality(aisimulate: Path, out: Path, target: str, env: dict[str, str]) -> float:
    folder = out / "recommendations"
    configs = sorted(folder.glob("*.yaml"))
    if not configs:
        return float("nan")
    if target == "pareto":
        points = [score(aisimulate, c, target, env) for c in configs]
        return hypervolume([(p["throughput_per_gpu"], p["throughput_per_user"]) for p in points])
    return score(aisimulate, configs[0], target, env)[target]


def reference_side(path: Path, aisimulate: Path, target: str, rerun: bool) -> dict[str, float]:
    """The reference's wall time and quality on a case (cached by the config's text)."""
    results = path.parent / REFERENCE_RESULTS.name
    cache = json.loads(results.read_text()) if results.exists() else {}
    entry = cache.get(path.stem)
    if entry is not None and entry["config"] == path.read_text() and not rerun:
        return entry
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "ref"
        wall, _ = timed([str(aisimulate), "recommend", "-c", str(path), "--output-dir", str(out), "--overwrite",
                         "--format", "json"], path.parent, dict(os.environ))
        entry = {"config": path.read_text(), "wall_s": wall,
                 "quality": quality(aisimulate, out, target, dict(os.environ))}
    cache = json.loads(results.read_text()) if results.exists() else {}  # another process may have added one
    cache[path.stem] = entry
    results.write_text(json.dumps(cache, indent=1) + "\n")
    return entry


@dataclass
class Run:
    """One `servesim recommend` run of a case."""

    wall: float
    replayed: int
    algorithm: str
    screen_s: float
    quality: float


def ours(path: Path, aisimulate: Path, target: str, env: dict[str, str], python: str = sys.executable) -> Run:
    """One `servesim recommend` run: wall time, replays, the reference's score of its output."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "ours"
        wall, _ = timed([python, "-m", "servesim", "recommend", "-c", str(path), "--output-dir", str(out),
                         "--overwrite", "--format", "json"], path.parent, env)
        ledger = json.loads((out / "recommendation.json").read_text())
        replayed = sum(e["eval_seconds"] is not None for e in ledger["candidates"])
        return Run(wall, replayed, ledger["algorithm"], ledger.get("screen_seconds", 0.0),
                   quality(aisimulate, out, target, dict(os.environ)))


def run_case(path: Path, aisimulate: Path, rerun: bool, repeat: int, python: str = sys.executable,
             reference_only: bool = False) -> dict[str, object]:
    cfg = yaml.safe_load(path.read_text())
    target = cfg["optimization"]["target"]
    env = dict(os.environ)
    if "SERVESIM_AIC_SYSTEMS_PATH" not in env:
        env["SERVESIM_AIC_SYSTEMS_PATH"] = subprocess.run([str(REFERENCE / "aic-systems-path.sh")],
                                                         capture_output=True, text=True).stdout.strip()
    ref = reference_side(path, aisimulate, target, rerun)
    if reference_only:
        return {"case": path.stem, **ref}
    runs = [ours(path, aisimulate, target, env, python) for _ in range(repeat)]
    if len({round(r.quality, 6) for r in runs}) > 1:
        sys.exit(f"{path.stem}: servesim's result differs between runs: {[r.quality for r in runs]}")
    walls = [r.wall for r in runs]
    trials = cfg["optimizer"]["max_trials"]
    replayed = runs[0].replayed
    return {
        "case": path.stem, "target": target, "max_trials": trials, "algorithm": runs[0].algorithm,
        "ref_s": ref["wall_s"], "ours_s": (min(walls), max(walls)),
        "ratio": (min(walls) / ref["wall_s"], max(walls) / ref["wall_s"]),
        "ref_quality": ref["quality"], "ours_quality": runs[0].quality,
        "ref_cpm": trials / ref["wall_s"] * 60, "ours_cpm": (replayed / max(walls) * 60, replayed / min(walls) * 60),
        "ours_replayed": replayed, "screen_s": (min(r.screen_s for r in runs), max(r.screen_s for r in runs)),
    }


def table(rows: list[dict[str, object]]) -> str:
    head = ("| case | target | trials | servesim (s) | of which screening (s) | reference (s) | ratio | "
            "quality servesim | quality reference | candidates/min servesim | candidates/min reference |\n"
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")

    def q(value: object) -> str:
        return "no recommendation" if value != value else f"{value:,.1f}"

    def span(pair: Any, fmt: str) -> str:
        low, high = pair
        return f"{low:{fmt}}–{high:{fmt}}" if f"{low:{fmt}}" != f"{high:{fmt}}" else f"{low:{fmt}}"

    lines = [f"| {r['case']} | {r['target']} | {r['max_trials']} ({r['algorithm']}) | {span(r['ours_s'], '.1f')} | "
             f"{span(r['screen_s'], '.1f')} | {r['ref_s']:.1f} | {span(r['ratio'], '.3f')} | "
             f"{q(r['ours_quality'])} | {q(r['ref_quality'])} | {span(r['ours_cpm'], '.0f')} | {r['ref_cpm']:.0f} |"
             for r in rows]
    return head + "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-k", default="", help="only cases whose name contains this")
    parser.add_argument("--write-readme", action="store_true")
    parser.add_argument("--rerun-reference", action="store_true", help="do not reuse cached reference results")
    parser.add_argument("--repeat", type=int, default=3, help="servesim runs per case (their range is reported)")
    parser.add_argument("--cases", type=Path, default=CASES, help="the folder of recommend configs")
    parser.add_argument("--marker", default="recommend", help="the README block --write-readme replaces")
    parser.add_argument("--python", default=sys.executable, help="the interpreter that runs servesim")
    parser.add_argument("--reference-only", action="store_true", help="only run (and cache) the reference's side")
    args = parser.parse_args()
    aisimulate = reference_bin()
    rows = []
    for path in sorted(args.cases.resolve().glob("*.yaml")):
        if args.k in path.stem:
            rows.append(run_case(path, aisimulate, args.rerun_reference, args.repeat, args.python,
                                 args.reference_only))
            print(json.dumps(rows[-1]), file=sys.stderr)
    if args.reference_only:
        return
    text = table(rows)
    print(text)
    if args.write_readme:
        readme = README.read_text()
        block = f"<!-- {args.marker}:begin -->\n{text}<!-- {args.marker}:end -->"
        readme = re.sub(rf"<!-- {args.marker}:begin -->.*<!-- {args.marker}:end -->", block, readme, flags=re.S)
        README.write_text(readme)


if __name__ == "__main__":
    main()
