"""Tests for servesim.report.render (runtime.md §8.6 console table and the JSON writers).

Fixtures in tests/data/report/ are reference outputs (AISimulate 0.1.0.dev2) of the replay cases
01, 03, 10 and 12: the console output (`stdout.txt`, where `<output-dir>` stands for the output
directory), the summary fields of the report (per_request removed) and, for case 03, the complete
`prediction.json` and `requests.jsonl` as the reference wrote them.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np
import pytest

from servesim.report.render import (
    format_cell,
    records_jsonl,
    render_table,
    report_json,
    report_line,
    write_records_jsonl,
    write_report_json,
)

DATA = Path(__file__).parent.parent / "data" / "report"
SAVED = "<output-dir>/prediction.json"


def load_summary(case: str) -> dict:
    """The summary fields of a replay case (the full report for case 03)."""
    path = DATA / f"replay{case}-summary.json"
    if not path.exists():
        path = DATA / f"replay{case}-report.json"
    return json.loads(path.read_text(encoding="utf-8"))


def table_lines(report: dict) -> list[str]:
    """The rendered stdout split into lines (the last element is the empty tail)."""
    return render_table(report, SAVED).split("\n")


@pytest.mark.parametrize("case", ["01", "03", "10", "12"])
def test_table_matches_reference_stdout(case: str) -> None:
    expected = (DATA / f"replay{case}-stdout.txt").read_text(encoding="utf-8")
    assert render_table(load_summary(case), SAVED) == expected


def test_wall_time_uses_thousands_separator() -> None:
    report = {**load_summary("01"), "wall_time_ms": 1365.3612}
    assert "Wall Time (ms): 1,365.36" in table_lines(report)


@pytest.mark.parametrize(
    ("value", "text"),
    [(None, "N/A"), (5, "5.00"), (0.0, "0.00"), (1234567.891, "1,234,567.89"), (0.005, "0.01"),
     (np.float64(2.5), "2.50"), (np.int64(7), "7.00"), ("text", "text")],
)
def test_format_cell(value: object, text: str) -> None:
    assert format_cell(value) == text


def test_stat_row_needs_its_mean_key() -> None:
    report = load_summary("01")
    del report["mean_output_token_throughput_per_user"]
    lines = table_lines(report)
    assert not any("Per User" in line for line in lines)
    # The Metric column shrinks to the longest remaining label.
    label = "Output Token Throughput (tokens/sec)"
    assert f"┃ {label} ┃" in "\n".join(lines)
    assert lines[1] == "┏" + "━" * (len(label) + 2) + "┳" + lines[1].split("┳", 1)[1]


def test_missing_statistics_show_na_and_widen_nothing() -> None:
    report = load_summary("01")
    del report["p99_ttft_ms"]
    row = next(line for line in table_lines(report) if line.startswith("┃ Time to First Token"))
    assert row.split("┃")[5] == "    N/A "


def test_request_count_falls_back_to_num_requests() -> None:
    report = load_summary("01")
    del report["completed_requests"]
    row = next(line for line in table_lines(report) if "Request Count" in line)
    assert "┃   5.00 ┃" in row  # num_requests = 5


def test_footer_lines_only_for_numbers() -> None:
    report = load_summary("12")
    del report["wall_time_ms"]
    report["prefix_cache_reused_ratio"] = None
    lines = table_lines(report)
    assert lines[-4:] == [
        "└" + lines[-4][1:],
        "First Admission Prefix Cache Reused Ratio: 0.00",
        f"Saved full report to: {SAVED}",
        "",
    ]


def test_wide_values_widen_their_column() -> None:
    report = {**load_summary("01"), "max_ttft_ms": 1234567.0}
    lines = table_lines(report)
    header = lines[2]
    assert header.split("┃")[4] == "          max "
    assert "┃ 1,234,567.00 ┃" in lines[4]
    assert len({len(line) for line in lines[1:13]}) == 1  # every table line has the same width


def test_prediction_json_is_byte_identical() -> None:
    text = (DATA / "replay03-report.json").read_text(encoding="utf-8")
    assert report_json(json.loads(text)) == text


def test_requests_jsonl_is_byte_identical() -> None:
    text = (DATA / "replay03-requests.jsonl").read_text(encoding="utf-8")
    records = json.loads((DATA / "replay03-report.json").read_text(encoding="utf-8"))["per_request"]
    assert records_jsonl(records) == text
    assert records_jsonl(json.loads(line) for line in text.splitlines()) == text
    assert records_jsonl([]) == ""


def test_streamed_files_equal_the_texts(tmp_path: Path) -> None:
    """The file writers give the same bytes as the string renderings, numpy values included."""
    report = json.loads((DATA / "replay03-report.json").read_text(encoding="utf-8"))
    report["extra"] = {"n": np.int64(7), "x": np.float64(0.1), "v": np.array([1.5, 2.0])}
    write_report_json(report, tmp_path / "prediction.json")
    assert (tmp_path / "prediction.json").read_bytes() == report_json(report).encode()
    write_records_jsonl(iter(report["per_request"]), tmp_path / "requests.jsonl")
    assert (tmp_path / "requests.jsonl").read_text(encoding="utf-8") == records_jsonl(report["per_request"])
    write_records_jsonl([], tmp_path / "empty.jsonl")
    assert (tmp_path / "empty.jsonl").read_bytes() == b""


def test_float_reprs_match_the_reference() -> None:
    text = report_json(load_summary("01"))
    assert '"gpu_hours": 2.1666666666666674e-05,' in text
    assert '"decode_worker_seconds": 0.07800000000000003,' in text
    assert '"completed_requests": 5,' in text and '"duration_ms": 78.0,' in text


def test_report_line_is_compact_sorted_json() -> None:
    summary = load_summary("10")
    line = report_line(summary)
    assert line.endswith("\n") and line.count("\n") == 1
    assert line.startswith('{"completed_requests":6,"decode_gpus_per_worker":1,')
    assert ", " not in line and ": " not in line
    assert json.loads(line) == summary


def test_numpy_scalars_serialise_as_plain_numbers() -> None:
    report = {"b": np.int64(3), "a": np.float64(0.1), "c": np.bool_(True)}
    assert report_line(report) == '{"a":0.1,"b":3,"c":true}\n'


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, np.float64("nan")])
def test_json_writers_refuse_non_finite(bad: float) -> None:
    with pytest.raises(ValueError):
        report_json({"x": bad})
    with pytest.raises(ValueError):
        report_line({"x": bad})
    with pytest.raises(ValueError):
        records_jsonl([{"x": [bad]}])
    with pytest.raises(ValueError):
        write_report_json({"x": bad}, Path(os.devnull))
    with pytest.raises(ValueError):
        write_records_jsonl([{"x": [bad]}], Path(os.devnull))
