"""The three measurement formats, each read into rows of one request.

Every reader checks what it reads: JSON through `servesim.safejson` (no NaN or Infinity, no
integer beyond 2⁶³, nesting at most 64 levels), times finite numbers in order (send ≤ first
token ≤ end) with a request lasting at most `MAX_MS`, token counts integers in [0, `MAX_TOKENS`],
units strings of the known ones; a failure names the file and line (JSON lines) or the
list and index (vLLM JSON) and raises `TraceError`. With ``replayable`` a completed request
must also carry its send time and both token counts (what a replay needs).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from servesim import safejson
from servesim.errors import TraceError
from servesim.limits import MAX_MS, MAX_TOKENS

FIELD_NAMES = {
    "send": ("send_ts", "queued_ts", "send_time_ms", "send_ms", "send_ns", "send_time", "start_time_ms",
             "start_ms", "start_ns", "start_ts", "request_start_ns", "arrival_time_ms", "arrival_ms", "arrival_ts"),
    "first_token": ("first_token_ts", "first_token_time_ms", "first_token_ms", "first_token_ns", "first_token_time"),
    "end": ("last_token_ts", "end_ts", "end_time_ms", "end_ms", "end_ns", "end_time", "last_token_time_ms",
            "last_token_ms", "last_token_ns", "last_token_time", "request_end_ns"),
    "input_tokens": ("input_toks", "input_tokens", "input_length", "input_len", "prompt_tokens", "isl"),
    "output_tokens": ("output_toks", "output_tokens", "output_length", "output_len", "num_output_tokens", "osl"),
}
"""Accepted names of each field of a per-request JSON line, in order of preference. Times are
seconds unless the name ends in ``_ms``, ``_us`` or ``_ns``."""
_SECONDS = {"_ns": 1e-9, "_us": 1e-6, "_ms": 1e-3}
_AIPERF_UNITS = {"ms": 1e-3, "s": 1.0, "us": 1e-6, "ns": 1e-9, "tokens": 1.0}


@dataclass
class Rows:
    """What a reader found: per request (send s, first token s, end s, input, output tokens),
    first token and end None for a failed request, token counts -1 where unknown."""

    requests: list[tuple[float, float | None, float | None, int, int]] = field(default_factory=list)
    gaps_ms: list[float] | None = None
    reported: dict[str, float] | None = None


def json_lines(path: str, text: str) -> Iterator[tuple[int, dict]]:
    """(line number, object) of every non-blank line."""
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = safejson.loads(line, first_line=number)
        except safejson.JsonRefused as exc:
            raise TraceError(path, exc.line, exc.message) from None
        if not isinstance(record, dict):
            raise TraceError(path, number, "each line must be a JSON object")
        yield number, record


def _show(value: Any) -> str:
    text = "missing" if value is None else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _finite(path: str, line: int | None, value: Any, name: str, scale: float = 1.0) -> float:
    """`value` × `scale` as a float, when `value` is a number and the product finite."""
    number = safejson.finite_number(value)
    if number is None or not math.isfinite(number * scale):
        raise TraceError(path, line, f"{name}: must be a finite number (got {_show(value)})")
    return number * scale


def _count(path: str, line: int | None, value: Any, name: str) -> int:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_TOKENS:
        raise TraceError(path, line, f"{name}: must be an integer in [0, {MAX_TOKENS}] (got {_show(value)})")
    return value


def _in_order(path: str, line: int | None, send: float, first: float, end: float, where: str = "") -> None:
    if not send <= first <= end:
        raise TraceError(path, line, f"{where}times out of order: send {send}, first token {first}, end {end}")
    if (end - send) * 1000 > MAX_MS:
        raise TraceError(path, line, f"{where}request lasts {end - send:.3g} s, longer than {MAX_MS:.0e} ms "
                                     f"(servesim.limits.MAX_MS): a unit mistake?")


def _unit(path: str, line: int, entry: dict, name: str) -> float:
    """The scale to seconds (or tokens) of an AIPerf metric's ``unit`` (default ms)."""
    unit = entry.get("unit", "ms")
    scale = _AIPERF_UNITS.get(unit) if isinstance(unit, str) else None
    if scale is None:
        raise TraceError(path, line, f"{name}.unit: must be one of {', '.join(_AIPERF_UNITS)} (got {_show(unit)})")
    return scale


