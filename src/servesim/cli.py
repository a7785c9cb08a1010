"""`servesim predict`: parse options, load the config, simulate, write the outputs;
`servesim data fetch`: fill the cache with the reference's AIConfigurator database;
`servesim compare`: runs side by side in one HTML page. (`servesim recommend` is registered by
`servesim.search.cli`, `servesim validate` and `servesim calibrate` by `servesim.fidelity.commands`.)

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
_KNOWN_OUTPUTS = ("prediction.json", "requests.jsonl", "requests.parquet", "workers.json", "unreleased.json",
                  "report.html", "recommendation.json", "recommendation.csv", "pareto.csv")
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
    predict.add_argument("--per-request-format", choices=("jsonl", "parquet"), default="jsonl",
                         help="file format of the per-request records: requests.jsonl (default) or "
                              "requests.parquet (needs pyarrow: servesim[parquet])")
    predict.add_argument("--report", action="store_true",
                         help="also write report.html: a self-contained page of charts (needs plotly: "
                              "servesim[report])")
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
    from servesim.report.render import records_jsonl, render_table, report_json, report_line

    if args.stack not in (None, *STACKS):
        print(f"servesim: error: stack {args.stack!r} is unavailable; installed stacks: {', '.join(STACKS)}",
              file=sys.stderr)
        return 2
    try:
        config = load_config(args.config, args.overrides, stack=args.stack)
        _check_extras(args)
        out_dir = Path(args.output_dir)
        _prepare_output_dir(out_dir, args.overwrite)
    except ConfigError as exc:
        return _config_error(args.config, exc)
    try:
        report = simulate(config, capture_per_request=args.capture_per_request,
                          progress=sys.stderr.isatty(), unservable=args.unservable, timeseries=args.report)
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
        if args.per_request_format == "parquet":
            from servesim.report.tables import write_parquet

            write_parquet(report.per_request, out_dir / "requests.parquet")
        else:
            (out_dir / "requests.jsonl").write_text(records_jsonl(report.per_request))
    if args.report:
        report.write_html(out_dir / "report.html", title=f"servesim prediction: {Path(args.config).name}")
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
