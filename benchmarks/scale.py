#!/usr/bin/env python3
"""Wall time and peak memory of `servesim predict` as the request count grows.

The fixed-timing case r1 (128 -> 16 tokens, 8 vLLM replicas, Poisson 400 req/s) at 100,000,
300,000 and 1,000,000 requests, each run once as a whole process, without and with per-request
capture (`--capture-per-request`, which writes requests.jsonl) up to `--capture-up-to` requests.

    python3 benchmarks/scale.py                       # 100k, 300k, 1M; capture on up to 300k
    python3 benchmarks/scale.py 100000 --capture-up-to 0   # one size, capture off only
    python3 benchmarks/scale.py --write-readme        # refresh the table in benchmarks/README.md
    python3 benchmarks/scale.py --reference           # also the reference (capture off), when installed
    python3 benchmarks/scale.py --general             # also servesim's general engine (capture off)

r1's requests are alike, so servesim replays it with the steady replay (`docs/design.md`). With
`--general` the same run is also replayed by the general engine: r1 with a KV pool of 767 blocks
per worker, which never binds in this run (the report is the same) but which the steady replay
cannot rule out binding (256 sequences x 3 blocks > 767), so it is not taken.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from run import reference_command, write_readme

CONFIG = Path(__file__).resolve().parent / "configs" / "r1-fixed-report.yaml"
MARKERS = ("<!-- scale:begin -->", "<!-- scale:end -->")
GENERAL = ["--set", "engine.workers.aggregated.kv_cache.capacity.blocks=767"]
"""Keeps r1 off the steady replay without changing its report (see the module docstring)."""


def measure(requests: int, capture: bool, out: Path, tool: list[str] | None = None,
            extra: list[str] | None = None) -> tuple[float, float, float]:
    """(wall seconds, CPU seconds, peak RSS in MB) of one run of servesim (or of `tool`)."""
    cmd = (tool or [sys.executable, "-m", "servesim"]) + [
        "predict", "-c", str(CONFIG), "--output-dir", str(out),
        "--overwrite", "--format", "json", "--set", f"traffic.stop.requests={requests}"] + (extra or [])
    started = time.perf_counter()
    proc = subprocess.Popen(cmd + (["--capture-per-request"] if capture else []), stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("requests", nargs="*", type=int, default=[100_000, 300_000, 1_000_000])
    parser.add_argument("--capture-up-to", type=int, default=300_000,
                        help="also run with per-request capture at sizes up to this (default 300,000)")
    parser.add_argument("--reference", action="store_true",
                        help="also run the reference (capture off) at each size, when it is installed")
    parser.add_argument("--general", action="store_true",
                        help="also run servesim's general engine on the same run (capture off)")
    parser.add_argument("--write-readme", action="store_true", help="refresh the table in benchmarks/README.md")
    args = parser.parse_args()
    tools: list[tuple[str, list[str] | None, list[str] | None]] = [("servesim", None, None)]
    if args.general:
        tools.append(("servesim, general engine", None, GENERAL))
    reference = reference_command() if args.reference else None
    if reference:
        tools.append(("reference", reference, None))
    lines = ["| tool | requests | capture | wall (s) | CPU (s) | peak RSS (MB) | output (MB) |",
             "|---|---:|---|---:|---:|---:|---:|"]
    for requests in args.requests:
        for name, tool, extra in tools:
            captures = (False, True) if name == "servesim" and requests <= args.capture_up_to else (False,)
            for capture in captures:
                with tempfile.TemporaryDirectory() as tmp:
                    out = Path(tmp) / "out"
                    wall, cpu, rss = measure(requests, capture, out, tool, extra)
                    size = sum(f.stat().st_size for f in out.iterdir()) / 1e6
                row = (f"| {name} | {requests:,} | {'on' if capture else 'off'} | {wall:.1f} | {cpu:.1f} | "
                       f"{rss:.0f} | {size:.1f} |")
                print(row, flush=True)
                lines.append(row)
    if args.write_readme:
        write_readme("\n".join(lines), MARKERS)
    return 0


if __name__ == "__main__":
    sys.exit(main())
