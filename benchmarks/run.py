#!/usr/bin/env python3
"""Time servesim (and, when installed, the reference) on the benchmark configs.

Each case is run as a whole process, best of N, servesim and the reference alternating on the
same machine; the table gives wall time, the servesim / reference ratio and peak memory (RSS).

    python3 benchmarks/run.py                 # all cases, best of 3
    python3 benchmarks/run.py -n 5 p1         # cases whose name contains "p1"
    python3 benchmarks/run.py --write-readme  # also refresh the table in benchmarks/README.md
    python3 benchmarks/run.py --cold p3       # servesim cold only (AIC timing cache emptied every run)

servesim runs with a timing cache of its own (`servesim.perf.timingcache`) in a temporary folder,
timed both ways in each round: **cold** (the cache emptied before the run: a first run), then
the reference, then **warm** (the cache that cold run left: a user's second run of the config).
A case without AIConfigurator timing leaves no cache entry and has a cold column only.

The reference is AISimulate 0.1.0.dev2, installed by ../shared/reference/install.sh; without
it only servesim is timed. Cases whose inputs are missing (e.g. ../shared/data) are skipped.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
CONFIGS = HERE / "configs"
REFERENCE = HERE.parent.parent / "shared" / "reference"
MARKERS = ("<!-- results:begin -->", "<!-- results:end -->")


def reference_command() -> list[str] | None:
    """The reference's `aisimulate` executable, if installed."""
    check = REFERENCE / "install.sh"
    if not check.exists():
        return None
    done = subprocess.run([str(check), "--check"], capture_output=True, text=True)
    if done.returncode != 0:
        return None
    return [str(Path(done.stdout.strip()) / "bin" / "aisimulate")]


def inputs_present(config: Path) -> bool:
    source = yaml.safe_load(config.read_text()).get("traffic", {}).get("source", {})
    return all((config.parent / p).exists() for p in source.get("paths", []))


_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
"""Both tools run as installed for users: compiled modules cached (the first run writes them)."""


def timed(cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> tuple[float, float]:
    """Wall seconds and peak RSS (MB) of one run of `cmd`."""
    import time

    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env or _ENV)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        err = proc.stderr.read().decode() if proc.stderr else ""
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}): {err.strip()[-500:]}")
    return wall, usage.ru_maxrss / 1024


def predict(tool: list[str], config: Path, out: Path) -> list[str]:
    return tool + ["predict", "-c", config.name, "--output-dir", str(out), "--overwrite", "--format", "json"]


def run_case(config: Path, repeats: int, reference: list[str] | None, modes: tuple[str, ...] = ("cold", "warm")) -> dict:
    """Best wall time and peak RSS of servesim `modes` and the reference, alternating.

    Each round runs servesim cold (its timing cache emptied first: a first run), the reference,
    then servesim warm (the cache the cold run left: a second run of the same config). A case
    whose run leaves no cache entry (no AIConfigurator timing) is timed once per round ("cold").
    """
    servesim = [sys.executable, "-m", "servesim"]
    best: dict[str, tuple[float, float]] = {}

    def keep(name: str, wall: float, rss: float) -> None:
        if name not in best or wall < best[name][0]:
            best[name] = (wall, max(rss, best.get(name, (0, 0))[1]))

    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp) / "timing-cache"
        env = dict(_ENV, SERVESIM_TIMING_CACHE=str(cache))
        used = None
        for _ in range(repeats):
            if "cold" in modes or used is None:
                shutil.rmtree(cache, ignore_errors=True)
                wall, rss = timed(predict(servesim, config, Path(tmp) / "cold"), config.parent, env)
                used = any(cache.glob("*.aictc"))
                if "cold" in modes or not used:
                    keep("cold", wall, rss)
            if reference is not None:
                keep("reference", *timed(predict(reference, config, Path(tmp) / "reference"), config.parent))
            if used and "warm" in modes:
                keep("warm", *timed(predict(servesim, config, Path(tmp) / "warm"), config.parent, env))
    row: dict = {"case": config.stem, "aic": bool(used)}
    for name in ("cold", "warm", "reference"):
        if name in best:
            row[f"{name}_s"], row[f"{name}_mb"] = best[name]
    if "reference" in best:
        for name in ("cold", "warm"):
            if name in best:
                row[f"{name}_ratio"] = best[name][0] / best["reference"][0]
    return row


def table(rows: list[dict]) -> str:
    """The results as a markdown table ("—" where a column does not apply)."""
    def cell(row: dict, name: str, spec: str) -> str:
        return format(row[name], spec) if name in row else "—"

    lines = ["| case | servesim cold (s) | servesim warm (s) | reference (s) | cold ratio | warm ratio "
             "| servesim peak MB | reference peak MB |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        peak = max(r.get("cold_mb", 0), r.get("warm_mb", 0))
        lines.append(f"| {r['case']} | {cell(r, 'cold_s', '.2f')} | {cell(r, 'warm_s', '.2f')} "
                     f"| {cell(r, 'reference_s', '.2f')} | {cell(r, 'cold_ratio', '.2f')} "
                     f"| {cell(r, 'warm_ratio', '.2f')} | {peak:.0f} | {cell(r, 'reference_mb', '.0f')} |")
    return "\n".join(lines)


def write_readme(text: str, markers: tuple[str, str] = MARKERS) -> None:
    """Replace what stands between `markers` in benchmarks/README.md with `text`."""
    readme = HERE / "README.md"
    content = readme.read_text()
    pattern = re.compile(re.escape(markers[0]) + ".*?" + re.escape(markers[1]), re.S)
    readme.write_text(pattern.sub(lambda _: f"{markers[0]}\n{text}\n{markers[1]}", content))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("cases", nargs="*", help="substrings of case names (default: all)")
    parser.add_argument("-n", "--repeats", type=int, default=3, help="runs per tool, best kept (default 3)")
    parser.add_argument("--no-reference", action="store_true", help="time servesim only")
    parser.add_argument("--write-readme", action="store_true", help="refresh the table in benchmarks/README.md")
    parser.add_argument("--cold", action="store_true", help="time servesim cold only (its AIC timing cache "
                        "emptied before every run; default: cold and warm)")
    parser.add_argument("--warm", action="store_true", help="time servesim warm only (the cache a first run left)")
    args = parser.parse_args()
    reference = None if args.no_reference else reference_command()
    if reference is None:
        print("reference not installed: timing servesim only", file=sys.stderr)
    rows = []
    for config in sorted(CONFIGS.glob("*.yaml")):
        if args.cases and not any(c in config.stem for c in args.cases):
            continue
        if not inputs_present(config):
            print(f"{config.stem}: inputs missing, skipped", file=sys.stderr)
            continue
        print(f"{config.stem} ...", file=sys.stderr, flush=True)
        modes = ("cold",) if args.cold and not args.warm else ("warm",) if args.warm and not args.cold \
            else ("cold", "warm")
        rows.append(run_case(config, args.repeats, reference, modes))
    text = table(rows)
    print(text)
    if args.write_readme:
        write_readme(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