def _pick(record: Mapping[str, Any], fieldname: str) -> str | None:
    return next((name for name in FIELD_NAMES[fieldname] if record.get(name) is not None), None)


def _missing(path: str, line: int, what: str, fieldname: str) -> TraceError:
    names = FIELD_NAMES[fieldname]
    return TraceError(path, line, f"no {what} (one of {', '.join(names[:4])}, …, {names[-1]})")


def _time(path: str, line: int, record: Mapping[str, Any], fieldname: str) -> float | None:
    name = _pick(record, fieldname)
    if name is None:
        return None
    return _finite(path, line, record[name], name, _SECONDS.get(name[-3:], 1.0))


def _tokens(path: str, line: int, record: Mapping[str, Any], fieldname: str, required: bool) -> int:
    name = _pick(record, fieldname)
    if name is None:
        if required:
            raise _missing(path, line, fieldname.replace("_", " ") + " count", fieldname)
        return -1
    return _count(path, line, record[name], name)


def read_request_lines(path: str, text: str, replayable: bool) -> Rows:
    """Per-request JSON lines (LLMServingSim's ``requests.jsonl`` and the like, `FIELD_NAMES`).

    Every line needs a send time, and an end time unless it has a non-empty ``error``; a line
    with an error or without a first-token time is a failed request.
    """
    rows = Rows()
    for number, r in json_lines(path, text):
        send = _time(path, number, r, "send")
        if send is None:
            raise _missing(path, number, "send time", "send")
        if r.get("error"):
            rows.requests.append((send, None, None, -1, -1))
            continue
        end = _time(path, number, r, "end")
        if end is None:
            raise _missing(path, number, "end time", "end")
        first = _time(path, number, r, "first_token")
        if first is None:
            rows.requests.append((send, None, None, -1, -1))
            continue
        _in_order(path, number, send, first, end)
        rows.requests.append((send, first, end, _tokens(path, number, r, "input_tokens", replayable),
                              _tokens(path, number, r, "output_tokens", replayable)))
    return rows


def _metric(path: str, line: int, metrics: dict, name: str, required: bool = True) -> float | None:
    entry = metrics.get(name)
    if entry is None and not required:
        return None
    value = entry.get("value") if isinstance(entry, dict) else None
    _finite(path, line, value, f"metrics.{name}.value")
    assert isinstance(entry, dict) and value is not None
    return _finite(path, line, value, f"metrics.{name}.value", _unit(path, line, entry, f"metrics.{name}"))


def _aiperf_tokens(path: str, line: int, metrics: dict, name: str, replayable: bool) -> int:
    value = _metric(path, line, metrics, name, replayable)
    return -1 if value is None else _count(path, line, round(value), f"metrics.{name}")


def read_aiperf(path: str, text: str, replayable: bool) -> Rows:
    """AIPerf's ``profile_export.jsonl``: ``metadata.request_start_ns``, and the metrics
    ``time_to_first_token``, ``request_latency``, ``input_sequence_length``,
    ``output_sequence_length`` and, when recorded, ``inter_chunk_latency`` (the token gaps)."""
    rows = Rows(gaps_ms=[])
    for number, r in json_lines(path, text):
        meta, metrics = r.get("metadata"), r.get("metrics")
        if not isinstance(meta, dict):
            raise TraceError(path, number, "metadata: must be an object")
        send = _finite(path, number, meta.get("request_start_ns"), "metadata.request_start_ns") * 1e-9
        if r.get("error") or meta.get("was_cancelled") or not metrics:
            rows.requests.append((send, None, None, -1, -1))
            continue
        if not isinstance(metrics, dict):
            raise TraceError(path, number, "metrics: must be an object")
        first = send + (_metric(path, number, metrics, "time_to_first_token") or 0.0)
        end = send + (_metric(path, number, metrics, "request_latency") or 0.0)
        _in_order(path, number, send, first, end)
        rows.requests.append((send, first, end, _aiperf_tokens(path, number, metrics, "input_sequence_length", replayable),
                              _aiperf_tokens(path, number, metrics, "output_sequence_length", replayable)))
        assert rows.gaps_ms is not None
        rows.gaps_ms.extend(_chunk_gaps_ms(path, number, metrics.get("inter_chunk_latency")))
    if not rows.gaps_ms:
        rows.gaps_ms = None
    return rows


