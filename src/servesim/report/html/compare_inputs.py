"""A servesim output folder read for `servesim compare`: its summary and its per-request
latencies, streamed and checked.

``prediction.json`` is read a block at a time; its `per_request` array (present with
``--capture-per-request``) is skipped while the summary is parsed (servesim writes it with
2-space indents: the array closes at the first line ``  ]``, its elements at lines ``    }``), so
the summary never holds the records. The latencies come from ``requests.parquet`` (a batch of rows at a time),
``requests.jsonl`` (a chunk of lines at a time) or, without either, the `per_request` array's
elements one by one, into arrays of floats: memory grows by ~40 bytes per request, not by a
parsed record. The records are parsed in `safejson`'s fast form (NaN and Infinity refused; the
numbers a comparison uses checked here). Every problem is a `TraceError` naming ``FILE:LINE`` (or the row) and the rule.
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
_ARRAY_CLOSE = b"\n  ]"
_ELEMENT_CLOSE = b"\n    }"
_BLOCK = 1 << 20
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
    has_records = False
    try:
        with path.open("rb") as handle:
            for number, line in _lines(path, handle):
                if line.rstrip(b"\n") != _ARRAY_START:
                    kept.append(_text(path, number, line))
                    continue
                has_records = True
                skipped, tail = _skip_array(path, handle, number)
                kept.append('  "per_request": null' + "\n" * (skipped + 1))  # later lines keep their numbers
                kept.append(_text(path, number + skipped + 1, tail[len(_ARRAY_CLOSE) - 1:]))  # after its "  ]"
                kept.extend(_text(path, n + number + skipped + 1, rest) for n, rest in _lines(path, handle))
                break
    except OSError as exc:
        raise TraceError(str(path), None, f"cannot read: {exc.strerror or exc}") from None
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


def _skip_array(path: Path, handle: IO[bytes], line: int) -> tuple[int, bytes]:
    """Read past the `per_request` array whose opening is line `line`: (newlines skipped, the
    rest of its closing line). The array closes at the first line ``  ]`` (its elements are
    indented deeper, and JSON strings hold no raw newline)."""
    carry, skipped = b"", 0
    while True:
        block = handle.read(_BLOCK)
        if not block:
            raise TraceError(str(path), None, f"truncated: the per_request array of line {line} never ends")
        data = carry + block
        at = data.find(_ARRAY_CLOSE)
        if at != -1:
            skipped += data.count(b"\n", 0, at + 1)
            rest = data[at + 1:]
            end = rest.find(b"\n")
            if end == -1:
                rest += handle.readline(MAX_LINE_BYTES)
                end = len(rest) - 1
            handle.seek(handle.tell() - (len(rest) - end - 1))
            return skipped, rest[:end + 1]
        keep = len(_ARRAY_CLOSE) - 1
        skipped += data.count(b"\n", 0, len(data) - keep)
        carry = data[len(data) - keep:]


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

        for number, row in read_jsonl(str(folder / "requests.jsonl"), chunk_lines=256):
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
    """(first line, record) of each element of ``prediction.json``'s `per_request` array, read a
    block at a time; a file not laid out as servesim writes it is parsed whole."""
    try:
        with path.open("rb") as handle:
            opening = next((number for number, line in _lines(path, handle) if line.rstrip(b"\n") == _ARRAY_START),
                           None)
            if opening is not None:
                yield from _elements(path, handle, opening + 1)
                return
    except OSError as exc:
        raise TraceError(str(path), None, f"cannot read: {exc.strerror or exc}") from None
    try:  # not servesim's layout (one line, another indent): the records as parsed whole
        records = safejson.read_json(path).get("per_request") or []
    except (OSError, safejson.JsonRefused) as exc:
        raise TraceError(str(path), None, f"cannot read: {exc}") from None
    yield from ((1, record) for record in records)


def _elements(path: Path, handle: IO[bytes], line: int) -> Iterator[tuple[int, Any]]:
    """The array's elements from `handle` (at the start of line `line`): each ends at a line
    ``    }`` (4 spaces: deeper lines are indented more), the array at a line ``  ]``."""
    buffer, pos, scanned = b"", 0, 0
    while True:
        end = buffer.find(_ELEMENT_CLOSE, max(pos, scanned))
        if buffer.find(_ARRAY_CLOSE, pos, len(buffer) if end == -1 else end) != -1:
            return
        if end == -1:
            block = handle.read(_BLOCK)
            if not block:
                raise TraceError(str(path), None, "truncated: the per_request array never ends")
            buffer = buffer[pos:] + block
            scanned = max(0, len(buffer) - len(block) - len(_ELEMENT_CLOSE))
            pos = 0
            continue
        stop = end + len(_ELEMENT_CLOSE)
        start = pos
        while start < stop and buffer[start] in b", \n":
            start += 1
        first = line + buffer.count(b"\n", pos, start)
        yield first, _parse_element(path, first, buffer[start:stop])
        line += buffer.count(b"\n", pos, stop)
        pos = stop


def _parse_element(path: Path, first: int, element: bytes) -> Any:
    try:
        return safejson.loads(safejson.decode(element), first_line=first, max_depth=None, max_int=False)
    except safejson.JsonRefused as exc:
        line = exc.line if exc.line is not None else first
        if exc.message.startswith("not UTF-8"):  # decode counts its lines from the element's first
            line = first + line - 1
        raise TraceError(str(path), line, exc.message) from None
