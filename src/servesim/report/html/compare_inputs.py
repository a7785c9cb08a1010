"""A servesim output folder read for `servesim compare`: its summary and its per-request
latencies, streamed and checked.

``prediction.json`` is read a line at a time; its `per_request` array (present with
``--capture-per-request``) is skipped while the summary is parsed, so the summary never holds
the records. The latencies come from ``requests.parquet`` (a batch of rows at a time),
``requests.jsonl`` (a chunk of lines at a time) or, without either, the `per_request` array's
elements one by one, into arrays of floats: memory grows by ~40 bytes per request, not by a
parsed record. Every problem is a `TraceError` naming ``FILE:LINE`` (or the row) and the rule.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO, Any

import numpy as np

from servesim import safejson
from servesim.errors import TraceError
from servesim.report.latency import LatencySamples

SUMMARY_KEYS = ("num_requests", "completed_requests", "request_throughput_rps", "output_throughput_tok_s")
"""What a comparison needs of every servesim summary."""
MAX_LINE_BYTES = 64 << 20
_ARRAY_START = b'  "per_request": ['
_ELEMENT_ENDS = (b"    }", b"    },", b"    {}", b"    {},")
_COLUMNS = ("arrival_time_ms", "terminal_status", "ttft_ms", "terminal_time_ms", "e2e_latency_ms", "itl_ms")


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _lines(path: Path, handle: IO[bytes]) -> Iterator[tuple[int, bytes]]:
    """(line number, raw line) of a file, each line at most `MAX_LINE_BYTES`."""
    number = 0
    while True:
        line = handle.readline(MAX_LINE_BYTES + 1)
        if not line:
            return
        number += 1
        if len(line) > MAX_LINE_BYTES:
            raise TraceError(str(path), number, f"line longer than {MAX_LINE_BYTES >> 20} MiB")
        yield number, line


def _text(path: Path, number: int, line: bytes) -> str:
    try:
        return line.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TraceError(str(path), number, f"not UTF-8 text ({exc.reason} at byte {exc.start} of the line)") from None


def read_summary(path: Path) -> tuple[dict[str, Any], bool]:
    """The summary of ``prediction.json`` without its `per_request` records, and whether it has
    them; the summary's figures checked (`SUMMARY_KEYS`: finite numbers)."""
    kept: list[str] = []
    skipping, has_records = False, False
    try:
        with path.open("rb") as handle:
            for number, line in _lines(path, handle):
                if skipping:
                    if line.rstrip(b"\n") in (b"  ]", b"  ],"):
                        kept.append("null," if line.rstrip(b"\n").endswith(b",") else "null")
                        kept.append("\n")
                        skipping = False
                    continue
                if line.startswith(_ARRAY_START) and line.rstrip(b"\n") == _ARRAY_START:
                    kept.append('  "per_request": ')
                    skipping = has_records = True
                    continue
                kept.append(_text(path, number, line))
    except OSError as exc:
        raise TraceError(str(path), None, f"cannot read: {exc.strerror or exc}") from None
    if skipping:
        raise TraceError(str(path), None, "truncated: the per_request array never ends")
    try:
        summary = safejson.loads("".join(kept))
    except safejson.JsonRefused as exc:
        raise TraceError(str(path), exc.line, exc.message) from None
    if not isinstance(summary, dict):
        raise TraceError(str(path), None, f"not a servesim prediction: a JSON {type(summary).__name__}, not an object")
    has_records = has_records or isinstance(summary.get("per_request"), list)
    for key in SUMMARY_KEYS:
        if safejson.finite_number(summary.get(key)) is None:
            raise TraceError(str(path), None, f"{key}: must be a finite number (got {_show(summary.get(key))}); "
                                              "not a servesim prediction.json?")
    return summary, has_records


def summary_number(path: Path, summary: Mapping[str, Any], key: str) -> float:
    """A summary figure as a float (NaN for null: a statistic with no samples)."""
    if key not in summary:
        raise TraceError(str(path), None, f"no {key!r}: not a complete servesim prediction.json")
    value = summary[key]
    if value is None:
        return float("nan")
    number = safejson.finite_number(value)
    if number is None:
        raise TraceError(str(path), None, f"{key}: must be a finite number or null (got {_show(value)})")
    return number


