"""The host-memory KV tier of one rank (AISimulate 0.13's G2, `kv_cache.host_offload`).

Every full shareable block a rank computes is also written to host memory (vLLM's CPU
offloading: store on compute). The host tier keeps at most `num_blocks` blocks and drops the
least recently stored or loaded ones first; under `compat: upstream-0.13` (0.13's order,
`HostTier.follow_gpu`) it drops first the blocks the rank's GPU pool has already evicted, in
the order the pool evicted them. A request whose cached prefix goes on in host memory
beyond what the GPU pool holds loads those blocks back (host to device) before it can be
admitted. The loads of one rank move their bytes one after another over one channel at the
host-to-device bandwidth; each load also waits the first-byte latency, which does not hold the
channel (loads started together overlap their latencies), as in 0.13.

Stores cost no time here: 0.13 makes a GPU block whose copy to host is still in flight wait
before it is reused, which only shows when the device-to-host bandwidth is far below a GPU's
(see docs/upstream013.md).
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from servesim.engine.cache.disk import G3Settings, G3Tier
from servesim.engine.cache.shared import SharedHost, SharedLink, Transfer


@dataclass(frozen=True)
class HostOffloadSettings:
    """The host tier of one rank: capacity in blocks, bytes per block and the load channel."""

    num_blocks: int
    block_bytes: int
    h2d_gb_per_second: float
    latency_ms: float = 0.0
    g3: G3Settings | None = None
    """The worker's disk tier behind host memory (`engine.cache.disk`), if any."""
    kvcr: bool = False
    """A peer G2 fetch (`kv_cache.kvcr`) is configured: it never pulls in predict (nothing
    authors KV hints), only its all-zero summary section is reported."""
    d2h_gb_per_second: float = 32.0
    """Device-to-host bandwidth of the rank's store channel (0 = unlimited)."""
    shared_h2d_gb_per_second: float | None = None
    """With `scope: cluster_shared`: the shared link's bandwidth (one pool for every rank of the
    role, `engine.cache.shared`); None for a host tier per rank."""
    gpu_gone_first: bool = False
    """0.13's eviction order (`compat: upstream-0.13`, rank-local tiers): the blocks the rank's
    GPU pool no longer holds go first, in the order they left it; then the least recently used."""

    def shared_ms(self, blocks: int) -> float:
        """How long `blocks` blocks take alone on the shared link (0 GB/s = unlimited)."""
        rate = self.shared_h2d_gb_per_second
        if not rate or rate <= 0:
            return 0.0
        return (blocks * self.block_bytes) / (rate * 1e9) * 1000

    def transfer_ms(self, blocks: int) -> float:
        """How long the bytes of `blocks` blocks keep the host-to-device channel busy (no time
        at a bandwidth of 0, which 0.13 reads as unlimited)."""
        if self.h2d_gb_per_second <= 0:
            return 0.0
        return (blocks * self.block_bytes) / (self.h2d_gb_per_second * 1e9) * 1000


