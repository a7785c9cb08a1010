"""The disk KV tier behind host memory of one worker (AISimulate 0.13's G3, `kv_cache.g3_offload`).

Write-through: every block newly written to host memory is also written to G3 (one write job per
store, whose blocks are new to G3). G3 keeps `num_blocks` blocks, least recently written or read
dropped first. When a request's prefix goes on beyond the GPU pool and host memory, the blocks
that follow are probed in G3 one by one (up to the first miss); the hits are read back into host
memory — reads move their bytes one after another at the read bandwidth, each also waiting the
first-byte latency (latencies overlap) — and the request then loads them from host memory at the
next pass, as any host hit. The counters are 0.13's `g3_offload` summary section.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from servesim.engine.cache.shared import SharedLink, Transfer


@dataclass(frozen=True)
class G3Settings:
    """G3 of one worker: capacity in blocks, bytes per block, latency and bandwidths."""

    num_blocks: int
    block_bytes: int
    latency_ms: float = 0.1
    read_gb_per_second: float = 10.0
    write_gb_per_second: float = 10.0
    shared: bool = False
    """`scope: cluster_shared`: one disk pool for the role's workers (`SharedDisk`); the rates
    above are then already the lower of the worker's and the shared link's."""

    def job_ms(self, blocks: int, gb_per_second: float) -> float:
        """How long a job of `blocks` blocks takes: the latency plus its bytes (0 GB/s = unlimited)."""
        moving = (blocks * self.block_bytes) / (gb_per_second * 1e9) * 1000 if gb_per_second > 0 else 0.0
        return self.latency_ms + moving


class _Jobs:
    """Counters of one direction's jobs."""

    __slots__ = ("jobs", "bytes", "transfer_ms")

    def __init__(self) -> None:
        self.jobs = 0
        self.bytes = 0
        self.transfer_ms = 0.0

    def add(self, blocks: int, block_bytes: int, ms: float) -> None:
        self.jobs += 1
        self.bytes += blocks * block_bytes
        self.transfer_ms += ms

    def as_dict(self) -> dict[str, Any]:
        return {"cancelled_jobs": 0, "completed_bytes": self.bytes, "completed_jobs": self.jobs,
                "submitted_jobs": self.jobs, "transfer_ms": self.transfer_ms}


class SharedDisk:
    """A cluster-shared disk pool: its blocks (with the worker tier that wrote each) and the read
    link the workers' reads share equally (as the shared host pool's loads, `engine.cache.shared`)."""

    def __init__(self, latency_ms: float) -> None:
        self.blocks: OrderedDict[int, Any] = OrderedDict()
        self.link = SharedLink(latency_ms)
        self.members: list[G3Tier] = []


class G3Tier:
    """The blocks one worker holds on disk, in LRU order, with its read channel and counters."""

    def __init__(self, settings: G3Settings) -> None:
        self.settings = settings
        self._blocks: OrderedDict[int, Any] = OrderedDict()
        self._pool: SharedDisk | None = None
        self._shared_reads: list[tuple[float, Transfer]] = []
        self.cross_worker_blocks = 0
        self.listener: Callable[[str, int], None] | None = None
        """Told ("disk_stored", key) / ("disk_removed", key) (for the KV router's disk-tier
        weight; not with a shared pool)."""
        self._read_free_ms = 0.0
        self.reads = _Jobs()
        self.writes = _Jobs()
        self.evictions = 0
        self.probes = 0
        self.hits = 0

    def share(self, pool: SharedDisk) -> None:
        """Use the cluster-shared pool `pool` instead of a disk of its own."""
        self._pool = pool
        self._blocks = pool.blocks
        self.listener = None
        pool.members.append(self)

    def __contains__(self, key: int) -> bool:
        return key in self._blocks

    def write(self, keys: list[int]) -> None:
        """Write the blocks of `keys` not yet on disk as one job, evicting the oldest."""
        blocks = self._blocks
        fresh = [key for key in keys if key not in blocks]
        if not fresh:
            return
        listener = self.listener
        for key in fresh:
            blocks[key] = self
            if listener is not None:
                listener("disk_stored", key)
        s = self.settings
        self.writes.add(len(fresh), s.block_bytes, s.job_ms(len(fresh), s.write_gb_per_second))
        while len(blocks) > s.num_blocks:
            gone = blocks.popitem(last=False)[0]
            self.evictions += 1
            if listener is not None:
                listener("disk_removed", gone)

    def probe(self, keys: list[int], start: int, stop: int) -> int:
        """How many of ``keys[start:stop]`` are on disk, from `start` on (each probed block counts,
        the first miss too)."""
        blocks = self._blocks
        n = 0
        for i in range(start, stop):
            self.probes += 1
            if keys[i] not in blocks:
                break
            n += 1
        self.hits += n
        return n

    def start_read(self, keys: list[int], now: float) -> Transfer:
        """Queue the read of `keys` (on disk) at `now`; its `done` is when it completes (on a
        shared pool's link: so far)."""
        blocks = self._blocks
        for key in keys:
            blocks.move_to_end(key)
            if blocks[key] is not self:
                self.cross_worker_blocks += 1
        s = self.settings
        if self._pool is not None:
            rate = s.read_gb_per_second
            work = (len(keys) * s.block_bytes) / (rate * 1e9) * 1000 if rate > 0 else 0.0
            transfer = self._pool.link.start(work, now)
            self._shared_reads.append((now, transfer))
            self.reads.add(len(keys), s.block_bytes, 0.0)
            return transfer
        start = now if now > self._read_free_ms else self._read_free_ms
        ms = s.job_ms(len(keys), s.read_gb_per_second)
        self._read_free_ms = start + ms - s.latency_ms
        self.reads.add(len(keys), s.block_bytes, ms)
        return Transfer(start + ms)

    def summary(self) -> dict[str, Any]:
        """0.13's `g3_offload` counters of this worker (a shared pool's resident blocks counted by
        its first member only; its reads' times as they turned out)."""
        pool = self._pool
        resident = len(self._blocks) if pool is None or pool.members[0] is self else 0
        reads = self.reads.as_dict()
        reads["transfer_ms"] += sum(transfer.done - start for start, transfer in self._shared_reads)
        return {"cross_worker_read_blocks": self.cross_worker_blocks, "evictions": self.evictions,
                "lookup_hits": self.hits, "lookup_pending": 0, "lookup_probes": self.probes, "pending_blocks": 0,
                "read": reads, "resident_blocks": resident, "write": self.writes.as_dict()}


def merge_summaries(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """The `g3_offload` section of several workers: every counter summed."""
    out: dict[str, Any] = {}
    for part in parts:
        for key, value in part.items():
            if isinstance(value, dict):
                out[key] = merge_summaries([out.get(key, {}), value])
            else:
                out[key] = out.get(key, 0) + value
    return out
