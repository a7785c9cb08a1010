"""`servesim predict`: parse options, load the config, simulate, write the outputs;
`servesim data fetch`: fill the cache with the reference's AIConfigurator database;
`servesim compare`: runs side by side in one HTML page. (`servesim recommend` is registered by
`servesim.search.cli`, `servesim validate` and `servesim calibrate` by `servesim.fidelity.commands`.)

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
from servesim.outputs import OutputSet, clear_outputs, os_reason, prepare_folder

if TYPE_CHECKING:
    from servesim.api import Report

DEFAULT_OUTPUT_DIR = "servesim-output"


def add_common_arguments(command: argparse.ArgumentParser, schema: str, outputs: str) -> None:
    """The options `predict` and `recommend` share, as in the reference's CLI."""
    command.add_argument("-c", "--config", required=True, help=f"YAML config (the reference's {schema} schema)")
    command.add_argument("--set", dest="overrides", action="append", default=[], metavar="PATH=YAML_VALUE",
                         help="override a config value before validation (repeatable)")
    command.add_argument("--allow-duplicate-keys", action="store_true",
                         help="accept YAML mappings that repeat a key, the last value winning (as the "
                              "reference does); by default a repeated key is an error")
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
                         help="add per-request records to prediction.json and write requests.jsonl "
                              "and workers.json")
    predict.add_argument("--stdout-per-request", action="store_true",
                         help="with --format json and --capture-per-request, also print the per-request "
                              "records in the stdout line (as the reference does)")
    predict.add_argument("--per-request-format", choices=("jsonl", "parquet"), default="jsonl",
                         help="file format of the per-request records: requests.jsonl (default) or "
                              "requests.parquet (needs pyarrow: servesim[parquet])")
    predict.add_argument("--report", action="store_true",
                         help="also write report.html: a self-contained page of charts (needs plotly: "
                              "servesim[report])")
    predict.add_argument("--unservable", choices=("reject", "fail"), default="reject",
                         help="a request that can never fit the KV pool is rejected with a reason "
                              "(default), or — as in the reference — stops the run where the reference "
                              "stops or stalls; under 'fail' a run where no request completed is an "
                              "error too")
    data = sub.add_parser("data", help="the reference's AIConfigurator database in servesim's cache")
    data_sub = data.add_subparsers(dest="data_command", required=True)
    fetch = data_sub.add_parser("fetch", help="fetch (or unpack) it ahead of time; prints where it is")
    fetch.add_argument("--gpu", action="append", default=[], metavar="NAME",
                       help="only this GPU's data (repeatable; default: every GPU)")
    fetch.add_argument("--from", dest="source", metavar="WHEEL_OR_URL",
                       help="a downloaded aisimulate-0.1.0.dev2 wheel, or a mirror's URL of it")
    compare = sub.add_parser("compare", help="compare runs (servesim outputs or measured benchmarks) in one HTML page")
    compare.add_argument("runs", nargs="+", metavar="RUN",
                         help="a servesim --output-dir, or a measured run: per-request JSONL with send/first-token/"
                              "end times, an AIPerf profile_export.jsonl, or a vLLM benchmark result JSON")
    compare.add_argument("-o", "--output", default="compare.html", help="the HTML file to write (default: compare.html)")
    compare.add_argument("--label", action="append", default=[], help="name of each run, in order (repeatable)")
    for target in ("ttft", "itl", "e2e"):
        compare.add_argument(f"--sla-{target}-ms", type=float, default=None,
                             help=f"mark this {target.upper()} target on the distributions")
    from servesim.search.cli import add_parser

    add_parser(sub)
    from servesim.fidelity.commands import register

    register(sub)
    return parser


def _config_error(config: str, exc: ConfigError) -> int:
    message = str(exc)
    if not message.startswith(f"{config}:"):  # errors read from the file name it already
        message = f"{config}: {message}"
    print(f"servesim: error: {message}", file=sys.stderr)
    return exc.exit_code


def _compare(args: argparse.Namespace) -> int:
    from servesim.report.html.compare import write_compare
    from servesim.report.summary import Sla

    sla = Sla(args.sla_ttft_ms, args.sla_itl_ms, args.sla_e2e_ms)
    try:
        write_compare(args.runs, Path(args.output), args.label,
                      sla if any(v is not None for v in (sla.ttft_ms, sla.itl_ms, sla.e2e_ms)) else None)
    except (ConfigError, ImportError, OSError) as exc:
        print(f"servesim compare: error: {exc}", file=sys.stderr)
        return 2
    except RunError as exc:  # a measurement file (the message names the file and line)
        print(f"servesim compare: error: {exc}", file=sys.stderr)
        return 1
    print(f"Saved comparison to: {args.output}")
    return 0


def _prepare_output_dir(path: Path, overwrite: bool) -> None:
    """Create the output directory (or check the one there) and, with `overwrite`, clear
    servesim's outputs from it at once (`recommend`, whose ledger grows during the search;
    `predict` replaces its results only once the new ones are complete, `servesim.outputs`)."""
    prepare_folder(path, overwrite)
    if overwrite:
        clear_outputs(path)


