"""`servesim data fetch` (the reference's AIConfigurator database into servesim's cache),
`servesim data timing-cache` (the memo of AIConfigurator lookups) and `servesim compare` (runs
side by side in one HTML page)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from servesim.cli.common import write_stdout
from servesim.errors import ConfigError, RunError


def register(sub: Any) -> None:
    """Add `data fetch`, `data timing-cache` and `compare` to the `servesim` command."""
    data = sub.add_parser("data", help="servesim's cache: the reference's AIConfigurator database, the timing cache")
    data_sub = data.add_subparsers(dest="data_command", required=True)
    fetch = data_sub.add_parser("fetch", help="fetch (or unpack) it ahead of time; prints where it is")
    fetch.add_argument("--gpu", action="append", default=[], metavar="NAME",
                       help="only this GPU's data (repeatable; default: every GPU)")
    fetch.add_argument("--from", dest="source", metavar="WHEEL_OR_URL",
                       help="a downloaded aisimulate-0.1.0.dev2 wheel, or a mirror's URL of it")
    fetch.set_defaults(run_command=data_fetch)
    timing = data_sub.add_parser("timing-cache", help="the memo of AIConfigurator lookups runs share: where it is "
                                                      "and what it holds")
    timing.add_argument("--clear", action="store_true", help="remove every file of it")
    timing.set_defaults(run_command=data_timing_cache)
    compare = sub.add_parser("compare", help="compare runs (servesim outputs or measured benchmarks) in one HTML page")
    compare.add_argument("runs", nargs="+", metavar="RUN",
                         help="a servesim --output-dir, or a measured run: per-request JSONL with send/first-token/"
                              "end times, an AIPerf profile_export.jsonl, or a vLLM benchmark result JSON")
    compare.add_argument("-o", "--output", default="compare.html", help="the HTML file to write (default: compare.html)")
    compare.add_argument("--label", action="append", default=[], help="name of each run, in order (repeatable)")
    for target in ("ttft", "itl", "e2e"):
        compare.add_argument(f"--sla-{target}-ms", type=_target_ms, default=None,
                             help=f"mark this {target.upper()} target on the distributions")
    compare.set_defaults(run_command=compare_runs)


def _target_ms(text: str) -> float:
    """An SLA target given on the command line: a finite number of milliseconds > 0."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number of milliseconds > 0 (got {text!r})")
    return value


def data_fetch(args: argparse.Namespace) -> int:
    """Fill the cache; 2 for a bad source, 1 when the data cannot be had."""
    from servesim.perf.aicdata import DataUnavailable, fetch

    try:
        root, parts = fetch(args.gpu or None, source=args.source)
    except ConfigError as exc:
        print(f"servesim: error: {exc}", file=sys.stderr)
        return 2
    except DataUnavailable as exc:
        print(f"servesim data fetch failed: {exc}", file=sys.stderr)
        return 1
    done = ", ".join(p.removeprefix("data/") or "top-level files" for p in parts) or "nothing new"
    return write_stdout("data fetch", f"{root}\n  unpacked: {done}\n")


def data_timing_cache(args: argparse.Namespace) -> int:
    """List (or clear) the timing cache's files: one per AIC engine, with its entry counts."""
    import time

    from servesim.perf import timingcache

    folder = timingcache.cache_root()
    if folder is None:
        return write_stdout("data timing-cache",
                            f"the timing cache is off ({timingcache.ENV}={os.environ.get(timingcache.ENV)})\n")
    found = timingcache.files(folder) if folder.is_dir() else []
    size = sum(p.stat().st_size for p in found)
    if args.clear:
        for path in found:
            path.unlink(missing_ok=True)
        return write_stdout("data timing-cache", f"{folder}\n  removed {len(found)} files ({size / 1e6:.1f} MB)\n")
    lines = [f"{folder}\n  {len(found)} files, {size / 1e6:.1f} MB (bound {timingcache.limit_bytes() / 1e6:.0f} MB, "
             f"{timingcache.ENV_MB})"]
    for path in reversed(found):
        try:
            header = timingcache.file_header(path)
            key = header["identity"]["key"]
            what = (f"{key['model']} on {key['system']}, {key['backend']} {key['version']}, tp {key['tp']} pp {key['pp']}"
                    f"; {header['decode']:,} decode + {header['prefill']:,} prefill answers")
        except (OSError, ValueError, KeyError, TypeError) as exc:
            what = f"unreadable ({exc})"
        stamp = time.strftime("%Y-%m-%d %H:%M", time.localtime(path.stat().st_mtime))
        lines.append(f"  {path.name}  {stamp}  {path.stat().st_size / 1e6:.1f} MB  {what}")
    return write_stdout("data timing-cache", "\n".join(lines) + "\n")


def compare_runs(args: argparse.Namespace) -> int:
    """Write the comparison page; 2 for an unusable option (or a missing plotly), 1 for a bad
    input: a measurement file or a servesim output folder (the message names the file and line)."""
    from servesim.report.html.compare import write_compare
    from servesim.report.sla import Sla

    sla = Sla(args.sla_ttft_ms, args.sla_itl_ms, args.sla_e2e_ms)
    try:
        write_compare(args.runs, Path(args.output), args.label,
                      sla if any(v is not None for v in (sla.ttft_ms, sla.itl_ms, sla.e2e_ms)) else None)
    except (ConfigError, ImportError, OSError) as exc:
        print(f"servesim compare: error: {exc}", file=sys.stderr)
        return 2
    except RunError as exc:  # an input's file (the message names the file and line)
        print(f"servesim compare: error: {exc}", file=sys.stderr)
        return 1
    return write_stdout("compare", f"Saved comparison to: {args.output}\n")
