"""Measured serving runs: per-request timings of a real benchmark, read from three formats.

`load_measured(path)` reads

* **per-request JSON lines** — LLMServingSim's vLLM bench ``requests.jsonl`` (``queued_ts`` or
  ``send_ts``, ``first_token_ts``, ``last_token_ts``, ``input_toks``, ``output_toks``) and
  files like it: a send, first-token and end time per line under any name of
  `readers.FIELD_NAMES` (seconds, or ms / us / ns by the name's suffix);
* **AIPerf** ``profile_export.jsonl`` (one ``{"metadata", "metrics", "error"}`` record per request);
* **vLLM benchmark** JSON (``vllm bench serve --save-result --save-detailed``);

a folder is searched for ``profile_export.jsonl`` or ``requests.jsonl``. The result is a
`Measured` run: its completed requests in send order, the failed ones counted, latencies defined
as for a simulation (TTFT = first token − send, E2E = end − send, TPOT = (end − first token) /
(output tokens − 1)). `servesim compare` and `servesim calibrate` both read measurements here.

Bad input raises `TraceError` naming the file and the line (or list and index), which the
commands turn into exit code 1.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from servesim import safejson
from servesim.errors import TraceError
from servesim.limits import MAX_MS
from servesim.measured.readers import FIELD_NAMES, Rows, json_lines, read_aiperf, read_request_lines, read_vllm_bench
from servesim.measured.run import Measured

__all__ = ["FIELD_NAMES", "FORMATS", "Measured", "load_measured"]

FORMATS = ("llmservingsim", "aiperf", "vllm")
_FOLDER_FILES = ("profile_export.jsonl", "requests.jsonl")


def load_measured(path: str | Path, fmt: str = "auto", *, replayable: bool = True) -> Measured:
    """Read a measurement file (or a folder holding one); `fmt` is one of `FORMATS` or "auto"
    (detected from the content). `replayable` (the default) requires per-request send times and
    token counts, which a replay of the run needs; a comparison of latencies does not."""
    path = _resolve(Path(path))
    name = str(path)
    text = _read_text(path)
    document = _whole_document(path, text)
    if fmt == "auto":
        fmt = _detect(name, text, document)
    if fmt == "vllm":
        if document is None:
            document = _parse(name, text)
        rows = read_vllm_bench(name, document, replayable)
    elif fmt == "aiperf":
        rows = read_aiperf(name, text, replayable)
    elif fmt == "llmservingsim":
        rows = read_request_lines(name, text, replayable)
    else:
        raise TraceError(name, None, f"unknown measurement format {fmt!r} (use one of {', '.join(FORMATS)})")
    return _measured(name, fmt, rows)


def _resolve(path: Path) -> Path:
    if not path.is_dir():
        return path
    for name in _FOLDER_FILES:
        if (path / name).is_file():
            return path / name
    raise TraceError(str(path), None, f"no measurements in this folder (expected {' or '.join(_FOLDER_FILES)})")


def _read_text(path: Path) -> str:
    """The file's UTF-8 text (at most `safejson.MAX_FILE_BYTES`)."""
    name = str(path)
    try:
        safejson.regular_file_or_error(path)
        with path.open("rb") as handle:
            data = handle.read(safejson.MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise TraceError(name, None, f"cannot read measurements: {exc.strerror or exc}") from None
    if len(data) > safejson.MAX_FILE_BYTES:
        raise TraceError(name, None, f"larger than {safejson.MAX_FILE_BYTES >> 20} MiB")
    try:
        return safejson.decode(data)
    except safejson.JsonRefused as exc:
        raise TraceError(name, exc.line, exc.message) from None


def _whole_document(path: Path, text: str) -> Any:
    """The file as one JSON value when it is one (a vLLM result), else None (JSON lines)."""
    if path.suffix == ".json":
        return _parse(str(path), text)
    if "\n" in text.strip():  # JSON lines (a vLLM result indented over lines starts with "{\n")
        if not text.lstrip().startswith("{\n"):
            return None
    try:
        value = safejson.loads(text)
    except safejson.JsonRefused:
        return None
    return value if isinstance(value, dict) and "ttfts" in value else None


def _parse(name: str, text: str) -> Any:
    try:
        return safejson.loads(text)
    except safejson.JsonRefused as exc:
        raise TraceError(name, exc.line, exc.message) from None


def _detect(name: str, text: str, document: Any) -> str:
    if document is not None:
        return "vllm"
    if not text.strip():
        raise TraceError(name, None, "empty measurement file")
    for number, record in json_lines(name, text):
        if "metadata" in record and "metrics" in record:
            return "aiperf"
        if any(key in record for key in (*FIELD_NAMES["first_token"], *FIELD_NAMES["send"])):
            return "llmservingsim"
        raise TraceError(name, number, "unrecognised record: expected per-request times (first_token_ts, …), "
                                       "AIPerf (metadata/metrics) or a vLLM bench JSON (ttfts)")
    raise TraceError(name, None, "no records")


def _measured(name: str, fmt: str, rows: Rows) -> Measured:
    ok = sorted((r for r in rows.requests if r[1] is not None), key=lambda r: r[0])
    if not ok:
        raise TraceError(name, None, f"no successful request among {len(rows.requests)} records")
    send, first, end, isl, osl = (np.array(col) for col in zip(*ok, strict=True))
    earliest = min(float(send.min()), min((r[0] for r in rows.requests if r[1] is None), default=math.inf))
    if (float(end.max()) - earliest) * 1000 > MAX_MS:
        raise TraceError(name, None, f"the run spans {float(end.max()) - earliest:.3g} s, longer than {MAX_MS:.0e} ms "
                                     f"(servesim.limits.MAX_MS): times in mixed units?")
    failed = np.array(sorted(r[0] for r in rows.requests if r[1] is None), float)
    gaps = np.array(rows.gaps_ms, float) if rows.gaps_ms else None
    return Measured(name, fmt, send.astype(float), first.astype(float), end.astype(float), isl.astype(np.int64),
                    osl.astype(np.int64), failed_send_s=failed, token_gaps_ms=gaps, reported=rows.reported)