class _Samples:
    """Per-request latencies gathered into arrays of floats, each row checked."""

    def __init__(self) -> None:
        self.arrival, self.completion, self.ttft = array("d"), array("d"), array("d")
        self.e2e, self.tpot = array("d"), array("d")

    def add(self, path: Path, where: int | None, row: Any) -> None:
        if not isinstance(row, Mapping):
            raise TraceError(str(path), where, "each per-request record must be a JSON object")
        self.arrival.append(self._number(path, where, row, "arrival_time_ms"))
        status = row.get("terminal_status")
        if not isinstance(status, str):
            raise TraceError(str(path), where, f"terminal_status: must be a string (got {_show(status)})")
        if status != "completed" or row.get("ttft_ms") is None:
            return
        self.completion.append(self._number(path, where, row, "terminal_time_ms"))
        self.ttft.append(self._number(path, where, row, "ttft_ms"))
        self.e2e.append(self._number(path, where, row, "e2e_latency_ms"))
        if row.get("itl_ms") is not None:
            self.tpot.append(self._number(path, where, row, "itl_ms"))

    @staticmethod
    def _number(path: Path, where: int | None, row: Mapping[str, Any], key: str) -> float:
        number = safejson.finite_number(row.get(key))
        if number is None:
            raise TraceError(str(path), where, f"{key}: must be a finite number (got {_show(row.get(key))})")
        return number

    def latency(self) -> LatencySamples:
        tpot = np.frombuffer(self.tpot, float) if len(self.tpot) else np.zeros(0)
        return LatencySamples(_floats(self.ttft), tpot, _floats(self.e2e), tpot.copy(), None,
                              _floats(self.arrival), _floats(self.completion), itl_per_request=True)


def _floats(values: array) -> np.ndarray:
    return np.array(values, float)


def read_latency(folder: Path, has_records: bool) -> LatencySamples | None:
    """The per-request latencies of a servesim output folder; None when it captured none."""
    samples = _Samples()
    if (folder / "requests.parquet").is_file():
        _read_parquet(folder / "requests.parquet", samples)
    elif (folder / "requests.jsonl").is_file():
        from servesim.traffic.jsonl import read_jsonl

        for number, row in read_jsonl(str(folder / "requests.jsonl")):
            samples.add(folder / "requests.jsonl", number, row)
    elif has_records:
        for number, row in _prediction_records(folder / "prediction.json"):
            samples.add(folder / "prediction.json", number, row)
    else:
        return None
    return samples.latency() if len(samples.arrival) else None


def _read_parquet(path: Path, samples: _Samples) -> None:
    from servesim.report.tables import _require

    pq = _require("pyarrow.parquet", "parquet")
    try:
        source = pq.ParquetFile(path)
        names = set(source.schema_arrow.names)
        missing = [c for c in _COLUMNS if c not in names and c != "itl_ms"]
        if missing:
            raise TraceError(str(path), None, f"no column {missing[0]!r}: not servesim's per-request records")
        columns = [c for c in _COLUMNS if c in names]
        row_number = 0
        for batch in source.iter_batches(batch_size=65_536, columns=columns):
            for row in batch.to_pylist():
                row_number += 1
                samples.add(Path(f"{path} row {row_number}"), None, row)
    except TraceError:
        raise
    except (OSError, ValueError, TypeError, KeyError) as exc:  # pyarrow's ArrowInvalid is a ValueError
        raise TraceError(str(path), None, f"not a readable Parquet file ({type(exc).__name__}: {exc})") from None


def _prediction_records(path: Path) -> Iterator[tuple[int, Any]]:
    """(first line, record) of each element of ``prediction.json``'s `per_request` array; a
    file not laid out as servesim writes it is parsed whole."""
    inside, start = False, 0
    element: list[str] = []
    try:
        with path.open("rb") as handle:
            for number, line in _lines(path, handle):
                if not inside:
                    inside = line.rstrip(b"\n") == _ARRAY_START
                    continue
                if line.rstrip(b"\n") in (b"  ]", b"  ],"):
                    return
                if not element:
                    start = number
                element.append(_text(path, number, line))
                if line.rstrip(b"\n") in _ELEMENT_ENDS:
                    text = "".join(element).rstrip().rstrip(",")
                    element = []
                    try:
                        yield start, safejson.loads(text, first_line=start)
                    except safejson.JsonRefused as exc:
                        raise TraceError(str(path), exc.line, exc.message) from None
    except OSError as exc:
        raise TraceError(str(path), None, f"cannot read: {exc.strerror or exc}") from None
    if not inside:  # not servesim's layout (one line, another indent): the records as parsed whole
        try:
            records = safejson.read_json(path).get("per_request") or []
        except (OSError, safejson.JsonRefused) as exc:
            raise TraceError(str(path), None, f"cannot read: {exc}") from None
        yield from ((1, record) for record in records)
    else:
        raise TraceError(str(path), None, "truncated: the per_request array never ends")
