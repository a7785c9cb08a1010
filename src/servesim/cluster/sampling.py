"""The report's time series: what each worker holds at the end of each of its passes, handed to
the `collect.sampler.TimeSeriesSampler` (which knows nothing of engines)."""

from __future__ import annotations

from servesim.cluster.base import Cluster
from servesim.collect.sampler import TimeSeries, TimeSeriesSampler
from servesim.engine.worker import Worker, WorkerPass
from servesim.scaling.fleet import REMOVED


class StateSampling:
    """A `cluster.base.PassObserver`: samples every worker's queue, batch, KV-cache use and the
    prefix hits of its admissions at each pass end."""

    def __init__(self, sampler: TimeSeriesSampler | None = None) -> None:
        self.sampler = sampler if sampler is not None else TimeSeriesSampler()

    def on_pass_end(self, label: str, worker: Worker, outcome: WorkerPass, now: float) -> None:
        waiting = running = used = total = hits = lookups = 0
        for rank in worker.ranks:
            busy = rank.num_running()
            running += busy
            waiting += rank.num_requests() - busy
            blocks = rank.pool
            used += blocks.active_blocks
            total += blocks.num_blocks
        for _rank, result in outcome.ranks:
            for request, reused in result.admitted:
                hits += reused
                lookups += request.prompt_len
        self.sampler.observe(now, label, worker.worker_id, waiting, running, used, total, hits, lookups)

    def finish(self, cluster: Cluster, end_ms: float) -> TimeSeries:
        """The series of a finished replay; a worker the scaler removed stops where it left."""
        labels = {pool.name: pool.label for pool in cluster.serving}
        stops: dict[tuple[str, int], float] = {}
        if cluster.scaler is not None:
            stops = {(labels[t.pool], t.worker_id): t.at_ms for t in cluster.scaler.record.transitions
                     if t.state == REMOVED}
        return self.sampler.finish(end_ms, stops)
