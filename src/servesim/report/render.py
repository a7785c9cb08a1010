"""Text and JSON renderings of a report, byte-compatible with the reference (docs/metrics.md).

* ``render_table``  -- the AIPerf-style console table printed by ``--format table``.
* ``report_line``   -- the compact one-line JSON printed by ``--format json``.
* ``report_json``   -- the pretty JSON written to ``prediction.json`` (``write_report_json``
  streams it to a file).
* ``records_jsonl`` -- the per-request records written to ``requests.jsonl``
  (``write_records_jsonl`` streams them to a file, one line at a time).

The JSON writers refuse NaN and infinities (``ValueError``): the reference never emits them.
Floats are written with Python's shortest round-trip ``repr`` (``2.1666666666666674e-05``),
ints stay ints, so callers must keep int-valued fields (counts, token totals) as ``int``.
"""

from __future__ import annotations

import json
import math
import numbers
from json.encoder import encode_basestring_ascii as _encode_string
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

TITLE = "NVIDIA AIPerf | LLM Metrics"
HEADERS = ("Metric", "avg", "min", "max", "p99", "p90", "p75", "std")
# Summary-key prefixes feeding the stat columns avg..std, in column order.
STAT_PREFIXES = ("mean", "min", "max", "p99", "p90", "p75", "std")
# (row label, summary-key suffix) of the distribution rows, in table order.
STAT_ROWS = (
    ("Time to First Token (ms)", "ttft_ms"),
    ("Time to Second Token (ms)", "ttst_ms"),
    ("Request Latency (ms)", "e2e_latency_ms"),
    ("Inter Token Latency (ms)", "itl_ms"),
    ("Output Token Throughput Per User (tokens/sec/user)", "output_token_throughput_per_user"),
)
# (label, summary key) of the lines printed under the table when the value is a number.
FOOTER_LINES = (
    ("Wall Time (ms)", "wall_time_ms"),
    ("Prefix Cache Reused Ratio", "prefix_cache_reused_ratio"),
    ("First Admission Prefix Cache Reused Ratio", "first_admission_prefix_cache_reused_ratio"),
)
NOT_AVAILABLE = "N/A"


def format_cell(value: object) -> str:
    """A table cell: numbers as ``1,234.57``, missing (None) as ``N/A``, anything else via str."""
    if value is None:
        return NOT_AVAILABLE
    if isinstance(value, numbers.Real):
        return f"{float(value):,.2f}"
    return str(value)


def _stat_rows(report: Mapping[str, Any]) -> list[list[str]]:
    """One row per distribution whose ``mean_*`` key is present."""
    return [
        [label, *(format_cell(report.get(f"{prefix}_{suffix}")) for prefix in STAT_PREFIXES)]
        for label, suffix in STAT_ROWS
        if f"mean_{suffix}" in report
    ]


def _single_value_rows(report: Mapping[str, Any]) -> list[list[str]]:
    """The three rows that only fill the avg column (the others show N/A)."""
    count = report.get("completed_requests", report.get("num_requests"))
    rows = (
        ("Output Token Throughput (tokens/sec)", report.get("output_throughput_tok_s")),
        ("Request Throughput (requests/sec)", report.get("request_throughput_rps")),
        ("Request Count (requests)", count),
    )
    padding = [NOT_AVAILABLE] * (len(HEADERS) - 2)
    return [[label, format_cell(value), *padding] for label, value in (*rows, *_power_rows(report))]


