"""What the planner has observed: the latest forward-pass metrics of every active rank, the
request-shape averages they give, and the traffic windows since the last throughput decision."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from servesim.engine.metrics import ForwardPassMetrics
from servesim.engine.pass_time import TimingModel
from servesim.scaling.contract import Snapshot, TrafficWindow

FpmMap = dict[tuple[int, int], ForwardPassMetrics]
"""(worker id, DP rank) → latest forward-pass metrics."""


class MovingAverage:
    """Moving average over a window that ignores leading zeros (Dynamo's `_MovingAverage`)."""

    def __init__(self, window: int) -> None:
        self._values: deque[float] = deque(maxlen=max(1, window))
        self._started = False

    def add(self, value: float) -> None:
        """Add a value (a zero before the first non-zero one is dropped)."""
        if value == 0.0 and not self._started:
            return
        self._started = self._started or value != 0.0
        self._values.append(value)

    @property
    def value(self) -> float:
        """The mean (0 when empty)."""
        return sum(self._values) / len(self._values) if self._values else 0.0


class PoolStats:
    """Request-shape averages of one pool from the FPMs it published."""

    def __init__(self, window: int) -> None:
        self.isl = MovingAverage(window)
        """Prompt tokens per prefill request per pass."""
        self.decode_len = MovingAverage(window)
        """Sequence length per decoding request."""
        self.prefill_ms = MovingAverage(window)
        """Prefill time per pass (0 for a pass without prompt work), from the timing model."""

    def observe(self, fpm: ForwardPassMetrics, timing: TimingModel) -> None:
        """Fold one FPM in."""
        n = fpm.num_prefill_requests
        if n > 0:
            self.isl.add(fpm.sum_prefill_tokens / n)
        if fpm.num_decode_requests > 0:
            self.decode_len.add(fpm.sum_decode_kv_tokens / fpm.num_decode_requests)
        tokens = fpm.sum_prefill_tokens
        self.prefill_ms.add(timing.prefill(n, tokens // n, 0) if n > 0 and tokens >= n else 0.0)


@dataclass(slots=True)
class MergedTraffic:
    """Traffic windows merged since the throughput decision last consumed them."""

    duration_s: float = 0.0
    num_req: int = 0
    completed: int = 0
    isl_sum: float = 0.0
    osl_sum: float = 0.0

    def add(self, window: TrafficWindow) -> None:
        """Merge a window in (shape means weighted by completions)."""
        self.duration_s += window.duration_s
        self.num_req += window.num_req
        self.completed += window.num_completed
        self.isl_sum += window.avg_isl * window.num_completed
        self.osl_sum += window.avg_osl * window.num_completed

    @property
    def isl(self) -> float:
        return self.isl_sum / self.completed if self.completed else 0.0

    @property
    def osl(self) -> float:
        return self.osl_sum / self.completed if self.completed else 0.0


def fpm_coverage_ok(fpms: FpmMap, ready: int, dp: int = 1) -> bool:
    """Every ready worker published for each of its `dp` ranks (else Dynamo's
    `worker_count_mismatch`)."""
    ranks: dict[int, set[int]] = {}
    for worker, rank in fpms:
        ranks.setdefault(worker, set()).add(rank)
    return len(ranks) == ready and all(len(r) == dp for r in ranks.values())


def per_worker(fpms: FpmMap) -> list[list[ForwardPassMetrics]]:
    """FPMs grouped by worker, in worker order."""
    groups: dict[int, list[ForwardPassMetrics]] = {}
    for (worker, _rank), fpm in sorted(fpms.items()):
        groups.setdefault(worker, []).append(fpm)
    return list(groups.values())


def top(group: Iterable[ForwardPassMetrics], key: Callable[[ForwardPassMetrics], float]) -> float:
    """The largest value of `key` over a worker's ranks."""
    return max(key(f) for f in group)




class Observations:
    """Everything the planner keeps between ticks about what it saw."""

    def __init__(self, fpm_window: int) -> None:
        self.fpm: dict[str, FpmMap] = {"prefill": {}, "decode": {}}
        """Per pool: the latest FPM of every (worker, rank), kept until the worker stops being
        active."""
        self.stats = {pool: PoolStats(fpm_window) for pool in ("prefill", "decode")}
        self.traffic = MergedTraffic()
        """Windows since the throughput decision last consumed them."""
        self.hit_rate: float | None = None
        """The latest window's prefix-hit rate (None before any traffic)."""
        self.isl_seen = 0.0
        """The latest window's mean prompt length (0 before any completion)."""

    def observe(self, snapshot: Snapshot) -> None:
        """Cache the latest FPM per active (worker, rank), fold fresh FPMs into the shape
        averages, and merge the traffic window."""
        for name, pool in snapshot.pools.items():
            cache = self.fpm.setdefault(name, {})
            for rank in pool.ranks:
                if rank.metrics is not None:
                    cache[(rank.worker_id, rank.dp_rank)] = rank.metrics
                    self.stats[name].observe(rank.metrics, pool.timing)
            active = set(pool.active)
            for key in [k for k in cache if k[0] not in active]:
                del cache[key]
        window = snapshot.traffic
        self.traffic.add(window)
        if window.num_completed > 0 and window.avg_isl > 0:
            self.isl_seen = window.avg_isl
        if window.num_kv_hit_samples > 0 or window.num_req > 0:
            self.hit_rate = window.avg_kv_hit_rate

    def request_isl(self, name: str) -> float:
        """Mean prompt length of the next request: the traffic's, else the FPMs'."""
        return self.isl_seen or self.stats[name].isl.value

    def take_traffic(self) -> MergedTraffic:
        """The merged windows, starting a new merge."""
        window, self.traffic = self.traffic, MergedTraffic()
        return window
