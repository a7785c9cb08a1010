"""The summary report: every field derived from the collector's records (docs/metrics.md).

Counted requests (C) are those admitted at least once and completed. Latencies come from each
counted request's token timestamps; ITL and per-user throughput pool every token gap.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from servesim.collect.collector import RequestRecord
from servesim.report.stats import exact_stats, sketch_stats


@dataclass(slots=True, frozen=True)
class PoolUsage:
    """Provisioned time and GPUs of one worker pool."""

    worker_seconds: float = 0.0
    gpus_per_worker: int = 0


@dataclass(slots=True, frozen=True)
class Sla:
    ttft_ms: float | None = None
    itl_ms: float | None = None
    e2e_ms: float | None = None


@dataclass(slots=True)
class _Timelines:
    """Per counted request: token count, first/second/last token time; plus all gaps."""

    arrival: np.ndarray
    count: np.ndarray
    first: np.ndarray
    second: np.ndarray
    last: np.ndarray
    gaps: np.ndarray


def _timelines(counted: Sequence[RequestRecord]) -> _Timelines:
    views: dict[int, np.ndarray] = {}
    pieces: list[np.ndarray] = []
    n = len(counted)
    arrival = np.empty(n)
    count = np.zeros(n, dtype=np.int64)
    for i, record in enumerate(counted):
        arrival[i] = record.arrival_ms
        spans = record.token_spans
        if not spans:
            continue
        ends = record.pass_ends
        view = views.get(id(ends))
        if view is None:
            view = views[id(ends)] = np.frombuffer(ends, dtype=np.float64)
        total = 0
        for j in range(0, len(spans), 2):
            pieces.append(view[spans[j]:spans[j + 1]])
            total += spans[j + 1] - spans[j]
        count[i] = total
    times = np.concatenate(pieces) if pieces else np.empty(0)
    starts = np.concatenate(([0], np.cumsum(count)[:-1])) if n else np.empty(0, dtype=np.int64)
    has = count > 0
    first = np.full(n, np.nan)
    second = np.full(n, np.nan)
    last = np.full(n, np.nan)
    first[has] = times[starts[has]]
    last[has] = times[starts[has] + count[has] - 1]
    two = count > 1
    second[two] = times[starts[two] + 1]
    gaps = np.diff(times)
    if len(gaps):
        keep = np.ones(len(gaps), dtype=bool)
        boundaries = np.cumsum(count)[:-1] - 1
        boundaries = boundaries[(boundaries >= 0) & (boundaries < len(gaps))]
        keep[boundaries] = False
        gaps = gaps[keep]
    return _Timelines(arrival, count, first, second, last, gaps)


def _put(summary: dict[str, float], metric: str, stats: dict[str, float]) -> None:
    for name, value in stats.items():
        summary[f"{name}_{metric}"] = float(value)


def summarize(records: Sequence[RequestRecord], pools: dict[str, PoolUsage],
              wall_time_ms: float, sla: Sla | None = None) -> dict[str, float | int]:
    """The reference's summary fields for a finished replay."""
    counted = [r for r in records if r.counted]
    tl = _timelines(counted)
    total_in = sum(r.input_length for r in counted)
    total_out = sum(r.output_length for r in counted)
    duration = max((r.terminal_ms for r in counted), default=0.0)
    ds = max(duration / 1000, 1e-9)
    prefill, decode = pools.get("prefill", PoolUsage()), pools.get("decode", PoolUsage())
    reused_max = sum(max((a.reused_tokens for a in r.admissions), default=0) for r in counted)
    reused_first = sum(r.admissions[0].reused_tokens for r in counted)
    processed = total_in + total_out
    summary: dict[str, float | int] = {
        "num_requests": len(records),
        "completed_requests": len(counted),
        "total_input_tokens": total_in,
        "total_output_tokens": total_out,
        "duration_ms": float(duration),
        "request_throughput_rps": len(counted) / ds,
        "input_throughput_tok_s": total_in / ds,
        "output_throughput_tok_s": total_out / ds,
        "total_throughput_tok_s": (total_in + total_out) / ds,
        "prefill_worker_seconds": prefill.worker_seconds,
        "decode_worker_seconds": decode.worker_seconds,
        "prefill_gpus_per_worker": prefill.gpus_per_worker,
        "decode_gpus_per_worker": decode.gpus_per_worker,
        "gpu_hours": (prefill.worker_seconds * prefill.gpus_per_worker
                      + decode.worker_seconds * decode.gpus_per_worker) / 3600,
        "prefix_cache_reused_ratio": reused_max / total_in if total_in else 0.0,
        "first_admission_prefix_cache_reused_ratio": reused_first / total_in if total_in else 0.0,
        "processed_tokens": processed,
        "processed_tokens_per_s": processed / wall_time_ms * 1000 if wall_time_ms > 0 else 0.0,
        "processed_output_tokens_per_s": total_out / wall_time_ms * 1000 if wall_time_ms > 0 else 0.0,
        "wall_time_ms": wall_time_ms,
    }
    one = tl.count >= 1
    two = tl.count >= 2
    ttft = np.maximum(tl.first[one] - tl.arrival[one], 0.0)
    e2e = tl.last[one] - tl.arrival[one]
    _put(summary, "ttft_ms", exact_stats(ttft))
    _put(summary, "ttst_ms", exact_stats(tl.second[two] - tl.first[two]))
    _put(summary, "tpot_ms", exact_stats((tl.last[two] - tl.first[two]) / (tl.count[two] - 1)))
    _put(summary, "e2e_latency_ms", exact_stats(e2e))
    _put(summary, "itl_ms", sketch_stats(tl.gaps))
    positive = tl.gaps[tl.gaps > 0]
    _put(summary, "output_token_throughput_per_user", sketch_stats(1000.0 / positive))
    if sla is not None:
        summary.update(_goodput(counted, tl, sla, ds))
    return summary


def _goodput(counted: Sequence[RequestRecord], tl: _Timelines, sla: Sla, ds: float) -> dict[str, float | int]:
    good = good_tokens = 0
    for i, record in enumerate(counted):
        n = int(tl.count[i])
        if n == 0:
            ok = (sla.e2e_ms is not None and sla.ttft_ms is None
                  and record.terminal_ms - record.arrival_ms <= sla.e2e_ms)
        else:
            ttft = max(tl.first[i] - tl.arrival[i], 0.0)
            e2e = tl.last[i] - tl.arrival[i]
            ok = ((sla.ttft_ms is None or ttft <= sla.ttft_ms)
                  and (sla.e2e_ms is None or e2e <= sla.e2e_ms)
                  and (sla.itl_ms is None or n == 1 or (e2e - ttft) / (n - 1) <= sla.itl_ms))
        if ok:
            good += 1
            good_tokens += record.output_length
    return {
        "goodput_completed_requests": good,
        "goodput_request_throughput_rps": good / ds,
        "goodput_output_throughput_tok_s": good_tokens / ds,
    }