def _power_rows(report: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Upstream 0.13's power rows and servesim's energy per token, when the report has them
    (servesim mode); a null value reads ``unavailable (why)`` as in 0.13. Without any power data
    (no coverage at all) only the power row says so."""
    if "power_coverage" not in report:
        return []
    from servesim.perf.energy import unavailable_reason

    why = f"unavailable ({unavailable_reason(report)})"
    coverage = report.get("power_coverage")
    cells: list[tuple[str, Any]] = [("Active Power per GPU (W) [power_w]", report.get("power_w"))]
    if coverage:
        cells += [("Power Data Coverage (%) [power_coverage]", 100.0 * coverage),
                  ("Energy per Output Token (J) [energy_per_output_token_j]", report.get("energy_per_output_token_j"))]
    return [(label, format_cell(value) if value is not None else why) for label, value in cells]


def _column_widths(rows: list[list[str]]) -> list[int]:
    """Each column's width: its longest header or cell text."""
    return [max(len(row[i]) for row in rows) for i in range(len(HEADERS))]


def _border(widths: list[int], left: str, middle: str, right: str) -> str:
    """A horizontal rule of heavy lines with the given junction characters."""
    return left + middle.join("━" * (width + 2) for width in widths) + right


def _row_line(row: list[str], widths: list[int]) -> str:
    """A table row: first column left-aligned, the others right-aligned, one space padding."""
    right = [cell.rjust(width) for cell, width in zip(row[1:], widths[1:], strict=True)]
    cells = [row[0].ljust(widths[0]), *right]
    return "┃" + "┃".join(f" {cell} " for cell in cells) + "┃"


def _table_lines(rows: list[list[str]]) -> list[str]:
    """The box-drawn table (header, heavy separators, body rows, bottom rule)."""
    widths = _column_widths([list(HEADERS), *rows])
    return [
        _border(widths, "┏", "┳", "┓"),
        _row_line(list(HEADERS), widths),
        _border(widths, "┡", "╇", "┩"),
        *(_row_line(row, widths) for row in rows),
        _border(widths, "└", "┴", "┘"),
    ]


def _footer_lines(report: Mapping[str, Any]) -> list[str]:
    """Wall time and prefix-cache ratios, each only when the report holds a number for it."""
    return [
        f"{label}: {format_cell(report[key])}"
        for label, key in FOOTER_LINES
        if isinstance(report.get(key), numbers.Real)
    ]


def render_table(report: Mapping[str, Any], saved_path: str, headline: Sequence[str] = ()) -> str:
    """The complete ``--format table`` stdout, ending with the saved-report line and a newline.

    servesim's additions (none in the reference's output): the `headline` lines first, and the
    SLA verdicts (`report/sla.py`) under the footer when the report has an ``sla`` block."""
    rows = _stat_rows(report) + _single_value_rows(report)
    saved = f"Saved full report to: {saved_path}"
    verdicts: list[str] = []
    if isinstance(report.get("sla"), Mapping):
        from servesim.report.sla import verdict_lines

        verdicts = verdict_lines(report["sla"])
    lines = [*headline, TITLE, *_table_lines(rows), *_footer_lines(report), *verdicts, saved]
    return "\n".join(lines) + "\n"


def _plain(value: object) -> object:
    """JSON fallback for numpy scalars and arrays (everything else is a TypeError)."""
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def report_json(report: Mapping[str, Any]) -> str:
    """The ``prediction.json`` text: 2-space indent, sorted keys, trailing newline."""
    return json.dumps(report, indent=2, sort_keys=True, allow_nan=False, default=_plain) + "\n"


def _compact(value: object) -> str:
    """One compact sorted-key JSON document (separators ``,`` and ``:``), no newline."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False, default=_plain)


def report_line(report: Mapping[str, Any]) -> str:
    """The complete ``--format json`` stdout: the report as one compact line plus a newline."""
    return _compact(report) + "\n"


def records_jsonl(records: Iterable[Mapping[str, Any]]) -> str:
    """The ``requests.jsonl`` text: one compact sorted-key object per line, each newline-ended."""
    return "".join(_compact(record) + "\n" for record in records)


_WRITE_BUFFER = 1 << 20
_ELEMENT_BREAK = "\n    "
"""Where an element of the top-level `per_request` array starts a line in ``prediction.json``."""
_MARKER = "\u0000per_request"
"""Stands for the `per_request` array while the rest of the report is rendered."""


def record_line(record: Mapping[str, Any]) -> str:
    """One record's ``requests.jsonl`` line, newline included."""
    return _compact(record) + "\n"


def per_request_element(record: Mapping[str, Any]) -> str:
    """One record of plain JSON values (as `json.loads` gives) as ``prediction.json`` writes it
    inside its `per_request` array (indented for that place, without the separator before it)."""
    out: list[str] = []
    _pretty(record, _ELEMENT_BREAK, out)
    return "".join(out)


def _pretty(value: Any, newline: str, out: list[str]) -> None:
    """Append `value` (plain JSON values only) as ``json.dumps(indent=2, sort_keys=True)`` renders
    it where `newline` starts a line at its depth: the same text, about three times faster than
    the standard library's pure-Python indenting encoder."""
    if isinstance(value, dict):
        if not value:
            out.append("{}")
            return
        inner = newline + "  "
        opening = "{" + inner
        for key in sorted(value):
            out += (opening, _encode_string(key), ": ")
            _pretty(value[key], inner, out)
            opening = "," + inner
        out.append(newline + "}")
    elif isinstance(value, list):
        if not value:
            out.append("[]")
            return
        inner = newline + "  "
        opening = "[" + inner
        for item in value:
            out.append(opening)
            _pretty(item, inner, out)
            opening = "," + inner
        out.append(newline + "]")
    else:
        out.append(_scalar(value))


def _scalar(value: Any) -> str:
    """A JSON string, number, boolean or null, as the standard library writes it."""
    if isinstance(value, str):
        return _encode_string(value)
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, float):
        if value != value or value in (math.inf, -math.inf):
            raise ValueError(f"Out of range float values are not JSON compliant: {value!r}")
        return float.__repr__(value)
    if isinstance(value, int):
        return int.__repr__(value)
    raise TypeError(f"Object of type {type(value).__name__} is not a plain JSON value")


def write_report_json(report: Mapping[str, Any], path: Path) -> None:
    """Write `report_json(report)` to `path` piece by piece (a report with a million
    per-request records never exists as one string)."""
    with open(path, "w", encoding="utf-8", buffering=_WRITE_BUFFER) as file:
        json.dump(report, file, indent=2, sort_keys=True, allow_nan=False, default=_plain)
        file.write("\n")


def write_report_json_with(report: Mapping[str, Any], elements: Iterable[bytes], path: Path) -> None:
    """Write `report_json` of `report` plus a `per_request` array whose elements are already
    rendered (`per_request_element`, UTF-8) to `path`: the same bytes as when the records are
    in the report."""
    head, tail = report_json({**report, "per_request": _MARKER}).split(json.dumps(_MARKER))
    with open(path, "wb", buffering=_WRITE_BUFFER) as file:
        file.write(head.encode())
        separator = b"[" + _ELEMENT_BREAK.encode()
        for element in elements:
            file.write(separator)
            file.write(element)
            separator = b"," + _ELEMENT_BREAK.encode()
        file.write(b"[]" if separator.startswith(b"[") else b"\n  ]")
        file.write(tail.encode())


def write_records_jsonl(records: Iterable[Mapping[str, Any]], path: Path) -> None:
    """Write `records_jsonl(records)` to `path` one record at a time."""
    with open(path, "w", encoding="utf-8", buffering=_WRITE_BUFFER) as file:
        write = file.write
        for record in records:
            write(_compact(record))
            write("\n")
