"""Readers of measured serving runs: per-request timings from a real benchmark, as arrays.

`read_measured(path)` recognises:

* **per-request JSONL** with a send (or queue) time, a first-token time and an end time per
  line, e.g. ``{"send_ts": 12.5, "first_token_ts": 12.9, "end_ts": 16.1, "output_tokens": 128}``.
  Field names are matched from `FIELD_NAMES`; the unit comes from the suffix (``_ns``, ``_us``,
  ``_ms``, otherwise seconds). A line without a first token, or with a non-empty ``error``,
  is a request that did not complete.
* **AIPerf** ``profile_export.jsonl`` (one ``{"metadata", "metrics", "error"}`` record per request).
* **vLLM benchmark** result JSON (``vllm bench serve --save-result --save-detailed``: ``ttfts``,
  ``itls``, ``output_lens`` per request).

Every reader returns a `MeasuredRun`: per-request columns in milliseconds (NaN where a request
has no such time) from which `latency()` derives the same `LatencySamples` a simulation gives,
with the same definitions (TTFT = first token − send, E2E = end − send, TPOT = (end − first
token) / (output tokens − 1), ITL = token gaps when the source has them, else each request's TPOT).
Malformed input raises `ConfigError` naming the file and line.
"""

from __future__ import annotations

import json
from contextlib import closing
from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from servesim.errors import ConfigError
from servesim.report.latency import LatencySamples

FIELD_NAMES = {
    "send": ("send_time_ms", "send_ms", "send_ns", "send_ts", "send_time", "start_time_ms", "start_ms",
             "start_ns", "start_ts", "request_start_ns", "queued_ts", "arrival_time_ms", "arrival_ms",
             "arrival_ts"),
    "first_token": ("first_token_time_ms", "first_token_ms", "first_token_ns", "first_token_ts",
                    "first_token_time"),
    "end": ("end_time_ms", "end_ms", "end_ns", "end_ts", "end_time", "last_token_time_ms", "last_token_ms",
            "last_token_ns", "last_token_ts", "last_token_time", "request_end_ns"),
    "output_tokens": ("output_tokens", "output_toks", "output_length", "output_len", "num_output_tokens", "osl"),
    "input_tokens": ("input_tokens", "input_toks", "input_length", "input_len", "prompt_tokens", "isl"),
}
"""Accepted names of each per-request field, in order of preference."""
_UNITS_MS = {"_ns": 1e-6, "_us": 1e-3, "_ms": 1.0}


@dataclass
class MeasuredRun:
    """Per-request timings of one measured run, in milliseconds from the run's own clock."""

    path: Path
    source: str
    """Which format it was read as: "jsonl", "aiperf" or "vllm-bench"."""
    send_ms: np.ndarray
    first_token_ms: np.ndarray
    end_ms: np.ndarray
    output_tokens: np.ndarray
    input_tokens: np.ndarray
    completed: np.ndarray
    """Whether each request completed (it has a first token and no error)."""
    token_gaps_ms: np.ndarray | None = None
    """Every inter-token gap of every completed request, when the source records them."""
    reported: dict[str, float] | None = None
    """Throughputs the source reports itself (when it has no per-request send times)."""

    @property
    def num_requests(self) -> int:
        return len(self.completed)

    def latency(self) -> LatencySamples:
        """The latency samples, defined as for a simulation."""
        ok = self.completed
        send, first, end, out = self.send_ms[ok], self.first_token_ms[ok], self.end_ms[ok], self.output_tokens[ok]
        multi = out >= 2
        tpot = (end[multi] - first[multi]) / (out[multi] - 1)
        gaps = self.token_gaps_ms if self.token_gaps_ms is not None else tpot
        start = np.nanmin(self.send_ms) if np.isfinite(self.send_ms).any() else 0.0
        return LatencySamples(ttft_ms=np.maximum(first - send, 0.0), tpot_ms=tpot, e2e_ms=end - send,
                              itl_ms=gaps, itl_weights=None, arrival_ms=self.send_ms - start,
                              completion_ms=end - start, itl_per_request=self.token_gaps_ms is None)

    def throughput(self) -> dict[str, float]:
        """Completed requests and output tokens per second over the run's span."""
        if self.reported is not None:
            return dict(self.reported)
        ok = self.completed
        if not ok.any() or not np.isfinite(self.send_ms).any():
            return {}
        span_s = (np.nanmax(self.end_ms[ok]) - np.nanmin(self.send_ms)) / 1000
        if span_s <= 0:
            return {}
        return {"request_throughput_rps": float(ok.sum() / span_s),
                "output_throughput_tok_s": float(np.nansum(self.output_tokens[ok]) / span_s)}


def read_measured(path: str | Path) -> MeasuredRun:
    """Read a measured run in any format this module knows (see the module docstring)."""
    path = Path(path)
    if path.is_dir():
        for name in ("profile_export.jsonl", "requests.jsonl"):
            if (path / name).is_file():
                return read_measured(path / name)
        raise ConfigError(f"{path}: no measured run found (expected profile_export.jsonl or requests.jsonl)")
    if not path.is_file():
        raise ConfigError(f"{path}: no such file")
    if path.suffix == ".json":
        return read_vllm_bench(path)
    with closing(_json_lines(path)) as rows:
        first = next(rows, None)
    if first is None:
        raise ConfigError(f"{path}: no requests in the file")
    if "metadata" in first[1] and "metrics" in first[1]:
        return read_aiperf(path)
    return read_request_jsonl(path)


