"""What a finished run leaves behind: its output files and the table or JSON line on stdout, for
every command that records a run (`predict`, `serve`)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from servesim.cli.common import write_stdout

if TYPE_CHECKING:
    from servesim.api import Report
    from servesim.outputs import OutputSet


@dataclass(frozen=True)
class RunOutputs:
    """Which outputs a run writes and how its stdout reads."""

    command: str
    config: str
    capture_per_request: bool = False
    per_request_format: Literal["jsonl", "parquet"] = "jsonl"
    report_html: bool = False
    format: str = "table"
    stdout_per_request: bool = False
    reference_fields: bool = False

    @classmethod
    def of_predict(cls, args: argparse.Namespace) -> RunOutputs:
        """The outputs `predict`'s options ask for."""
        return cls(command="predict", config=args.config, capture_per_request=args.capture_per_request,
                   per_request_format=args.per_request_format, report_html=args.report, format=args.format,
                   stdout_per_request=args.stdout_per_request, reference_fields=args.reference_fields)


def _document(report: Report, options: RunOutputs, data: dict[str, Any]) -> dict[str, Any]:
    """`data` with the run's provenance block (none under compat: reference, whose fields only)."""
    if report.provenance and not options.reference_fields:
        data["provenance"] = report.provenance
    return data


def write_outputs(outputs: OutputSet, report: Report, options: RunOutputs) -> None:
    """prediction.json, with capture the per-request records and workers.json, unreleased.json and
    report.html when there are any — replacing the previous set only once all of them are
    written."""
    from servesim.report.render import report_json, write_records_jsonl, write_report_json

    extensions = report.extensions or {}
    spool = report.spool
    document = _document(report, options, report.to_dict())
    if spool is not None:
        outputs.stage_file("prediction.json", lambda path: spool.write_report_json(document, path))
    else:
        outputs.stage_file("prediction.json", lambda path: write_report_json(document, path))
    if options.capture_per_request:
        if options.per_request_format == "parquet":
            from servesim.report.tables import write_parquet

            outputs.stage_file("requests.parquet", lambda path: write_parquet(report.per_request or [], path))
        elif spool is not None:
            outputs.stage_file("requests.jsonl", spool.write_jsonl)
        else:
            outputs.stage_file("requests.jsonl", lambda path: write_records_jsonl(report.per_request or [], path))
        if "workers" in extensions:
            outputs.stage("workers.json", report_json({"workers": extensions["workers"]}))
    if unreleased_warning(report) is not None:
        outputs.stage("unreleased.json", report_json({"unreleased": extensions["unreleased"]}))
    if options.report_html:
        title = f"servesim prediction: {Path(options.config).name}"
        outputs.stage_file("report.html", lambda path: report.write_html(path, title=title))
    outputs.commit()


def unreleased_warning(report: Report) -> str | None:
    """The warning of an agentic run that left requests unreleased (None: it left none)."""
    from servesim.report.trajectories import unreleased_warning as warning_of

    unreleased = (report.extensions or {}).get("unreleased")
    return warning_of(unreleased) if unreleased is not None else None


def _headline(report: Report, options: RunOutputs) -> list[str]:
    """The table's headline: what was simulated (none under `--compat reference`)."""
    if options.reference_fields:
        return []
    from servesim.build.resolve import header_line
    from servesim.report.headline import headline_lines

    lines = headline_lines(report.deployment, report.summary)
    return [*lines, header_line(report.provenance).rstrip()] if report.provenance else lines


def print_report(report: Report, options: RunOutputs, prediction: Path) -> int:
    """The table or the JSON line on stdout; 1 when stdout cannot take it."""
    from servesim.report.render import render_table, report_line

    data = _document(report, options, report.to_dict() if options.stdout_per_request else dict(report.summary))
    if options.format == "json":
        text = report_line(data)
    else:
        text = render_table(data, str(prediction), _headline(report, options))
    return write_stdout(options.command, text)
