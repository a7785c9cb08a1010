"""`servesim predict`: parse options, load the config, simulate, write the outputs.

Exit codes follow the reference: 0 success, 2 configuration or usage errors, 1 when the
simulation itself fails (or its results cannot be written), 130 on interrupt (143 on SIGTERM).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from servesim.errors import ConfigError, RunError
from servesim.outputs import OutputSet, os_reason, prepare_folder

if TYPE_CHECKING:
    from servesim.api import Report

DEFAULT_OUTPUT_DIR = "servesim-output"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="servesim", description="Simulate LLM inference serving.")
    sub = parser.add_subparsers(dest="command", required=True)
    predict = sub.add_parser("predict", help="replay a workload against a deployment and report latencies")
    predict.add_argument("-c", "--config", required=True, help="YAML config (the reference's predict schema)")
    predict.add_argument("--set", dest="overrides", action="append", default=[], metavar="PATH=YAML_VALUE",
                         help="override a config value before validation (repeatable)")
    predict.add_argument("--allow-duplicate-keys", action="store_true",
                         help="accept YAML mappings that repeat a key, the last value winning (as the "
                              "reference does); by default a repeated key is an error")
    predict.add_argument("--output-dir", default=DEFAULT_OUTPUT_DIR,
                         help=f"where prediction.json (and requests.jsonl) go (default: ./{DEFAULT_OUTPUT_DIR})")
    predict.add_argument("--overwrite", action="store_true",
                         help="replace servesim outputs already in --output-dir")
    predict.add_argument("--format", choices=("table", "json"), default="table", help="stdout format")
    predict.add_argument("--capture-per-request", action="store_true",
                         help="add per-request records to prediction.json and write requests.jsonl "
                              "and workers.json")
    predict.add_argument("--stdout-per-request", action="store_true",
                         help="with --format json and --capture-per-request, also print the per-request "
                              "records in the stdout line (as the reference does)")
    predict.add_argument("--unservable", choices=("reject", "fail"), default="reject",
                         help="a request that can never fit the KV pool is rejected with a reason "
                              "(default), or stops the run with an error; under 'fail' a run where "
                              "no request completed is an error too")
    return parser


def _prepare_output_dir(path: Path, overwrite: bool) -> None:
    """Create the output directory (or check the one there) before the run; nothing is removed
    until the new results are complete (see `servesim.outputs`)."""
    prepare_folder(path, overwrite)


def _predict(args: argparse.Namespace) -> int:
    from servesim.api import simulate
    from servesim.config import load_config

    out_dir = Path(args.output_dir)
    try:
        config = load_config(args.config, args.overrides, allow_duplicate_keys=args.allow_duplicate_keys)
        _prepare_output_dir(out_dir, args.overwrite)
    except ConfigError as exc:
        message = str(exc)
        if not message.startswith(f"{args.config}:"):  # errors read from the file name it already
            message = f"{args.config}: {message}"
        print(f"servesim: error: {message}", file=sys.stderr)
        return 2
    try:
        report = simulate(config, capture_per_request=args.capture_per_request,
                          progress=sys.stderr.isatty(), unservable=args.unservable)
        _check_outcome(report, args)
        _write_outputs(out_dir, report, args.capture_per_request)
    except RunError as exc:
        print(f"servesim predict failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    return _print_report(report, args, out_dir / "prediction.json")


def _check_outcome(report: Report, args: argparse.Namespace) -> None:
    """Warn when nothing completed (an error under --unservable fail); per-request capture needs
    at least one finished request (as in the reference)."""
    summary = report.summary
    if not summary["completed_requests"]:
        counts = ", ".join(f"{summary[key]} {key.removesuffix('_requests')}"
                           for key in ("rejected_requests", "incomplete_requests") if key in summary)
        detail = f" ({counts})" if counts else ""
        if args.unservable == "fail":
            raise RunError(f"no request completed{detail}")
        print(f"servesim: warning: no request completed{detail}", file=sys.stderr)
    if args.capture_per_request and not report.per_request:
        raise RunError("no request reached a terminal state, so there are no per-request records")


def _write_outputs(out_dir: Path, report: Report, capture: bool) -> None:
    """prediction.json, and with capture requests.jsonl and workers.json, replacing the previous
    set only once all of them are written."""
    from servesim.report.render import records_jsonl, report_json

    with OutputSet(out_dir) as outputs:
        outputs.stage("prediction.json", report_json(report.to_dict()))
        if capture:
            outputs.stage("requests.jsonl", records_jsonl(report.per_request or []))
            if report.extensions:
                outputs.stage("workers.json", report_json({"workers": report.extensions["workers"]}))
        outputs.commit()


def _print_report(report: Report, args: argparse.Namespace, prediction: Path) -> int:
    """The table or the JSON line on stdout; 1 when stdout cannot take it."""
    from servesim.report.render import render_table, report_line

    data = report.to_dict() if args.stdout_per_request else report.summary
    text = report_line(data) if args.format == "json" else render_table(data, str(prediction))
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        return 1
    except OSError as exc:
        print(f"servesim predict failed: cannot write to stdout: {os_reason(exc)}", file=sys.stderr)
        return 1
    return 0


class _Terminated(KeyboardInterrupt):
    """SIGTERM, handled like Ctrl-C."""


def _on_sigterm(signum: int, frame: object) -> None:
    raise _Terminated()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `servesim` command.

    SIGINT and SIGTERM stop the run cleanly (exit 130 / 143): the output folder keeps either
    its previous results or the complete new ones.
    """
    args = _parser().parse_args(argv)
    in_main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _on_sigterm) if in_main_thread else None
    try:
        return _predict(args)
    except KeyboardInterrupt as exc:
        print("servesim: interrupted", file=sys.stderr)
        return 128 + (signal.SIGTERM if isinstance(exc, _Terminated) else signal.SIGINT)
    except MemoryError:
        print("servesim predict failed: out of memory", file=sys.stderr)
        return 1
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def run() -> None:
    """The `servesim` executable: `main`, then exit at once.

    Every output is written and closed by then; skipping the interpreter's teardown (freeing
    every module and object one by one) saves ~0.1 s per run, which adds up in sweeps.
    """
    code = main()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except OSError:  # a closed pipe or a full device, already reported
        code = code or 1
    os._exit(code)


if __name__ == "__main__":
    run()