def _json_lines(path: Path) -> Generator[tuple[int, dict[str, Any]], None, None]:
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ConfigError(f"{path}:{number}: not valid JSON ({exc.msg})") from None
            if not isinstance(row, dict):
                raise ConfigError(f"{path}:{number}: expected a JSON object per line")
            yield number, row


def _pick(row: Mapping[str, Any], field: str) -> tuple[str | None, Any]:
    for name in FIELD_NAMES[field]:
        if row.get(name) is not None:
            return name, row[name]
    return None, None


def _ms(name: str, value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{where}: {name} must be a number (got {value!r})")
    return float(value) * _UNITS_MS.get(name[-3:], 1000.0)


def read_request_jsonl(path: Path) -> MeasuredRun:
    """Per-request JSONL with send / first-token / end times (names in `FIELD_NAMES`)."""
    cols: dict[str, list[float]] = {k: [] for k in ("send", "first_token", "end", "output_tokens", "input_tokens")}
    completed = []
    for number, row in _json_lines(path):
        where = f"{path}:{number}"
        for field in ("send", "end"):
            name, value = _pick(row, field)
            if name is None:
                raise ConfigError(f"{where}: no {field} time (one of {', '.join(FIELD_NAMES[field][:6])}, …)")
            cols[field].append(_ms(name, value, where))
        name, value = _pick(row, "first_token")
        cols["first_token"].append(_ms(name, value, where) if name is not None else np.nan)
        completed.append(name is not None and not row.get("error"))
        for field in ("output_tokens", "input_tokens"):
            name, value = _pick(row, field)
            cols[field].append(float(value) if name is not None else np.nan)
    arrays = {k: np.array(v, float) for k, v in cols.items()}
    return MeasuredRun(path, "jsonl", arrays["send"], arrays["first_token"], arrays["end"], arrays["output_tokens"],
                       arrays["input_tokens"], np.array(completed, bool))


def read_aiperf(path: Path) -> MeasuredRun:
    """AIPerf's per-request `profile_export.jsonl`."""
    send, first, end, out, isl, completed, gaps = [], [], [], [], [], [], []
    for number, row in _json_lines(path):
        meta, metrics = row.get("metadata") or {}, row.get("metrics") or {}
        start = meta.get("request_start_ns")
        if start is None:
            raise ConfigError(f"{path}:{number}: AIPerf record without metadata.request_start_ns")
        t0 = start / 1e6
        ttft, latency = _metric(metrics, "time_to_first_token"), _metric(metrics, "request_latency")
        ok = not row.get("error") and ttft is not None and latency is not None
        send.append(t0)
        first.append(t0 + ttft if ok else np.nan)
        end.append(t0 + latency if ok else (meta.get("request_end_ns") or start) / 1e6)
        out.append(_metric(metrics, "output_sequence_length") or np.nan)
        isl.append(_metric(metrics, "input_sequence_length") or _metric(metrics, "error_isl") or np.nan)
        completed.append(ok)
        chunks = _metric(metrics, "inter_chunk_latency")
        if ok and isinstance(chunks, list):
            gaps.extend(chunks)
    return MeasuredRun(path, "aiperf", np.array(send), np.array(first), np.array(end), np.array(out, float),
                       np.array(isl, float), np.array(completed, bool), np.array(gaps, float) if gaps else None)


def _metric(metrics: Mapping[str, Any], name: str) -> Any:
    entry = metrics.get(name)
    return entry.get("value") if isinstance(entry, dict) else entry


def read_vllm_bench(path: Path) -> MeasuredRun:
    """A `vllm bench serve --save-result --save-detailed` JSON file (times in seconds)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}:{exc.lineno}: not valid JSON ({exc.msg})") from None
    if not isinstance(data, dict) or not isinstance(data.get("ttfts"), list):
        raise ConfigError(f"{path}: not a vLLM benchmark result with per-request data (no 'ttfts' list; "
                          "save it with --save-detailed)")
    ttfts: Sequence[float] = data["ttfts"]
    n = len(ttfts)
    itls = data.get("itls") or [[] for _ in range(n)]
    outs = data.get("output_lens") or [len(g) + 1 for g in itls]
    errors = data.get("errors") or [""] * n
    starts = data.get("start_times")
    if not (len(itls) == len(outs) == len(errors) == n):
        raise ConfigError(f"{path}: ttfts, itls, output_lens and errors have different lengths")
    completed = np.array([not e and t is not None and t > 0 for e, t in zip(errors, ttfts, strict=True)], bool)
    send = np.array(starts, float) * 1000 if starts else np.full(n, np.nan)
    base = np.where(np.isnan(send), 0.0, send)
    first = base + np.array([t if t is not None else np.nan for t in ttfts], float) * 1000
    end = first + np.array([sum(g) for g in itls], float) * 1000
    gaps = np.array([x for g, ok in zip(itls, completed, strict=True) if ok for x in g], float) * 1000
    reported = None if starts else {
        "request_throughput_rps": float(data.get("request_throughput", np.nan)),
        "output_throughput_tok_s": float(data.get("output_throughput", np.nan))}
    return MeasuredRun(path, "vllm-bench", base, first, end, np.array(outs, float),
                       np.array(data.get("input_lens") or [np.nan] * n, float), completed,
                       gaps if len(gaps) else None, reported)
