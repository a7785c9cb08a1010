"""Per-request measurements of a real serving run, from three file formats.

Every format becomes a `Measured` run: per request its send time, first-token time, end time
(seconds, any common origin) and its prompt and output token counts; failed requests are kept
apart and counted.

* ``llmservingsim`` — JSON lines as in LLMServingSim's vLLM bench (``requests.jsonl``):
  ``input_toks``, ``output_toks``, ``first_token_ts``, ``last_token_ts`` and a send time:
  ``send_ts`` when present, else ``queued_ts`` (the engine's queue time — the anchor that data
  set documents), all in seconds of one clock.
* ``aiperf`` — AIPerf's ``profile_export.jsonl``: ``metadata.request_start_ns`` and the
  ``time_to_first_token`` / ``request_latency`` (ms), ``input_sequence_length`` and
  ``output_sequence_length`` metrics; records with an ``error`` are failures.
* ``vllm`` — ``vllm bench serve --save-result --save-detailed`` JSON: the per-request lists
  ``start_times``, ``ttfts`` and ``itls`` (seconds), ``input_lens`` and ``output_lens``; a
  request with an empty first-token time or a non-empty ``errors`` entry is a failure.

Errors name the file and the line (JSON lines) or the list and index (vLLM JSON).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from servesim.errors import TraceError

FORMATS = ("llmservingsim", "aiperf", "vllm")


@dataclass(frozen=True)
class Measured:
    """The successful requests of one real run, sorted by send time, plus how many failed."""

    path: str
    format: str
    send_s: np.ndarray
    first_s: np.ndarray
    end_s: np.ndarray
    input_tokens: np.ndarray
    output_tokens: np.ndarray
    failed: int = 0

    def __len__(self) -> int:
        return len(self.send_s)

    def latencies(self) -> dict[str, np.ndarray]:
        """TTFT, TPOT and E2E in ms per request, in send order (TPOT is NaN below 2 tokens)."""
        steps = (self.output_tokens - 1).astype(float)
        steps[steps < 1] = np.nan
        return {
            "ttft": (self.first_s - self.send_s) * 1000,
            "tpot": (self.end_s - self.first_s) * 1000 / steps,
            "e2e": (self.end_s - self.send_s) * 1000,
        }

    def mooncake_rows(self) -> list[dict[str, Any]]:
        """The run as a Mooncake trace: send offsets in ms, lengths, a private prompt per request."""
        origin = float(self.send_s[0]) if len(self) else 0.0
        rows, next_id = [], 0
        for send, isl, osl in zip(self.send_s, self.input_tokens, self.output_tokens, strict=True):
            blocks = max(1, -(-int(isl) // 512))
            rows.append({"timestamp": round((float(send) - origin) * 1000, 6), "input_length": int(isl),
                         "output_length": max(1, int(osl)), "hash_ids": list(range(next_id, next_id + blocks))})
            next_id += blocks
        return rows


def load_measured(path: str | Path, fmt: str = "auto") -> Measured:
    """Read a measurement file; `fmt` is one of `FORMATS` or "auto" (detected from the content)."""
    path = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise TraceError(path, None, f"cannot read measurements: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise TraceError(path, None, f"not UTF-8 text: {exc.reason}") from None
    if fmt == "auto":
        fmt = detect_format(path, text)
    if fmt not in FORMATS:
        raise TraceError(path, None, f"unknown measurement format {fmt!r} (use one of {', '.join(FORMATS)})")
    rows = _READERS[fmt](path, text)
    return _measured(path, fmt, rows)


def detect_format(path: str, text: str) -> str:
    """The format of a measurement file, from its first non-blank content."""
    stripped = text.lstrip()
    if not stripped:
        raise TraceError(path, None, "empty measurement file")
    if stripped.startswith("{") and ("\n{" not in stripped.rstrip() or '"ttfts"' in stripped[:200_000]):
        head = _first_object(path, stripped)
        if head is not None and "ttfts" in head:
            return "vllm"
    for number, record in _json_lines(path, text):
        if "metadata" in record and "metrics" in record:
            return "aiperf"
        if "first_token_ts" in record:
            return "llmservingsim"
        raise TraceError(path, number, "unrecognised record: expected LLMServingSim (first_token_ts), AIPerf "
                                       "(metadata/metrics) or a vLLM bench JSON (ttfts)")
    raise TraceError(path, None, "no records")


def _first_object(path: str, text: str) -> dict | None:
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def _json_lines(path: str, text: str) -> Iterator[tuple[int, dict]]:
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise TraceError(path, number, f"invalid JSON: {exc.msg}") from None
        if not isinstance(record, dict):
            raise TraceError(path, number, "each line must be a JSON object")
        yield number, record


Row = tuple[float, float | None, float | None, int, int]
"""(send s, first token s or None, end s or None, input tokens, output tokens); None = failed."""


def _number(path: str, line: int | None, record: dict, key: str, where: str = "") -> float:
    value = record.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise TraceError(path, line, f"{where}{key}: must be a finite number (got {_show(value)})")
    return float(value)


def _count(path: str, line: int | None, value: Any, key: str) -> int:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise TraceError(path, line, f"{key}: must be a non-negative integer (got {_show(value)})")
    return value


def _show(value: Any) -> str:
    text = "missing" if value is None else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _read_llmservingsim(path: str, text: str) -> list[Row]:
    rows: list[Row] = []
    for number, r in _json_lines(path, text):
        send_key = "send_ts" if "send_ts" in r else "queued_ts"
        send = _number(path, number, r, send_key)
        first = _number(path, number, r, "first_token_ts")
        end = _number(path, number, r, "last_token_ts")
        _in_order(path, number, send, first, end)
        rows.append((send, first, end, _count(path, number, r.get("input_toks"), "input_toks"),
                     _count(path, number, r.get("output_toks"), "output_toks")))
    return rows


def _metric(path: str, line: int, metrics: dict, name: str) -> float:
    entry = metrics.get(name)
    value = entry.get("value") if isinstance(entry, dict) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise TraceError(path, line, f"metrics.{name}.value: must be a finite number (got {_show(value)})")
    assert isinstance(entry, dict)
    unit = entry.get("unit", "ms")
    scale = {"ms": 1e-3, "s": 1.0, "us": 1e-6, "ns": 1e-9, "tokens": 1.0}.get(unit)
    if scale is None:
        raise TraceError(path, line, f"metrics.{name}.unit: unknown unit {unit!r}")
    return float(value) * scale


def _read_aiperf(path: str, text: str) -> list[Row]:
    rows: list[Row] = []
    for number, r in _json_lines(path, text):
        meta, metrics = r.get("metadata"), r.get("metrics")
        if not isinstance(meta, dict):
            raise TraceError(path, number, "metadata: must be an object")
        send = _number(path, number, meta, "request_start_ns", "metadata.") * 1e-9
        if r.get("error") or meta.get("was_cancelled") or not metrics:
            rows.append((send, None, None, 0, 0))
            continue
        if not isinstance(metrics, dict):
            raise TraceError(path, number, "metrics: must be an object")
        first = send + _metric(path, number, metrics, "time_to_first_token")
        end = send + _metric(path, number, metrics, "request_latency")
        _in_order(path, number, send, first, end)
        isl = _count(path, number, round(_metric(path, number, metrics, "input_sequence_length")),
                     "metrics.input_sequence_length")
        osl = _count(path, number, round(_metric(path, number, metrics, "output_sequence_length")),
                     "metrics.output_sequence_length")
        rows.append((send, first, end, isl, osl))
    return rows


_VLLM_LISTS = ("start_times", "ttfts", "itls", "input_lens", "output_lens")


def _read_vllm(path: str, text: str) -> list[Row]:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TraceError(path, exc.lineno, f"invalid JSON: {exc.msg}") from None
    if not isinstance(doc, dict):
        raise TraceError(path, None, "a vLLM bench result must be a JSON object")
    for key in _VLLM_LISTS:
        if not isinstance(doc.get(key), list):
            hint = " (saved by vLLM versions that record start_times, with --save-detailed)" if key == "start_times" else ""
            raise TraceError(path, None, f"{key}: missing per-request list{hint}")
    n = len(doc["ttfts"])
    for key in _VLLM_LISTS:
        if len(doc[key]) != n:
            raise TraceError(path, None, f"{key}: has {len(doc[key])} entries, ttfts has {n}")
    given = doc.get("errors")
    errors = given if isinstance(given, list) and len(given) == n else [""] * n
    return [_vllm_row(path, doc, i, errors[i]) for i in range(n)]


def _vllm_row(path: str, doc: dict, i: int, error: Any) -> Row:
    def number(key: str) -> float:
        value = doc[key][i]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise TraceError(path, None, f"{key}[{i}]: must be a finite number (got {_show(value)})")
        return float(value)

    send = number("start_times")
    isl = _count(path, None, doc["input_lens"][i], f"input_lens[{i}]")
    osl = _count(path, None, doc["output_lens"][i], f"output_lens[{i}]")
    ttft = doc["ttfts"][i]
    if error or not ttft or osl == 0:
        return send, None, None, isl, osl
    gaps = doc["itls"][i]
    if not isinstance(gaps, list) or any(isinstance(g, bool) or not isinstance(g, (int, float)) for g in gaps):
        raise TraceError(path, None, f"itls[{i}]: must be a list of numbers")
    first = send + number("ttfts")
    end = first + float(sum(gaps))
    _in_order(path, None, send, first, end, f"request {i}: ")
    return send, first, end, isl, osl


def _in_order(path: str, line: int | None, send: float, first: float, end: float, where: str = "") -> None:
    if not send <= first <= end:
        raise TraceError(path, line, f"{where}times out of order: send {send}, first token {first}, end {end}")


_READERS = {"llmservingsim": _read_llmservingsim, "aiperf": _read_aiperf, "vllm": _read_vllm}


def _measured(path: str, fmt: str, rows: list[Row]) -> Measured:
    ok = sorted((r for r in rows if r[1] is not None), key=lambda r: r[0])
    if not ok:
        raise TraceError(path, None, f"no successful request among {len(rows)} records")
    cols = list(zip(*ok, strict=True))
    return Measured(path, fmt, np.array(cols[0]), np.array(cols[1]), np.array(cols[2]),
                    np.array(cols[3], dtype=np.int64), np.array(cols[4], dtype=np.int64),
                    failed=len(rows) - len(ok))
