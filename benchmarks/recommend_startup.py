"""Where the fixed start-up of a `servesim recommend` run goes, in fresh processes.

Each measurement is a new interpreter running one case with ``optimizer.max_trials=1`` and one
worker, timing: the imports and the config, building the search (the newest database version
per backend, the static checks of the default shapes), the search until its one replay is done
(the timing database loaded per backend, the screening, forking the worker, the replay), and
the whole process. Runs alternate between the checkouts given (``--src``, default this one) so
a busy machine spreads over all of them alike.

    python3 benchmarks/recommend_startup.py [CASE.yaml] [--runs 3] [--src PATH ...]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
CHILD = r"""
import json, sys, time
started = time.perf_counter()
from servesim.search.cli import load_recommend_config
from servesim.search.run import Search
cfg = load_recommend_config(sys.argv[1], ["optimizer.max_trials=1", "optimizer.parallelism=1"])
loaded = time.perf_counter()
search = Search(cfg, base_dir=__import__("pathlib").Path(sys.argv[1]).resolve().parent)
built = time.perf_counter()
result = search.run()
done = time.perf_counter()
replay = sum(e["eval_seconds"] or 0.0 for e in result.entries)
print(json.dumps({"imports_and_config": loaded - started, "search_built": built - loaded,
                  "search_run": done - built, "screen": result.screen_seconds if hasattr(result, "screen_seconds") else 0.0,
                  "replay": replay}))
"""


def measure(src: Path, case: Path) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=str(src))
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", CHILD, str(case)], capture_output=True, text=True, env=env)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(done.stderr[-2000:])
    return {**json.loads(done.stdout.strip().splitlines()[-1]), "process": wall}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("case", nargs="?", type=Path, default=HERE / "recommend" / "r1-agg-goodput.yaml")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--src", type=Path, action="append", help="a checkout's src/ (repeatable)")
    args = parser.parse_args()
    sources = args.src or [HERE.parent / "src"]
    found: dict[Path, list[dict[str, float]]] = {src: [] for src in sources}
    for _ in range(args.runs):
        for src in sources:
            found[src].append(measure(src, args.case.resolve()))
            print(str(src), json.dumps({k: round(v, 2) for k, v in found[src][-1].items()}), file=sys.stderr)
    for src, runs in found.items():
        print(f"{src}:")
        for key in runs[0]:
            values = [r[key] for r in runs]
            print(f"  {key:20s} median {statistics.median(values):6.2f} s  range {min(values):.2f}–{max(values):.2f}")


if __name__ == "__main__":
    main()
