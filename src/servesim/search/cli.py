"""`servesim recommend`: read the config, search, write the outputs, print the ranking.

Exit codes follow the reference: 0 with at least one candidate that meets the target, 1 when
none does (the closest is named, no recommendation is written) or the search failed, 2 for configuration errors, 130 when interrupted (the ledger of the
candidates that finished is written first).
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable
import sys
from pathlib import Path
from typing import Any

from servesim.errors import ConfigError

def register(sub: Any) -> None:
    """Register the `recommend` subcommand."""
    from servesim.cli.common import add_common_arguments

    p = sub.add_parser("recommend", help="search deployments for the best one under a GPU budget and an SLA")
    add_common_arguments(p, "recommend", "recommendations/ and the ledger")
    p.add_argument("--executor", choices=("local", "ray"), default="local",
                   help="replay candidates in local worker processes (default) or as Ray tasks")
    p.add_argument("--ray-address", default=None, help="Ray cluster to join (default: start a local instance)")
    p.add_argument("--report", action="store_true",
                   help="also write report.html: every candidate on the Pareto chart, the top ten (needs plotly)")
    p.set_defaults(run_command=main)


def load_recommend_config(path: str, overrides: list[str], *, allow_duplicate_keys: bool = False) -> Any:
    """Read, override and validate a recommend config (ConfigError naming the keys)."""
    from pydantic import ValidationError

    from servesim.config.load import apply_overrides, describe_validation_error, read_mapping
    from servesim.search.schema import RecommendConfig

    data = read_mapping(path, allow_duplicate_keys)
    data = apply_overrides(data, overrides, refused=(), allow_duplicate_keys=allow_duplicate_keys)
    try:
        return RecommendConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError("\n".join(describe_validation_error(exc))) from None


def _check_stack(cfg: Any, stack: str | None) -> None:
    """`--stack`: known, and on the engine stack no router or planner section (as the reference)."""
    from servesim.config.load import STACKS

    if stack is not None and stack not in STACKS:
        raise ConfigError(f"stack {stack!r} is unavailable; installed stacks: {', '.join(STACKS)}")
    if stack == "engine":
        found = [name for name in ("router", "planner") if getattr(cfg, name) is not None]
        if found:
            raise ConfigError("\n".join(f"{name}: config adapter 'engine.{name}' is unavailable; installed "
                                         "adapters: <none> (the router and planner sections need --stack dynamo)"
                                         for name in found))


def main(args: argparse.Namespace) -> int:
    from servesim.cli.common import compat_overrides, config_error
    from servesim.errors import RunError
    from servesim.outputs import owned_files, prepare_folder
    from servesim.search import outputs
    from servesim.search.run import Search, progress_line

    out_dir = Path(args.output_dir)
    try:
        cfg = load_recommend_config(args.config, compat_overrides(args), allow_duplicate_keys=args.allow_duplicate_keys)
        _check_stack(cfg, args.stack)
        _check_extras(args)
        prepare_folder(out_dir, args.overwrite, subfolders=("recommendations",))
        # previous results (--overwrite) stay until this search has run to its end; only into a
        # folder without any is the ledger written after each round (as the search goes)
        previous = bool(owned_files(out_dir))
        search = Search(cfg, base_dir=Path(args.config).resolve().parent, executor=args.executor,
                        ray_address=args.ray_address, progress=progress_line() if sys.stderr.isatty() else None,
                        on_round=None if previous else _throttled(lambda result: outputs.write_ledger(out_dir, result)))
    except ConfigError as exc:
        return config_error(args.config, exc)
    except ImportError as exc:
        print(f"servesim: error: {exc}", file=sys.stderr)
        return 2
    except RunError as exc:  # the search could not be set up (a model's HF config, the output folder)
        print(f"servesim recommend failed: {exc}", file=sys.stderr)
        return exc.exit_code
    from servesim.search.executors import ClusterUnavailable

    try:
        result = search.run()
    except ConfigError as exc:
        return config_error(args.config, exc)
    except ClusterUnavailable as exc:
        print(f"servesim: error: {exc}", file=sys.stderr)
        return 2
    except RunError as exc:  # a round's ledger could not be written
        print(f"servesim recommend failed: {exc}", file=sys.stderr)
        return exc.exit_code
    if sys.stderr.isatty():
        sys.stderr.write("\n")
    for note in result.notes:
        print(f"servesim: note: {note}", file=sys.stderr)
    signal_code = 128 + result.interrupt_signal
    if result.interrupted and previous:
        print(f"servesim: interrupted; the previous results in {out_dir} are kept", file=sys.stderr)
        return signal_code
    try:
        _write_outputs(out_dir, result, args.report)
    except RunError as exc:
        print(f"servesim recommend failed: {exc}", file=sys.stderr)
        return exc.exit_code
    if result.interrupted:
        print(f"servesim: interrupted; ledger of the finished candidates in {out_dir / 'recommendation.json'}",
              file=sys.stderr)
        return signal_code
    from servesim.cli.common import write_stdout

    code = write_stdout("recommend", outputs.stdout_json(result, Path(args.output_dir)) + "\n"
                        if args.format == "json" else outputs.stdout_table(result, out_dir))
    if code:
        return code
    if not result.feasible:
        closest = result.closest()
        where = (f"; closest: trial {closest['trial']} ({outputs.describe(closest)}), missing by "
                 f"{100 * closest['shortfall']:.0f} %: {'; '.join(closest['missed'])}") if closest else ""
        print(f"servesim: no candidate meets the target{where}; no recommendation written", file=sys.stderr)
        return 1
    return 0


def _write_outputs(out_dir: Path, result: Any, report: bool) -> None:
    """The recommendations, the ledger and (with --report) report.html, replacing the folder's
    previous results only once all of them are written (`servesim.outputs.OutputSet`)."""
    from servesim.outputs import OutputSet
    from servesim.search import outputs

    with OutputSet(out_dir) as staged:
        outputs.write_recommendations(out_dir, result, staged)
        outputs.write_ledger(out_dir, result, staged)
        if report:
            from servesim.report.html.search import write_search_report

            document = outputs.ledger(result)
            staged.stage_file("report.html", lambda path: write_search_report(document, path, base_dir=out_dir))
        staged.commit()


def _throttled(write: Callable[[Any], None]) -> Callable[[Any], None]:
    """`write` after a round, but not more often than every 2 s nor than ten times its own last
    duration (the ledger grows with the search: rewriting it after every round was quadratic)."""
    last = {"at": -math.inf, "took": 0.0}

    def maybe(result: Any) -> None:
        now = time.monotonic()
        if now - last["at"] >= max(2.0, 10 * last["took"]):
            write(result)
            last["at"], last["took"] = now, time.monotonic() - now

    return maybe


def _check_extras(args: argparse.Namespace) -> None:
    """An ImportError naming the extra to install when an option needs a missing package (before
    any candidate is replayed, not when the results are written)."""
    if args.report:
        from servesim.report.html.page import plotly_modules

        plotly_modules()
    if args.executor == "ray":
        try:
            import ray  # noqa: F401
        except ImportError:
            raise ImportError("--executor ray needs Ray: pip install 'servesim[ray]'") from None
