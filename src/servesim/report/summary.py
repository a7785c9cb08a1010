"""The summary report: every field derived from the requests' tally (`report/tally.py`, docs/metrics.md).

Counted requests (C) are those admitted at least once and completed. Latencies come from each
counted request's token timestamps; ITL and per-user throughput pool every token gap.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from servesim.collect.collector import RequestRecord
from servesim.report.columns import ColumnStore
from servesim.report.outofcore import Chunks, exact_stats_chunked
from servesim.report.sla import Sla, verdicts
from servesim.report.stats import exact_stats, sketch_stats
from servesim.report.tally import RequestTally, Timelines


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class PoolUsage:
    """Provisioned time and GPUs of one worker pool."""

    worker_seconds: float = 0.0
    gpus_per_worker: int = 0


def _put(summary: dict[str, float], metric: str, stats: dict[str, float]) -> None:
    for name, value in stats.items():
        summary[f"{name}_{metric}"] = float(value)


@dataclass(slots=True, eq=False, repr=False)
class Totals:
    """The summary's sums over the counted requests (exact in any grouping: integers and a max)."""

    completed: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    duration_ms: float = 0.0
    reused_max: int = 0
    reused_first: int = 0
    good: int = 0
    good_tokens: int = 0
    with_tokens: int = 0
    within: dict[str, int] = field(default_factory=dict)
    """Per per-request SLA metric: the requests within its threshold."""
    worst: dict[str, float] = field(default_factory=dict)
    """Per per-request SLA metric: the largest value a counted request had (absent: none had one)."""

    def add(self, tl: Timelines, sla: Sla | None) -> None:
        """Fold in a chunk of the columns (in request order after the chunks before it)."""
        if not len(tl.arrival):
            return
        duration = float(tl.terminal.max())
        self.duration_ms = duration if not self.completed else float(np.max([self.duration_ms, duration]))
        self.completed += len(tl.arrival)
        self.input_tokens += int(tl.input_length.sum())
        self.output_tokens += int(tl.output_length.sum())
        self.reused_max += int(tl.reused_max.sum())
        self.reused_first += int(tl.reused_first.sum())
        self.with_tokens += int((tl.count >= 1).sum())
        if sla is not None and _goodput(sla):
            checks = _checks(tl, sla)
            ok = _good(tl, checks)
            self.good += int(ok.sum())
            self.good_tokens += int(tl.output_length[ok].sum())
            for metric, (values, within) in checks.items():
                self.within[metric] = self.within.get(metric, 0) + int(within.sum())
                judged = values[~np.isnan(values)]
                if len(judged):
                    worst = float(judged.max())
                    self.worst[metric] = max(self.worst.get(metric, worst), worst)


LATENCIES = ("ttft_ms", "ttst_ms", "tpot_ms", "e2e_latency_ms")
"""The per-request latency distributions of the summary, in report order."""


def latencies(tl: Timelines) -> dict[str, np.ndarray]:
    """Each counted request's latencies (element-wise, so the same on any chunk of the columns)."""
    one = tl.count >= 1
    two = tl.count >= 2
    return {"ttft_ms": np.maximum(tl.first[one] - tl.arrival[one], 0.0),
            "ttst_ms": tl.second[two] - tl.first[two],
            "tpot_ms": (tl.last[two] - tl.first[two]) / (tl.count[two] - 1),
            "e2e_latency_ms": tl.last[one] - tl.arrival[one]}


def summarize(requests: RequestTally | Sequence[RequestRecord], pools: dict[str, PoolUsage],
              wall_time_ms: float, sla: Sla | None = None, timelines: Timelines | None = None) -> dict[str, Any]:
    """The reference's summary fields for a finished replay (`timelines`: those of the tally,
    when the caller already has them). A tally whose columns went to disk is read a chunk at a
    time (`report/outofcore.py`); the fields are the same bit for bit."""
    tally = requests if isinstance(requests, RequestTally) else RequestTally.of(requests)
    if timelines is None:
        totals, distributions = _read(tally.chunks(), sla, tally.spooled)
        gaps, gap_counts = tally.gaps()
    else:
        totals, distributions = _read([timelines], sla, on_disk=False)
        gaps, gap_counts = timelines.gaps, timelines.gap_counts
    total_in, total_out = totals.input_tokens, totals.output_tokens
    duration = totals.duration_ms
    ds = max(duration / 1000, 1e-9)
    prefill, decode = pools.get("prefill", PoolUsage()), pools.get("decode", PoolUsage())
    processed = total_in + total_out
    summary: dict[str, Any] = {
        "num_requests": tally.num_requests,
        "completed_requests": totals.completed,
        "total_input_tokens": total_in,
        "total_output_tokens": total_out,
        "duration_ms": duration,
        "request_throughput_rps": totals.completed / ds,
        "input_throughput_tok_s": total_in / ds,
        "output_throughput_tok_s": total_out / ds,
        "total_throughput_tok_s": (total_in + total_out) / ds,
        "prefill_worker_seconds": prefill.worker_seconds,
        "decode_worker_seconds": decode.worker_seconds,
        "prefill_gpus_per_worker": prefill.gpus_per_worker,
        "decode_gpus_per_worker": decode.gpus_per_worker,
        "gpu_hours": (prefill.worker_seconds * prefill.gpus_per_worker
                      + decode.worker_seconds * decode.gpus_per_worker) / 3600,
        "prefix_cache_reused_ratio": totals.reused_max / total_in if total_in else 0.0,
        "first_admission_prefix_cache_reused_ratio": totals.reused_first / total_in if total_in else 0.0,
        "processed_tokens": processed,
        "processed_tokens_per_s": processed / wall_time_ms * 1000 if wall_time_ms > 0 else 0.0,
        "processed_output_tokens_per_s": total_out / wall_time_ms * 1000 if wall_time_ms > 0 else 0.0,
        "wall_time_ms": wall_time_ms,
    }
    for metric in LATENCIES:
        _put(summary, metric, distributions[metric])
    _put(summary, "itl_ms", sketch_stats(gaps, gap_counts))
    positive = gaps > 0
    _put(summary, "output_token_throughput_per_user", sketch_stats(1000.0 / gaps[positive], gap_counts[positive]))
    if sla is not None and _goodput(sla):
        summary["goodput_completed_requests"] = totals.good
        summary["goodput_request_throughput_rps"] = totals.good / ds
        summary["goodput_output_throughput_tok_s"] = totals.good_tokens / ds
    if sla is not None:

        samples = {"ttft_ms": totals.with_tokens, "e2e_ms": totals.with_tokens, "itl_ms": len(gaps)}
        summary["sla"] = verdicts(sla, summary, totals.within, totals.worst, samples)
    return summary


