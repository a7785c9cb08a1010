"""The summary report: every field derived from the collector's records (docs/metrics.md).

Counted requests (C) are those admitted at least once and completed. Latencies come from each
counted request's token timestamps; ITL and per-user throughput pool every token gap.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from servesim.collect.collector import RequestRecord, Status
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
class Timelines:
    """Per counted request: token count, first/second/last token time; plus every token gap of
    every request, as distinct gap values and how many gaps have each."""

    arrival: np.ndarray
    count: np.ndarray
    first: np.ndarray
    second: np.ndarray
    last: np.ndarray
    gaps: np.ndarray
    gap_counts: np.ndarray


def request_timelines(counted: Sequence[RequestRecord]) -> Timelines:
    """Read the timelines off the token spans, without materialising one value per token.

    A request's tokens are stamped with the ends of runs of consecutive passes of one worker,
    so its gaps inside a run are that worker's pass-to-pass gaps: the report counts, for each
    gap between two consecutive passes of a worker, how many requests span it, plus one gap per
    request between the runs it has.
    """
    n = len(counted)
    arrival = np.empty(n)
    count = np.zeros(n, dtype=np.int64)
    first = np.full(n, np.nan)
    second = np.full(n, np.nan)
    last = np.full(n, np.nan)
    runs: dict[int, tuple[array[float], list[int], list[int]]] = {}
    between: list[float] = []
    for i, record in enumerate(counted):
        arrival[i] = record.arrival_ms
        spans = record.token_spans
        if not spans:
            continue
        ends = record.pass_ends
        assert ends is not None
        entry = runs.get(id(ends))
        if entry is None:
            entry = runs[id(ends)] = (ends, [], [])
        starts, stops = entry[1], entry[2]
        total = 0
        for j in range(0, len(spans), 2):
            a, b = spans[j], spans[j + 1]
            total += b - a
            if b - a > 1:
                starts.append(a)
                stops.append(b - 1)
            if j:
                between.append(ends[a] - ends[spans[j - 1] - 1])
        count[i] = total
        a0 = spans[0]
        first[i] = ends[a0]
        last[i] = ends[spans[-1] - 1]
        if total > 1:
            second[i] = ends[a0 + 1] if spans[1] - a0 > 1 else ends[spans[2]]
    values = [np.array(between)]
    weights = [np.ones(len(between), dtype=np.int64)]
    for ends, starts, stops in runs.values():
        if not starts:
            continue
        view = np.frombuffer(ends, dtype=np.float64)
        size = len(view)
        covering = np.cumsum(np.bincount(starts, minlength=size) - np.bincount(stops, minlength=size))[:-1]
        used = covering > 0
        gaps, counts = _merge_equal(np.diff(view)[used], covering[used])
        values.append(gaps)
        weights.append(counts)
    gaps, counts = _merge_equal(np.concatenate(values), np.concatenate(weights))
    return Timelines(arrival, count, first, second, last, gaps, counts)


def _merge_equal(values: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct values (ascending) and the total weight of each: pass gaps repeat a lot, so
    the statistics then work on far fewer samples."""
    distinct, inverse = np.unique(values, return_inverse=True)
    return distinct, np.bincount(inverse, weights=weights, minlength=len(distinct)).astype(np.int64)


def _put(summary: dict[str, float], metric: str, stats: dict[str, float]) -> None:
    for name, value in stats.items():
        summary[f"{name}_{metric}"] = float(value)


def summarize(records: Sequence[RequestRecord], pools: dict[str, PoolUsage],
              wall_time_ms: float, sla: Sla | None = None, timelines: Timelines | None = None) -> dict[str, float | int]:
    """The reference's summary fields for a finished replay (`timelines`: those of the counted
    records, when the caller already has them)."""
    counted = [r for r in records if r.counted]
    tl = timelines if timelines is not None else request_timelines(counted)
    total_in = sum(r.input_length for r in counted)
    total_out = sum(r.output_length for r in counted)
    duration = max((r.terminal_ms for r in counted if r.terminal_ms is not None), default=0.0)
    ds = max(duration / 1000, 1e-9)
    prefill, decode = pools.get("prefill", PoolUsage()), pools.get("decode", PoolUsage())
    reused_max = sum(r.admissions[0].reused_tokens if len(r.admissions) == 1
                     else max(a.reused_tokens for a in r.admissions) for r in counted)
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
    _put(summary, "itl_ms", sketch_stats(tl.gaps, tl.gap_counts))
    positive = tl.gaps > 0
    _put(summary, "output_token_throughput_per_user",
         sketch_stats(1000.0 / tl.gaps[positive], tl.gap_counts[positive]))
    if sla is not None:
        summary.update(_goodput(counted, tl, sla, ds))
    return summary


def _goodput(counted: Sequence[RequestRecord], tl: Timelines, sla: Sla, ds: float) -> dict[str, float | int]:
    good = good_tokens = 0
    for i, record in enumerate(counted):
        n = int(tl.count[i])
        if n == 0:
            ok = (sla.e2e_ms is not None and sla.ttft_ms is None and record.terminal_ms is not None
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


SERVESIM_FIELDS = ("rejected_requests", "incomplete_requests")
"""Summary fields servesim adds to the reference's: with `completed_requests` they account for
every request of the input."""
SERVESIM_OPTIONAL_FIELDS = ("timed_out_requests",)
"""Summary fields servesim adds only when an extension that produces them is on."""
SERVESIM_RECORD_FIELDS = ("rejection_reason",)
"""Per-request fields servesim adds to the reference's (on rejected and failed records)."""


def request_accounting(records: Sequence[RequestRecord], input_requests: int) -> dict[str, int]:
    """How the requests of the input ended, beyond `completed_requests`: rejected (refused by an
    engine: records `rejected`, and `failed` — a disaggregated prompt the decode pool can never
    hold), and incomplete (in flight when a time cap ended the run, or never released)."""
    rejected = sum(1 for r in records if r.status in (Status.REJECTED, Status.FAILED))
    terminal = sum(1 for r in records if r.status is not None)
    return {"rejected_requests": rejected, "incomplete_requests": input_requests - terminal}

