"""`servesim predict`: load the config, simulate, write the outputs, print the table or JSON."""

from __future__ import annotations

import argparse
import sys
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any

from servesim.cli.common import add_common_arguments, compat_overrides, config_error, start_up
from servesim.cli.outputs import RunOutputs, print_report, unreleased_warning, write_outputs
from servesim.errors import ConfigError, RunError
from servesim.outputs import OutputSet, prepare_folder

if TYPE_CHECKING:
    from servesim.api import Report
    from servesim.report.spool import RecordSpool


def register(sub: Any) -> None:
    """Add `predict` to the `servesim` command."""
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
    predict.add_argument("--unservable", choices=("reject", "fail"), default=None,
                         help="a request that can never fit the KV pool is rejected with a reason "
                              "(the default), or — as in the reference, and under --compat reference — "
                              "stops the run where the reference stops or stalls; under 'fail' a run "
                              "where no request completed is an error too")
    predict.add_argument("--reference-fields", action="store_true",
                         help="write prediction.json and the per-request records with exactly the reference's "
                              "fields (without servesim's additions: rejected_requests, incomplete_requests, "
                              "timed_out_requests, sla, rejection_reason)")
    predict.set_defaults(run_command=_predict)


def _resolve_compat(args: argparse.Namespace, compat: str | None) -> None:
    """Settle the switches `compat: reference` implies: the reference's fields and its handling of
    unservable requests (an explicit `--unservable` still wins)."""
    reference = compat == "reference"
    args.compat = compat
    args.reference_fields = args.reference_fields or reference
    if args.unservable is None:
        args.unservable = "fail" if reference else "reject"


def _check_extras(args: argparse.Namespace) -> None:
    """Fail before the run, not after it, when an output needs a package that is missing."""
    import importlib.util

    for wanted, module, extra in ((args.report, "plotly", "report"),
                                  (args.per_request_format == "parquet", "pyarrow", "parquet")):
        if wanted and importlib.util.find_spec(module) is None:
            raise ConfigError(f"this output needs {module}: pip install 'servesim[{extra}]'")


def _predict(args: argparse.Namespace) -> int:
    with start_up():
        from servesim.api import simulate
        from servesim.config import load_config
        from servesim.config.load import STACKS

        if args.stack not in (None, *STACKS):
            print(f"servesim: error: stack {args.stack!r} is unavailable; installed stacks: {', '.join(STACKS)}",
                  file=sys.stderr)
            return 2
        out_dir = Path(args.output_dir)
        try:
            config = load_config(args.config, compat_overrides(args), stack=args.stack,
                                 allow_duplicate_keys=args.allow_duplicate_keys)
            _resolve_compat(args, config.compat)
            _check_extras(args)
            prepare_folder(out_dir, args.overwrite)
        except ConfigError as exc:
            return config_error(args.config, exc)
    try:
        with OutputSet(out_dir) as outputs, _spool(outputs, args) as spool:
            report = simulate(config, capture_per_request=args.capture_per_request,
                              progress=sys.stderr.isatty(), unservable=args.unservable, timeseries=args.report,
                              spool=spool)
            failure = _preparation_failure(report)
            if failure is not None:  # 0.13 saves the report, then fails the run
                write_outputs(outputs, report, RunOutputs.of_predict(args))
                raise RunError(f"{failure}; the report is saved in {out_dir / 'prediction.json'}")
            _check_outcome(report, args)
            if args.reference_fields:
                report = report.reference_fields_only()
            write_outputs(outputs, report, RunOutputs.of_predict(args))
    except ConfigError as exc:  # found while building (an unknown backend_version)
        return config_error(args.config, exc)
    except RunError as exc:
        print(f"servesim predict failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return exc.exit_code
    _warn_unreleased(report, out_dir)
    return print_report(report, RunOutputs.of_predict(args), out_dir / "prediction.json")


def _preparation_failure(report: Report) -> str | None:
    """Why an agentic warm-up was aborted (a preparation request did not complete), or None."""
    phases = report.summary.get("agentic_phases")
    if not isinstance(phases, dict) or phases.get("phase") != "aborted":
        return None
    request = next((r for r in phases["requests"] if r["uuid"] == phases["failure_request_id"]), None)
    which = f" (request {request['identity']['request_id']}, {request['input_length']} prompt tokens)" if request else ""
    return f"agentic preparation aborted: {phases['failure_reason']}{which}, so the measured replay did not run"


def _check_outcome(report: Report, args: argparse.Namespace) -> None:
    """Warn when nothing completed (an error under --unservable fail); per-request capture needs
    at least one finished request (as in the reference)."""
    summary = report.summary
    if not summary["completed_requests"]:
        counts = ", ".join(f"{summary[key]} {key.removesuffix('_requests')}"
                           for key in ("rejected_requests", "incomplete_requests") if key in summary)
        first = f"; the first rejected because {report.first_rejection}" if report.first_rejection else ""
        detail = f" ({counts}{first})" if counts else ""
        # the reference fails such a run only for requests the pool can never serve; requests over
        # the context length, or a run cut by its time cap, it reports (exit 0)
        if args.unservable == "fail" and report.rejected > report.context_rejected:
            raise RunError(f"no request completed{detail}")
        print(f"servesim: warning: no request completed{detail}", file=sys.stderr)
    if args.capture_per_request and not (report.per_request or report.spool):
        raise RunError("no request reached a terminal state, so there are no per-request records")


def _spool(outputs: OutputSet, args: argparse.Namespace) -> AbstractContextManager[RecordSpool | None]:
    """Where the per-request records go as requests end when they are only written to files:
    a spool in the output folder's scratch space (nothing to spool: None)."""
    if not args.capture_per_request or args.per_request_format != "jsonl" or args.stdout_per_request:
        return nullcontext()
    from servesim.report.spool import RecordSpool
    from servesim.report.summary import SERVESIM_RECORD_FIELDS

    return RecordSpool(outputs.scratch(), drop=SERVESIM_RECORD_FIELDS if args.reference_fields else ())


def _warn_unreleased(report: Report, out_dir: Path) -> None:
    warning = unreleased_warning(report)
    if warning is not None:
        print(f"servesim: warning: {warning}; see {out_dir / 'unreleased.json'}", file=sys.stderr)