def _check_extras(args: argparse.Namespace) -> None:
    """Fail before the run, not after it, when an output needs a package that is missing."""
    import importlib.util

    for wanted, module, extra in ((args.report, "plotly", "report"),
                                  (args.per_request_format == "parquet", "pyarrow", "parquet")):
        if wanted and importlib.util.find_spec(module) is None:
            raise ConfigError(f"this output needs {module}: pip install 'servesim[{extra}]'")


def _predict(args: argparse.Namespace) -> int:
    from servesim.api import simulate
    from servesim.config import load_config
    from servesim.config.load import STACKS

    if args.stack not in (None, *STACKS):
        print(f"servesim: error: stack {args.stack!r} is unavailable; installed stacks: {', '.join(STACKS)}",
              file=sys.stderr)
        return 2
    out_dir = Path(args.output_dir)
    try:
        config = load_config(args.config, args.overrides, stack=args.stack,
                             allow_duplicate_keys=args.allow_duplicate_keys)
        _check_extras(args)
        prepare_folder(out_dir, args.overwrite)
    except ConfigError as exc:
        return _config_error(args.config, exc)
    try:
        report = simulate(config, capture_per_request=args.capture_per_request,
                          progress=sys.stderr.isatty(), unservable=args.unservable, timeseries=args.report)
        _check_outcome(report, args)
        _write_outputs(out_dir, report, args)
    except ConfigError as exc:  # found while building (an unknown backend_version)
        return _config_error(args.config, exc)
    except RunError as exc:
        print(f"servesim predict failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return exc.exit_code
    _warn_unreleased(report, out_dir)
    return _print_report(report, args, out_dir / "prediction.json")


def _check_outcome(report: Report, args: argparse.Namespace) -> None:
    """Warn when nothing completed (an error under --unservable fail); per-request capture needs
    at least one finished request (as in the reference)."""
    summary = report.summary
    if not summary["completed_requests"]:
        counts = ", ".join(f"{summary[key]} {key.removesuffix('_requests')}"
                           for key in ("rejected_requests", "incomplete_requests") if key in summary)
        first = f"; the first rejected because {report.first_rejection}" if report.first_rejection else ""
        detail = f" ({counts}{first})" if counts else ""
        if args.unservable == "fail":
            raise RunError(f"no request completed{detail}")
        print(f"servesim: warning: no request completed{detail}", file=sys.stderr)
    if args.capture_per_request and not report.per_request:
        raise RunError("no request reached a terminal state, so there are no per-request records")


def _write_outputs(out_dir: Path, report: Report, args: argparse.Namespace) -> None:
    """prediction.json, with capture the per-request records and workers.json, unreleased.json and
    report.html when there are any — replacing the previous set only once all of them are
    written."""
    from servesim.report.render import records_jsonl, report_json

    extensions = report.extensions or {}
    with OutputSet(out_dir) as outputs:
        outputs.stage("prediction.json", report_json(report.to_dict()))
        if args.capture_per_request:
            if args.per_request_format == "parquet":
                from servesim.report.tables import write_parquet

                outputs.stage_file("requests.parquet", lambda path: write_parquet(report.per_request or [], path))
            else:
                outputs.stage("requests.jsonl", records_jsonl(report.per_request or []))
            if "workers" in extensions:
                outputs.stage("workers.json", report_json({"workers": extensions["workers"]}))
        if _unreleased_warning(report) is not None:
            outputs.stage("unreleased.json", report_json({"unreleased": extensions["unreleased"]}))
        if args.report:
            title = f"servesim prediction: {Path(args.config).name}"
            outputs.stage_file("report.html", lambda path: report.write_html(path, title=title))
        outputs.commit()


def _unreleased_warning(report: Report) -> str | None:
    """The warning of an agentic run that left requests unreleased (None: it left none)."""
    from servesim.report.trajectories import unreleased_warning

    unreleased = (report.extensions or {}).get("unreleased")
    return unreleased_warning(unreleased) if unreleased is not None else None


def _warn_unreleased(report: Report, out_dir: Path) -> None:
    warning = _unreleased_warning(report)
    if warning is not None:
        print(f"servesim: warning: {warning}; see {out_dir / 'unreleased.json'}", file=sys.stderr)


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


class _Terminated(KeyboardInterrupt):
    """SIGTERM, handled like Ctrl-C."""


def _on_sigterm(signum: int, frame: object) -> None:
    raise _Terminated()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `servesim` command.

    SIGINT and SIGTERM stop a run cleanly (exit 130 / 143): the output folder keeps either its
    previous results or the complete new ones.
    """
    args = _parser().parse_args(argv)
    in_main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _on_sigterm) if in_main_thread else None
    try:
        if hasattr(args, "run_command"):
            return args.run_command(args)
        if args.command == "recommend":
            from servesim.search.cli import main as recommend

            return recommend(args)
        if args.command == "data":
            return _data_fetch(args)
        if args.command == "compare":
            return _compare(args)
        return _predict(args)
    except KeyboardInterrupt as exc:
        print("servesim: interrupted", file=sys.stderr)
        return 128 + (signal.SIGTERM if isinstance(exc, _Terminated) else signal.SIGINT)
    except MemoryError:
        print("servesim: out of memory", file=sys.stderr)
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