def _chunk_gaps_ms(path: str, line: int, entry: Any) -> list[float]:
    if entry is None:
        return []
    values = entry.get("value") if isinstance(entry, dict) else None
    if not isinstance(values, list) or not isinstance(entry, dict):
        raise TraceError(path, line, "metrics.inter_chunk_latency: must be {value: [numbers], unit: ms|s|us|ns}")
    scale = _unit(path, line, entry, "metrics.inter_chunk_latency") * 1000
    gaps = [_finite(path, line, v, "metrics.inter_chunk_latency.value", scale) for v in values]
    if sum(gaps) > MAX_MS:
        raise TraceError(path, line, f"metrics.inter_chunk_latency: the gaps add up to more than {MAX_MS:.0e} ms")
    return gaps


_VLLM_LISTS = ("ttfts", "itls", "input_lens", "output_lens")


def read_vllm_bench(path: str, doc: Any, replayable: bool) -> Rows:
    """``vllm bench serve --save-result --save-detailed`` JSON: the per-request lists ``ttfts``,
    ``itls`` (seconds), ``input_lens``, ``output_lens``, ``errors`` and, from vLLM versions that
    record them, ``start_times`` (without them each request is timed from its own start and the
    file's throughputs are reported). A request with no first-token time or an error failed."""
    if not isinstance(doc, dict):
        raise TraceError(path, None, "a vLLM bench result must be a JSON object")
    for key in _VLLM_LISTS:
        if not isinstance(doc.get(key), list):
            raise TraceError(path, None, f"{key}: missing per-request list (save the result with --save-detailed)")
    starts = doc.get("start_times")
    if starts is None and replayable:
        raise TraceError(path, None, "start_times: missing per-request list (saved by vLLM versions that record "
                                     "start_times, with --save-detailed)")
    n = len(doc["ttfts"])
    for key in (*_VLLM_LISTS, "start_times"):
        if doc.get(key) is not None and (not isinstance(doc[key], list) or len(doc[key]) != n):
            raise TraceError(path, None, f"{key}: has {_length(doc[key])} entries, ttfts has {n}")
    given = doc.get("errors")
    errors = given if isinstance(given, list) and len(given) == n else [""] * n
    rows = Rows(gaps_ms=[])
    for i in range(n):
        _vllm_request(path, doc, i, errors[i], rows)
    if not rows.gaps_ms:
        rows.gaps_ms = None
    if starts is None:
        rows.reported = {"request_throughput_rps": _reported(doc, "request_throughput"),
                         "output_throughput_tok_s": _reported(doc, "output_throughput")}
    return rows


def _length(value: Any) -> int | str:
    return len(value) if isinstance(value, list) else "no list of"


def _reported(doc: dict, key: str) -> float:
    value = doc.get(key)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else math.nan


def _vllm_request(path: str, doc: dict, i: int, error: Any, rows: Rows) -> None:
    starts = doc.get("start_times")
    send = _finite(path, None, starts[i], f"start_times[{i}]") if starts is not None else 0.0
    isl = _count(path, None, doc["input_lens"][i], f"input_lens[{i}]")
    osl = _count(path, None, doc["output_lens"][i], f"output_lens[{i}]")
    ttft = doc["ttfts"][i]
    if error or not ttft or osl == 0:
        rows.requests.append((send, None, None, isl, osl))
        return
    gaps = doc["itls"][i]
    if not isinstance(gaps, list) or any(safejson.finite_number(g) is None for g in gaps):
        raise TraceError(path, None, f"itls[{i}]: must be a list of finite numbers")
    first = send + _finite(path, None, ttft, f"ttfts[{i}]")
    end = first + float(sum(gaps))
    if not math.isfinite(end):
        raise TraceError(path, None, f"itls[{i}]: the gaps add up beyond every float")
    _in_order(path, None, send, first, end, f"request {i}: ")
    rows.requests.append((send, first, end, isl, osl))
    assert rows.gaps_ms is not None
    rows.gaps_ms.extend(float(g) * 1000 for g in gaps)
