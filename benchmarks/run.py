#!/usr/bin/env python3
"""Time servesim (and, when installed, the reference) on the benchmark configs.

Each case is run as a whole process, best of N, servesim and the reference alternating on the
same machine; the table gives wall time, the servesim / reference ratio and peak memory (RSS).

    python3 benchmarks/run.py                 # all cases, best of 3
    python3 benchmarks/run.py -n 5 p1         # cases whose name contains "p1"
    python3 benchmarks/run.py --write-readme  # also refresh the table in benchmarks/README.md
    python3 benchmarks/run.py --cold p3       # servesim's AIC timing cache empty for every run

servesim runs with a timing cache of its own (`servesim.perf.timingcache`) in a temporary folder:
primed by one untimed run of the case first ("warm", what a user's second run sees), or emptied
before every run with ``--cold`` (a first run). The table's last column says which; "—" for a
case without AIConfigurator timing, which the cache does not concern.

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


def run_case(config: Path, repeats: int, reference: list[str] | None, cold: bool = False) -> dict:
    servesim = [sys.executable, "-m", "servesim"]
    best: dict[str, tuple[float, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp) / "timing-cache"
        env = dict(_ENV, SERVESIM_TIMING_CACHE=str(cache))
        if not cold:
            timed(predict(servesim, config, Path(tmp) / "priming"), config.parent, env)
        for _ in range(repeats):
            for name, tool in (("servesim", servesim), ("reference", reference)):
                if tool is None:
                    continue
                if cold:
                    shutil.rmtree(cache, ignore_errors=True)
                wall, rss = timed(predict(tool, config, Path(tmp) / name), config.parent,
                                  env if name == "servesim" else None)
                if name not in best or wall < best[name][0]:
                    best[name] = (wall, max(rss, best.get(name, (0, 0))[1]))
        used = any(cache.glob("*.aictc"))
    row = {"case": config.stem, "servesim_s": best["servesim"][0], "servesim_mb": best["servesim"][1],
           "timing_cache": ("cold" if cold else "warm") if used else "—"}
    if "reference" in best:
        row.update(reference_s=best["reference"][0], reference_mb=best["reference"][1],
                   ratio=best["servesim"][0] / best["reference"][0])
    return row


def table(rows: list[dict]) -> str:
    lines = ["| case | servesim (s) | reference (s) | ratio | servesim peak MB | reference peak MB | AIC timing cache |",
             "|---|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        ref = f"{r['reference_s']:.2f}" if "reference_s" in r else "—"
        ratio = f"{r['ratio']:.2f}" if "ratio" in r else "—"
        ref_mb = f"{r['reference_mb']:.0f}" if "reference_mb" in r else "—"
        lines.append(f"| {r['case']} | {r['servesim_s']:.2f} | {ref} | {ratio} | {r['servesim_mb']:.0f} | {ref_mb} "
                     f"| {r['timing_cache']} |")
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
    parser.add_argument("--cold", action="store_true",
                        help="empty servesim's AIC timing cache before every run (default: prime it first: warm)")
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
        rows.append(run_case(config, args.repeats, reference, args.cold))
    text = table(rows)
    print(text)
    if args.write_readme:
        write_readme(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