SAMPLES = np.dtype([("value", np.float64)])
"""A spooled latency's store: one column of samples."""


def _read(chunks: Iterable[Timelines], sla: Sla | None, on_disk: bool) -> tuple[Totals, dict[str, dict[str, float]]]:
    """The totals and latency statistics of the columns, read a chunk at a time. `on_disk`: the
    latencies are spooled, each to its own store, which the out-of-core statistics re-read;
    else they are joined in memory."""
    totals = Totals()
    held: dict[str, list[np.ndarray]] = {metric: [] for metric in LATENCIES}
    stores = {metric: ColumnStore(SAMPLES, 0) for metric in LATENCIES} if on_disk else {}
    try:
        for chunk in chunks:
            totals.add(chunk, sla)
            for metric, values in latencies(chunk).items():
                if on_disk:
                    stores[metric].append({"value": values})
                else:
                    held[metric].append(values)
        if on_disk:
            return totals, {metric: exact_stats_chunked(_reader(store)) for metric, store in stores.items()}
        return totals, {metric: exact_stats(parts[0] if len(parts) == 1 else np.concatenate([np.zeros(0), *parts]))
                        for metric, parts in held.items()}
    finally:
        for store in stores.values():
            store.close()


def _reader(store: ColumnStore) -> Chunks:
    """The samples of a one-column store, as a re-iterable source of chunks."""
    return lambda: (columns["value"] for columns in store.chunks())


def _goodput(sla: Sla) -> bool:
    """Whether the report has goodput fields: with any per-request threshold, or no run-level
    target (run-level targets alone leave goodput out)."""
    return bool(sla.per_request()) or not sla.run_targets


def _good(tl: Timelines, checks: dict[str, tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """Which requests are good: within every per-request bound (docs/metrics.md, 'Goodput'); one without
    tokens only under an end-to-end bound without a TTFT bound, on its terminal time."""
    ok = np.ones(len(tl.count), dtype=bool)
    for _, within in checks.values():
        ok &= within
    no_tokens = tl.count == 0
    if no_tokens.any() and "e2e_ms" not in checks:
        ok[no_tokens] = False
    return ok


def _checks(tl: Timelines, sla: Sla) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Each per-request SLA metric's values and which requests are within its bound. The values
    are NaN where a request has none (a TPOT needs two tokens, a TTFT one). A request with one
    token is within an ITL bound; one without tokens is within nothing, except under an
    end-to-end bound without a TTFT bound (judged on its terminal time). Element-wise, the same
    float operations as one request at a time."""
    n = tl.count
    ttft = np.maximum(tl.first - tl.arrival, 0.0)
    e2e = tl.last - tl.arrival
    no_tokens = n == 0
    alone = sla.e2e_ms is not None and sla.ttft_ms is None
    checks: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    if sla.ttft_ms is not None:
        checks["ttft_ms"] = (np.where(no_tokens, np.nan, ttft), ttft <= sla.ttft_ms)
    if sla.itl_ms is not None:
        with np.errstate(divide="ignore", invalid="ignore"):
            tpot = (e2e - ttft) / (n - 1)
        checks["itl_ms"] = (np.where(n >= 2, tpot, np.nan), (n == 1) | (tpot <= sla.itl_ms))
    if sla.e2e_ms is not None:
        ended = np.where(no_tokens, tl.terminal - tl.arrival, e2e)
        checks["e2e_ms"] = (ended, ended <= sla.e2e_ms)
    if no_tokens.any():
        for metric, (_, within) in checks.items():
            if not alone or metric != "e2e_ms":
                within[no_tokens] = alone
    return checks


SERVESIM_FIELDS = ("rejected_requests", "incomplete_requests")
"""Summary fields servesim adds to the reference's: with `completed_requests` they account for
every request of the input."""
SERVESIM_OPTIONAL_FIELDS = ("timed_out_requests", "sla", "trajectories")
"""Summary fields servesim adds only when an extension that produces them is on (`sla`: the
SLA verdicts, `report/sla.py`, with an SLA; `trajectories`: per-trajectory latency, model time
and wait, `report/trajectories.py`, on agentic runs)."""
SERVESIM_RECORD_FIELDS = ("rejection_reason",)
"""Per-request fields servesim adds to the reference's (on rejected and failed records)."""


def request_accounting(tally: RequestTally, input_requests: int) -> dict[str, int]:
    """How the requests of the input ended, beyond `completed_requests`: rejected (refused by an
    engine: records `rejected`, and `failed` — a disaggregated prompt the decode pool can never
    hold), and incomplete (in flight when a time cap ended the run, or never released)."""
    return {"rejected_requests": tally.rejected, "incomplete_requests": input_requests - tally.num_terminal}
