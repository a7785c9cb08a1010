"""`servesim predict`: parse options, load the config, simulate, write the outputs;
`servesim data fetch`: fill the cache with the reference's AIConfigurator database.

Exit codes follow the reference: 0 success, 2 configuration or usage errors, 1 when the
simulation itself fails, 130 on interrupt.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from servesim.errors import ConfigError, RunError

DEFAULT_OUTPUT_DIR = "servesim-output"
_KNOWN_OUTPUTS = ("prediction.json", "requests.jsonl", "workers.json", "unreleased.json",
                  "recommendation.json", "recommendation.csv", "pareto.csv")
_RECOMMENDATION = re.compile(r"^\d{4}\.yaml$")


def add_common_arguments(command: argparse.ArgumentParser, schema: str, outputs: str) -> None:
    """The options `predict` and `recommend` share, as in the reference's CLI."""
    command.add_argument("-c", "--config", required=True, help=f"YAML config (the reference's {schema} schema)")
    command.add_argument("--set", dest="overrides", action="append", default=[], metavar="PATH=YAML_VALUE",
                         help="override a config value before validation (repeatable)")
    command.add_argument("--output-dir", default=DEFAULT_OUTPUT_DIR,
                         help=f"where {outputs} go (default: ./{DEFAULT_OUTPUT_DIR})")
    command.add_argument("--overwrite", action="store_true", help="replace servesim outputs already in --output-dir")
    command.add_argument("--format", choices=("table", "json"), default="table", help="stdout format")
    command.add_argument("--stack", default=None, metavar="{engine,dynamo}",
                         help="execution stack, as in the reference: 'engine' (no router/planner "
                              "sections) or 'dynamo'; default: every section is accepted")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="servesim", description="Simulate LLM inference serving.")
    sub = parser.add_subparsers(dest="command", required=True)
    predict = sub.add_parser("predict", help="replay a workload against a deployment and report latencies")
    add_common_arguments(predict, "predict", "prediction.json (and requests.jsonl)")
    predict.add_argument("--capture-per-request", action="store_true",
                         help="add per-request records to the report and write requests.jsonl")
    predict.add_argument("--unservable", choices=("reject", "fail"), default="reject",
                         help="a request that can never fit the KV pool is rejected with a reason "
                              "(default), or fails the run as in the reference")
    data = sub.add_parser("data", help="the reference's AIConfigurator database in servesim's cache")
    data_sub = data.add_subparsers(dest="data_command", required=True)
    fetch = data_sub.add_parser("fetch", help="fetch (or unpack) it ahead of time; prints where it is")
    fetch.add_argument("--gpu", action="append", default=[], metavar="NAME",
                       help="only this GPU's data (repeatable; default: every GPU)")
    fetch.add_argument("--from", dest="source", metavar="WHEEL_OR_URL",
                       help="a downloaded aisimulate-0.1.0.dev2 wheel, or a mirror's URL of it")
    from servesim.search.cli import add_parser

    add_parser(sub)
    return parser


def _config_error(config: str, exc: ConfigError) -> int:
    message = str(exc)
    if not message.startswith(f"{config}:"):  # errors read from the file name it already
        message = f"{config}: {message}"
    print(f"servesim: error: {message}", file=sys.stderr)
    return exc.exit_code


def _prepare_output_dir(path: Path, overwrite: bool) -> None:
    """Create the output directory, or clear servesim's own outputs from it with --overwrite."""
    if path.exists() and not path.is_dir():
        raise ConfigError(f"--output-dir {path}: not a directory")
    if path.is_dir() and any(path.iterdir()):
        if not overwrite:
            raise ConfigError(f"--output-dir {path} is not empty; use --overwrite to replace its outputs")
        for name in _KNOWN_OUTPUTS:
            (path / name).unlink(missing_ok=True)
        recommendations = path / "recommendations"
        if recommendations.is_dir():
            for item in recommendations.iterdir():
                if _RECOMMENDATION.match(item.name):
                    item.unlink()
    path.mkdir(parents=True, exist_ok=True)


def _predict(args: argparse.Namespace) -> int:
    from servesim.api import simulate
    from servesim.config import load_config
    from servesim.config.load import STACKS
    from servesim.report.render import records_jsonl, render_table, report_json, report_line

    if args.stack not in (None, *STACKS):
        print(f"servesim: error: stack {args.stack!r} is unavailable; installed stacks: {', '.join(STACKS)}",
              file=sys.stderr)
        return 2
    try:
        config = load_config(args.config, args.overrides, stack=args.stack)
        out_dir = Path(args.output_dir)
        _prepare_output_dir(out_dir, args.overwrite)
    except ConfigError as exc:
        return _config_error(args.config, exc)
    try:
        report = simulate(config, capture_per_request=args.capture_per_request,
                          progress=sys.stderr.isatty(), unservable=args.unservable)
    except ConfigError as exc:  # found while building (an unknown backend_version)
        return _config_error(args.config, exc)
    except RunError as exc:
        print(f"servesim predict failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return exc.exit_code
    data = report.to_dict()
    prediction = out_dir / "prediction.json"
    prediction.write_text(report_json(data))
    if report.extensions:
        _write_extensions(report.extensions, out_dir)
    if args.capture_per_request:
        if report.per_request is None or not report.per_request:
            print("servesim predict failed: RunError: no request reached a terminal state, "
                  "so there are no per-request records", file=sys.stderr)
            return 1
        (out_dir / "requests.jsonl").write_text(records_jsonl(report.per_request))
    if args.format == "json":
        sys.stdout.write(report_line(data) + "\n")
    else:
        sys.stdout.write(render_table(data, str(prediction)))
    return 0


def _write_extensions(extensions: dict[str, Any], out_dir: Path) -> None:
    """workers.json, and unreleased.json with a warning when an agentic run left requests
    unreleased."""
    from servesim.report.render import report_json
    from servesim.report.trajectories import unreleased_warning

    (out_dir / "workers.json").write_text(report_json({"workers": extensions["workers"]}))
    unreleased = extensions.get("unreleased")
    warning = unreleased_warning(unreleased) if unreleased is not None else None
    if warning is not None:
        (out_dir / "unreleased.json").write_text(report_json({"unreleased": unreleased}))
        print(f"servesim: warning: {warning}; see {out_dir / 'unreleased.json'}", file=sys.stderr)


def _data_fetch(args: argparse.Namespace) -> int:
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
    print(f"{root}\n  unpacked: {done}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `servesim` command."""
    args = _parser().parse_args(argv)
    try:
        if args.command == "recommend":
            from servesim.search.cli import main as recommend

            return recommend(args)
        return _data_fetch(args) if args.command == "data" else _predict(args)
    except KeyboardInterrupt:
        print("servesim: interrupted", file=sys.stderr)
        return 130


def run() -> None:
    """The `servesim` executable: `main`, then exit at once.

    Every output is written and closed by then; skipping the interpreter's teardown (freeing
    every module and object one by one) saves ~0.1 s per run, which adds up in sweeps.
    """
    code = main()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BrokenPipeError:
        code = code or 1
    os._exit(code)


if __name__ == "__main__":
    run()
