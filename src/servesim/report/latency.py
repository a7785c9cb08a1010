"""Per-request latencies of one run, as arrays: what distributions and rates are drawn from.

A `LatencySamples` comes from a simulation (`from_tally`, the tally of its requests), from
servesim's per-request records (`from_request_rows`, e.g. a `requests.jsonl`), or from a measured
benchmark (`servesim.measured`). Reports and comparisons only ever see this shape.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from servesim.collect.collector import Status
from servesim.report.tally import RequestTally, Timelines

METRICS = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms")
"""The distributions a report draws, in order."""
SUMMARY_NAMES = {"ttft_ms": "ttft_ms", "tpot_ms": "tpot_ms", "itl_ms": "itl_ms", "e2e_ms": "e2e_latency_ms"}
"""Each distribution's name in the summary fields (`mean_<name>`, `p90_<name>`, …)."""
LABELS = {"ttft_ms": "Time to first token (ms)", "tpot_ms": "Time per output token (ms)",
          "itl_ms": "Inter-token latency (ms)", "e2e_ms": "End-to-end latency (ms)"}


@dataclass
class LatencySamples:
    """Latencies of the completed requests of one run (times in milliseconds)."""

    ttft_ms: np.ndarray
    """Per request with at least one token: first token − arrival."""
    tpot_ms: np.ndarray
    """Per request with at least two tokens: (last − first token) / (tokens − 1)."""
    e2e_ms: np.ndarray
    """Per request with at least one token: last token − arrival."""
    itl_ms: np.ndarray
    """Token gaps (distinct values when `itl_weights` counts them)."""
    itl_weights: np.ndarray | None
    """How many gaps have each `itl_ms` value (None: one each)."""
    arrival_ms: np.ndarray
    """Arrival time of every request."""
    completion_ms: np.ndarray
    """Terminal time of every completed request."""
    itl_per_request: bool = False
    """Whether `itl_ms` holds each request's mean gap (the source kept no per-token times)."""

    def values(self, metric: str) -> tuple[np.ndarray, np.ndarray | None]:
        """A distribution's samples and their weights (None: one each)."""
        if metric == "itl_ms":
            return self.itl_ms, self.itl_weights
        return getattr(self, metric), None


def from_tally(tally: RequestTally, timelines: Timelines | None = None) -> LatencySamples:
    """The samples of a finished simulation, read off the tally of its requests (`timelines`:
    the tally's, when the caller already has them)."""
    tl = timelines if timelines is not None else tally.timelines()
    one, two = tl.count >= 1, tl.count >= 2
    return LatencySamples(
        ttft_ms=np.maximum(tl.first[one] - tl.arrival[one], 0.0),
        tpot_ms=(tl.last[two] - tl.first[two]) / (tl.count[two] - 1),
        e2e_ms=tl.last[one] - tl.arrival[one],
        itl_ms=tl.gaps,
        itl_weights=tl.gap_counts,
        arrival_ms=tally.arrivals(),
        completion_ms=tl.terminal,
    )


def from_request_rows(rows: Iterable[Mapping[str, Any]]) -> LatencySamples:
    """The samples of servesim per-request records (`requests.jsonl` / `per_request` rows).

    ITL samples are each request's mean gap (the records keep no per-token times).
    """
    arrival, completion, ttft, e2e, tpot = [], [], [], [], []
    for row in rows:
        arrival.append(row["arrival_time_ms"])
        if row.get("terminal_status") != Status.COMPLETED or row.get("ttft_ms") is None:
            continue
        completion.append(row["terminal_time_ms"])
        ttft.append(row["ttft_ms"])
        e2e.append(row["e2e_latency_ms"])
        if row.get("itl_ms") is not None:
            tpot.append(row["itl_ms"])
    return LatencySamples(np.array(ttft, float), np.array(tpot, float), np.array(e2e, float),
                          np.array(tpot, float), None, np.array(arrival, float), np.array(completion, float),
                          itl_per_request=True)


def cdf_points(values: np.ndarray, weights: np.ndarray | None = None,
               max_points: int = 600) -> tuple[np.ndarray, np.ndarray]:
    """An empirical CDF as (value, cumulative fraction) points, at most ~`max_points` of them.

    Small samples give every step; larger ones are read at evenly spaced fractions plus a
    denser grid in the upper tail (p99 … p99.99), where latency targets live.
    """
    if len(values) == 0:
        return np.empty(0), np.empty(0)
    order = np.argsort(values, kind="stable")
    x = np.asarray(values, float)[order]
    w = np.ones(len(x)) if weights is None else np.asarray(weights, float)[order]
    cum = np.cumsum(w)
    fractions = cum / cum[-1]
    if len(x) <= max_points:
        return x, fractions
    tail = min(40, max_points // 4)  # the upper-tail grid's share of the points
    grid = np.unique(np.concatenate([np.linspace(0.0, 1.0, max_points - tail)[1:],
                                     1.0 - np.logspace(-2, -4, tail)]))
    index = np.minimum(np.searchsorted(fractions, grid, side="left"), len(x) - 1)
    index = np.unique(np.concatenate([[0], index]))
    return x[index], fractions[index]


def quantile(values: np.ndarray, weights: np.ndarray | None, q: float) -> float:
    """The smallest sample whose cumulative fraction reaches `q` (NaN for no samples)."""
    x, fractions = cdf_points(values, weights, max_points=len(values) or 1)
    if len(x) == 0:
        return float("nan")
    return float(x[min(int(np.searchsorted(fractions, q, side="left")), len(x) - 1)])


def rate_per_second(times_ms: np.ndarray, edges_ms: np.ndarray) -> np.ndarray:
    """Events per second in each interval [edges[i], edges[i+1])."""
    counts, _ = np.histogram(times_ms, bins=edges_ms)
    return counts / (np.diff(edges_ms) / 1000.0)
