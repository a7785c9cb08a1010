"""Engine state over simulated time, kept at a bounded number of points.

Whoever drives the workers calls `TimeSeriesSampler.observe` when a worker's pass ends, with what
the worker holds then (waiting and running requests, KV blocks in use) and what the pass did
(prompt tokens admitted and how many of them the prefix cache supplied). A value observed at
`t` holds until the worker's next observation, so every series is a step function of time; the
sampler integrates it into buckets of one common width and reports each bucket's time-weighted
mean. Counters (prefix hits, lookups) are summed per bucket.

Memory and output stay bounded whatever the run's length: when an observation lands beyond
`max_points` buckets the width doubles and neighbouring buckets merge (integrals and counters
add), so a series never has more than `max_points` points and each point still covers its
bucket exactly. Observations must come in time order per series only (workers replayed one
after another are fine).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

SeriesKey = tuple[str, int]
"""(pool name, worker id)."""


class _Series:
    """One worker's buckets and its last observed values."""

    __slots__ = ("last_ms", "waiting", "running", "kv_used", "kv_total",
                 "int_waiting", "int_running", "int_kv", "covered", "hits", "lookups")

    def __init__(self, size: int) -> None:
        self.last_ms = -1.0
        self.waiting = self.running = self.kv_used = 0
        self.kv_total = 0
        self.int_waiting = [0.0] * size
        self.int_running = [0.0] * size
        self.int_kv = [0.0] * size
        self.covered = [0.0] * size
        self.hits = [0] * size
        self.lookups = [0] * size

    def lists(self) -> tuple[list, ...]:
        return (self.int_waiting, self.int_running, self.int_kv, self.covered, self.hits, self.lookups)


@dataclass
class WorkerSeries:
    """One worker's time series, one value per bucket (NaN where it was not observed)."""

    pool: str
    worker_id: int
    waiting: np.ndarray
    """Time-weighted mean of requests waiting (queued, not yet running)."""
    running: np.ndarray
    """Time-weighted mean of requests running."""
    kv_usage: np.ndarray
    """Time-weighted mean fraction of KV blocks held by requests."""
    prefix_hits: np.ndarray
    """Prompt tokens the prefix cache supplied to requests admitted in the bucket."""
    prompt_tokens: np.ndarray
    """Prompt tokens of requests admitted in the bucket."""

    @property
    def hit_rate(self) -> np.ndarray:
        """Prefix-cache hit rate of the bucket's admissions (NaN without any)."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.prompt_tokens > 0, self.prefix_hits / self.prompt_tokens, np.nan)


@dataclass
class TimeSeries:
    """The sampler's output: bucket start times and one `WorkerSeries` per worker."""

    width_ms: float
    start_ms: np.ndarray
    workers: list[WorkerSeries] = field(default_factory=list)

    def pools(self) -> list[str]:
        return list(dict.fromkeys(s.pool for s in self.workers))

    def of_pool(self, pool: str) -> list[WorkerSeries]:
        return [s for s in self.workers if s.pool == pool]


class TimeSeriesSampler:
    """Per-worker queue, batch, KV-cache use and prefix hits over simulated time."""

    def __init__(self, max_points: int = 400, initial_width_ms: float = 10.0) -> None:
        if max_points < 2 or max_points % 2:
            raise ValueError(f"max_points must be an even number >= 2 (got {max_points})")
        self.max_points = max_points
        self.width_ms = initial_width_ms
        self._limit_ms = max_points * initial_width_ms
        self._series: dict[SeriesKey, _Series] = {}

    def observe(self, now_ms: float, pool: str, worker_id: int, waiting: int, running: int,
                kv_used: int, kv_total: int, hits: int = 0, lookups: int = 0) -> None:
        """Record a worker's state at the end of a pass that ended at `now_ms`."""
        series = self._series.get((pool, worker_id))
        if series is None:
            series = self._series[(pool, worker_id)] = _Series(self.max_points)
            series.last_ms = now_ms
        if now_ms >= self._limit_ms:
            self._coarsen(now_ms)
        width = self.width_ms
        last = series.last_ms
        bucket = int(now_ms // width)
        if last < now_ms:
            if int(last // width) == bucket:  # the usual case: the interval lies in one bucket
                dt = now_ms - last
                series.int_waiting[bucket] += series.waiting * dt
                series.int_running[bucket] += series.running * dt
                series.int_kv[bucket] += series.kv_used * dt
                series.covered[bucket] += dt
                series.last_ms = now_ms
            else:
                self._integrate(series, now_ms)
        series.waiting, series.running, series.kv_used, series.kv_total = waiting, running, kv_used, kv_total
        if lookups:
            series.hits[bucket] += hits
            series.lookups[bucket] += lookups

    def _integrate(self, series: _Series, until_ms: float) -> None:
        """Add the series' current values over [last observation, `until_ms`) to its buckets."""
        width = self.width_ms
        t = series.last_ms
        bucket = int(t // width)
        end = (bucket + 1) * width
        waiting, running, kv = series.waiting, series.running, series.kv_used
        while True:
            stop = until_ms if until_ms < end else end
            dt = stop - t
            if dt > 0:
                series.int_waiting[bucket] += waiting * dt
                series.int_running[bucket] += running * dt
                series.int_kv[bucket] += kv * dt
                series.covered[bucket] += dt
                t = stop
            if t >= until_ms:
                break
            bucket += 1
            end += width
        series.last_ms = until_ms

    def _coarsen(self, now_ms: float) -> None:
        """Double the bucket width (merging neighbours) until `now_ms` falls inside the range."""
        while now_ms >= self._limit_ms:
            self.width_ms *= 2
            self._limit_ms *= 2
            half = self.max_points // 2
            for series in self._series.values():
                for values in series.lists():
                    values[:half] = [values[2 * i] + values[2 * i + 1] for i in range(half)]
                    values[half:] = [0] * half

    def finish(self, end_ms: float, stops: dict[SeriesKey, float] | None = None) -> TimeSeries:
        """Close every series at `end_ms` (or at its worker's stop time in `stops`, for workers
        removed earlier) and return the bucketed series."""
        stops = stops or {}
        if end_ms > self._limit_ms:  # the range is [0, limit]: an end at the limit fits
            self._coarsen(end_ms)
        for key, series in self._series.items():
            until = min(stops.get(key, end_ms), end_ms)
            if until > series.last_ms:
                self._integrate(series, until)
        count = min(self.max_points, int(end_ms // self.width_ms) + 1)  # through the bucket of the end
        starts = np.arange(count) * self.width_ms
        out = TimeSeries(self.width_ms, starts)
        for (pool, worker_id), series in sorted(self._series.items()):
            out.workers.append(self._series_arrays(pool, worker_id, series, count))
        return out

    @staticmethod
    def _series_arrays(pool: str, worker_id: int, series: _Series, count: int) -> WorkerSeries:
        covered = np.array(series.covered[:count])
        seen = covered > 0

        def mean(integral: list[float], scale: float = 1.0) -> np.ndarray:
            values = np.full(count, np.nan)
            values[seen] = np.array(integral[:count])[seen] / covered[seen] / scale
            return values

        return WorkerSeries(pool, worker_id, mean(series.int_waiting), mean(series.int_running),
                            mean(series.int_kv, max(series.kv_total, 1)),
                            np.array(series.hits[:count], dtype=float),
                            np.array(series.lookups[:count], dtype=float))