class HostTier:
    """The blocks one rank holds in host memory, in LRU order, and its host-to-device channel."""

    def __init__(self, settings: HostOffloadSettings) -> None:
        self.settings = settings
        self._blocks: OrderedDict[int, None] = OrderedDict()
        self._channel_free_ms = 0.0
        self._store_free_ms = 0.0
        self._due: list[float] = []
        """Completion times of the loads in flight (a heap)."""
        self.g3 = G3Tier(settings.g3) if settings.g3 is not None else None
        self.stored_bytes = 0
        self.loaded_bytes = 0
        self.gpu_reused_tokens = 0
        """Prompt tokens admissions reused from the GPU pool (counted by the rank)."""
        self.host_reused_tokens = 0
        """Prompt tokens admissions reused from host memory (counted by the rank)."""
        self.store_wait_ms = 0.0
        """How long this rank's passes waited for copies to host memory (counted by the rank)."""
        self.listener: Callable[[str, int], None] | None = None
        """Told ("host_stored", key) / ("host_removed", key) as blocks enter and leave (for the
        KV router's host-tier weight; not with a shared pool, which every rank holds alike)."""
        self._link: SharedLink | None = None
        self._moving: list[Transfer] = []
        """With a shared link: this rank's loads in flight."""
        self._cold: OrderedDict[int, None] | None = None
        """With 0.13's eviction order (`follow_gpu`): the host blocks the GPU pool does not
        hold, in the order they left it (or were stored without a GPU copy); evicted before
        every other block."""
        self._on_gpu: Callable[[int], bool] | None = None

    def follow_gpu(self, on_gpu: Callable[[int], bool]) -> None:
        """Evict first the blocks the rank's GPU pool no longer holds, oldest departure first
        (0.13's order; `on_gpu` tells whether the pool holds a key). The pool reports each key's
        arrival and departure with `gpu_event`."""
        self._cold = OrderedDict()
        self._on_gpu = on_gpu

    def _pop_cold(self) -> int | None:
        """Drop and return the block host memory holds that left the GPU pool first (None
        without 0.13's eviction order, or when every host block is still in the pool)."""
        cold, blocks = self._cold, self._blocks
        while cold:
            key = cold.popitem(last=False)[0]
            if key in blocks:
                del blocks[key]
                return key
        return None

    def gpu_event(self, kind: str, key: int) -> None:
        """The GPU pool cached ("stored") or dropped ("removed") the block `key`."""
        cold = self._cold
        assert cold is not None
        if kind == "removed":
            if key in self._blocks:
                cold[key] = None
                cold.move_to_end(key)
        else:
            cold.pop(key, None)

    def share(self, pool: SharedHost) -> None:
        """Use the deployment-wide pool `pool` (its blocks and load link) instead of a tier of its own."""
        self._blocks = pool.blocks
        self._link = pool.link
        self.listener = None
        self._cold = self._on_gpu = None  # one pool for many GPU pools: plain LRU
        if self.g3 is not None:
            self.g3.listener = None

    def __len__(self) -> int:
        return len(self._blocks)

    def __contains__(self, key: int) -> bool:
        return key in self._blocks

    def store(self, keys: list[int], write_through: bool = True) -> int:
        """Write the blocks of `keys` (just computed, or read back from disk) to host memory,
        evicting the oldest; the new ones also go to disk (`write_through`, with a disk tier).
        Returns how many were new there."""
        blocks = self._blocks
        fresh = []
        for key in keys:
            if key in blocks:
                blocks.move_to_end(key)
            else:
                blocks[key] = None
                fresh.append(key)
        if write_through:
            self.stored_bytes += len(fresh) * self.settings.block_bytes
        if write_through and self.g3 is not None and fresh:
            self.g3.write(fresh)
        excess = len(blocks) - self.settings.num_blocks
        listener = self.listener
        if listener is not None:
            for key in fresh:
                listener("host_stored", key)
        for _ in range(excess):
            gone = self._pop_cold()
            if gone is None:
                gone = blocks.popitem(last=False)[0]
            if listener is not None:
                listener("host_removed", gone)
        cold, on_gpu = self._cold, self._on_gpu
        if cold is not None and on_gpu is not None:  # stored without a GPU copy (read from disk)
            for key in fresh:
                if key in blocks and not on_gpu(key):
                    cold[key] = None
        return len(fresh)

    def store_job(self, blocks: int, submit: float) -> float:
        """A pass's copies of `blocks` new blocks to host memory, submitted at its end: their
        bytes queue on the device-to-host channel, then the first-byte latency; returns when
        the job completes. With a cluster-shared pool stores cost no time (0: 0.13 delays the
        admission of a request reusing such a block instead, not built; docs/upstream013.md)."""
        if self._link is not None:
            return 0.0
        s = self.settings
        start = submit if submit > self._store_free_ms else self._store_free_ms
        if s.d2h_gb_per_second > 0:  # in seconds, then ms, as 0.13 rounds it
            self._store_free_ms = (start / 1000 + (blocks * s.block_bytes) / (s.d2h_gb_per_second * 1e9)) * 1000
        else:
            self._store_free_ms = start
        return self._store_free_ms + s.latency_ms

    def touch(self, keys: list[int]) -> None:
        """Make the blocks of `keys` host memory holds its most recently used, in order."""
        blocks = self._blocks
        for key in keys:
            if key in blocks:
                blocks.move_to_end(key)

    def hits(self, keys: list[int], start: int, stop: int) -> int:
        """How many of ``keys[start:stop]`` are resident in host memory, from `start` on."""
        blocks = self._blocks
        n = 0
        for i in range(start, stop):
            if keys[i] not in blocks:
                break
            n += 1
        return n

    def start_load(self, keys: list[int], now: float) -> Transfer:
        """Queue the load of `keys` (resident) on the channel at `now`; its `done` is when it
        completes (on a shared link: so far)."""
        blocks = self._blocks
        for key in keys:
            blocks.move_to_end(key)
        if self._link is not None:
            self.loaded_bytes += len(keys) * self.settings.block_bytes
            transfer = self._link.start(self.settings.shared_ms(len(keys)), now)
            self._moving.append(transfer)
            return transfer
        start = now if now > self._channel_free_ms else self._channel_free_ms
        self._channel_free_ms = start + self.settings.transfer_ms(len(keys))
        self.loaded_bytes += len(keys) * self.settings.block_bytes
        done = self._channel_free_ms + self.settings.latency_ms
        heapq.heappush(self._due, done)
        return Transfer(done)

    def start_restore(self, keys: list[int], now: float) -> Transfer:
        """Queue the read of `keys` from disk into host memory; its `done` is when it completes."""
        assert self.g3 is not None
        transfer = self.g3.start_read(keys, now)
        if self.g3.settings.shared:
            self._moving.append(transfer)
        else:
            heapq.heappush(self._due, transfer.done)
        return transfer

    def tally(self) -> dict[str, float]:
        """What the tier did: reused prompt tokens by tier, bytes stored and loaded, the time
        passes waited for copies, and (1) whether it is a rank of a shared pool."""
        return {"gpu_reused_tokens": self.gpu_reused_tokens, "host_reused_tokens": self.host_reused_tokens,
                "host_stored_bytes": self.stored_bytes, "host_loaded_bytes": self.loaded_bytes,
                "store_wait_ms": self.store_wait_ms, "shared_pool_ranks": int(self._link is not None)}

    def next_due(self) -> float:
        """When the next load in flight completes (inf if none)."""
        if self._moving:
            first = min(x.done for x in self._moving)
            return min(first, self._due[0]) if self._due else first
        return self._due[0] if self._due else float("inf")

    def take_due(self, now: float) -> bool:
        """Forget the loads completed by `now`; True if there were any."""
        due = self._due
        moved = False
        if self._moving:
            left = [x for x in self._moving if x.done > now]
            moved = len(left) < len(self._moving)
            self._moving = left
        if not due or due[0] > now:
            return moved
        while due and due[0] <= now:
            heapq.heappop(due)
        return True
