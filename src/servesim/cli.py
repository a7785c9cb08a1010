"""`servesim predict`: parse options, load the config, simulate, write the outputs.

(`servesim validate` and `servesim calibrate` are registered by `servesim.fidelity.commands`.)

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

from servesim.errors import ConfigError, RunError

DEFAULT_OUTPUT_DIR = "servesim-output"
_KNOWN_OUTPUTS = ("prediction.json", "requests.jsonl", "workers.json")
_RECOMMENDATION = re.compile(r"^\d{4}\.yaml$")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="servesim", description="Simulate LLM inference serving.")
    sub = parser.add_subparsers(dest="command", required=True)
    predict = sub.add_parser("predict", help="replay a workload against a deployment and report latencies")
    predict.add_argument("-c", "--config", required=True, help="YAML config (the reference's predict schema)")
    predict.add_argument("--set", dest="overrides", action="append", default=[], metavar="PATH=YAML_VALUE",
                         help="override a config value before validation (repeatable)")
    predict.add_argument("--output-dir", default=DEFAULT_OUTPUT_DIR,
                         help=f"where prediction.json (and requests.jsonl) go (default: ./{DEFAULT_OUTPUT_DIR})")
    predict.add_argument("--overwrite", action="store_true",
                         help="replace servesim outputs already in --output-dir")
    predict.add_argument("--format", choices=("table", "json"), default="table", help="stdout format")
    predict.add_argument("--capture-per-request", action="store_true",
                         help="add per-request records to the report and write requests.jsonl")
    predict.add_argument("--unservable", choices=("reject", "fail"), default="reject",
                         help="a request that can never fit the KV pool is rejected with a reason "
                              "(default), or fails the run as in the reference")
    from servesim.fidelity.commands import register

    register(sub)
    return parser


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
    from servesim.report.render import records_jsonl, render_table, report_json, report_line

    try:
        config = load_config(args.config, args.overrides)
        out_dir = Path(args.output_dir)
        _prepare_output_dir(out_dir, args.overwrite)
    except ConfigError as exc:
        message = str(exc)
        if not message.startswith(f"{args.config}:"):  # errors read from the file name it already
            message = f"{args.config}: {message}"
        print(f"servesim: error: {message}", file=sys.stderr)
        return exc.exit_code
    try:
        report = simulate(config, capture_per_request=args.capture_per_request,
                          progress=sys.stderr.isatty(), unservable=args.unservable)
    except RunError as exc:
        print(f"servesim predict failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return exc.exit_code
    data = report.to_dict()
    prediction = out_dir / "prediction.json"
    prediction.write_text(report_json(data))
    if report.extensions:
        (out_dir / "workers.json").write_text(report_json({"workers": report.extensions["workers"]}))
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


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `servesim` command."""
    args = _parser().parse_args(argv)
    try:
        return args.run_command(args) if hasattr(args, "run_command") else _predict(args)
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
