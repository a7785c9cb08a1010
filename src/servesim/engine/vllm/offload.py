"""A vLLM-core rank with a host-memory KV tier (upstream AISimulate 0.13's G2, `host_offload`).

Admission works as without the tier, except for requests whose cached prefix goes on in host
memory beyond the GPU pool's hits: such a request first loads those blocks (host to device, on
the rank's one load channel, `engine.cache.host.HostTier`) and is skipped while they travel —
the requests behind it are admitted in its place, as vLLM does with a request waiting for
external KV. Once loaded it is admitted at the first pass that starts at or after the load's
end, with the loaded blocks counted as cached prompt tokens; the admission records how many of
its reused tokens came from host memory. Every full shareable block a pass computes is also
stored in host memory (`VllmRank._cache_completed`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from enum import IntEnum
from typing import cast

from servesim.engine.cache.host import HostTier
from servesim.engine.cache.kv import Block, BlockPool
from servesim.engine.rank import RankConfig, RankPass
from servesim.engine.request import EngineRequest
from servesim.engine.vllm.plan import PassPlan
from servesim.engine.vllm.policy import VllmPolicy


class VllmHostOffload:
    """The host-tier part of `engine.vllm.core.VllmRank` (a mixin over its queues and pool)."""

    config: RankConfig
    policy: VllmPolicy
    pool: BlockPool
    waiting: deque[EngineRequest]
    running: dict[EngineRequest, None]
    explicit: list[EngineRequest]
    host: HostTier | None
    now: float
    _next_order: int
    _pass_stores: list[EngineRequest]
    _pass_store_blocks: int
    _cache_hits: Callable[[EngineRequest], list[Block]]
    _schedule: Callable[..., IntEnum]

    def next_load_ms(self) -> float:
        """When the next load from host memory completes (inf if none is in flight)."""
        return self.host.next_due() if self.host is not None else float("inf")

    def loads_done(self, now: float) -> bool:
        """Whether loads completed by `now` that the worker has not yet been woken for."""
        return self.host is not None and self.host.take_due(now)

    def _store_to_host(self, request: EngineRequest, first: int, stop: int) -> None:
        """Write the full prompt blocks [first, stop) just computed to host memory (0.13 stores
        every one, also those whose content no other request has: they take room there too)."""
        assert self.host is not None
        bs = self.config.block_size
        stop = min(stop, request.prompt_len // bs)
        if stop > first:
            fresh = self.host.store(request.full_block_keys(stop, bs)[first:stop])
            if fresh:
                self._pass_stores.append(request)
                self._pass_store_blocks += fresh

    def _submit_stores(self, result: RankPass) -> None:
        """At the end of the pass (now known): the pass first waits for the copies to host of the
        GPU blocks it evicted; then its new host blocks go out as one store job, whose end
        their requests remember (a block freed before that is not reused before it)."""
        ready = self.pool.evicted_due
        self.pool.evicted_due = 0.0
        if ready > self.now:
            result.ready_ms = ready
            assert self.host is not None
            self.host.store_wait_ms += ready - self.now
        if not self._pass_stores:
            return
        assert self.host is not None
        end = ((ready if ready > self.now else self.now) + result.prefill_ms) + result.decode_ms
        due = self.host.store_job(self._pass_store_blocks, end)
        for request in self._pass_stores:
            request.store_due = due
        self._pass_stores = []
        self._pass_store_blocks = 0

    def _admit_waiting_host(self, plan: PassPlan) -> None:
        """`_admit_waiting` with the host tier: FCFS while slots remain, a request loading from
        host memory skipped until its load is done (see the module)."""
        waiting, running, result, policy = self.waiting, self.running, plan.result, self.policy
        max_sequences = self.config.max_sequences
        bs = self.config.block_size
        host_tokens = result.host_tokens = []
        reserved = self._reserved_by_loads()
        i = 0
        while i < len(waiting) and len(running) < max_sequences:
            request = waiting[i]
            if policy.must_reject(request):
                del waiting[i]
                result.rejected.append(request)
                continue
            restore = request.g3_restore
            if restore is not None:
                if restore[0].done > self.now:
                    i += 1
                    continue
                assert self.host is not None
                self.host.store(restore[1], write_through=False)
                request.g3_restore = None
            if request.host_load is None:
                hits = self._cache_hits(request)
                moved, extra = self._host_hits(request, len(hits))
                if not self._fits(request, hits, reserved):
                    break
                if self._start_restore(request, len(hits) + moved):
                    i += 1
                    continue
                if extra:
                    if not self._start_load(request, hits, moved, extra):
                        break
                    reserved += self._still_needed(request)
            load = request.host_load
            loaded = 0
            if load is not None:
                transfer, gpu_hits, loaded = load
                if transfer.done > self.now:
                    i += 1
                    continue
                hits = cast(list[Block], request.lease[:gpu_hits])  # pinned at the load's start
                own = self._still_needed(request)
                if own > self.config.num_blocks - self.pool.active_blocks - (reserved - own):
                    break
                reserved -= own
            budget_before = plan.budget
            if self._schedule(plan, request, hits, loaded) != 0:  # not Scheduled.OK
                break
            del waiting[i]
            request.host_load = None
            request.order = self._next_order
            self._next_order += 1
            running[request] = None
            self.explicit.append(request)
            request.admissions += 1
            result.admitted.append((request, (len(hits) + loaded) * bs))
            host_tokens.append(loaded * bs)
            assert self.host is not None
            self.host.gpu_reused_tokens += len(hits) * bs
            self.host.host_reused_tokens += loaded * bs
            if plan.budget == 0 and budget_before == 0:
                break

    def _still_needed(self, request: EngineRequest) -> int:
        """Blocks a request that holds the blocks of its load still needs for its whole known
        sequence."""
        return max(-(-request.length // self.config.block_size) - len(request.lease), 0)

    def _reserved_by_loads(self) -> int:
        """Blocks the requests loading from host memory (or loaded, not yet admitted) will still
        need: 0.13's admission check keeps them free for those requests."""
        return sum(self._still_needed(r) for r in self.waiting if r.host_load is not None)

    def _fits(self, request: EngineRequest, hits: list[Block], reserved: int) -> bool:
        """`VllmPolicy.fits` next to the blocks `reserved` for loading requests."""
        if not reserved:
            return self.policy.fits(request, hits, self.pool, self.running)
        active_hits = self.pool.held_count(hits) if hits else 0
        needed = -(-request.length // self.config.block_size) - active_hits
        return needed <= self.config.num_blocks - self.pool.active_blocks - reserved

    def _start_load(self, request: EngineRequest, hits: list[Block], moved: int, extra: int) -> bool:
        """Pin the GPU hits, take GPU blocks for the `moved` host blocks after them and queue
        their load (0.13 reserves the destination when the load starts, after the admission
        check); False, with nothing changed, when the GPU pool cannot give those blocks
        without preempting."""
        host = self.host
        assert host is not None
        pool = self.pool
        if hits:
            pool.pin_all(hits)
        if not pool.allocate(moved):
            if hits:
                pool.release(list(hits), len(hits), keep_private=True)
            return False
        request.lease = [*hits, *([None] * moved)]
        request.own_blocks = []
        gpu_hits = len(hits)
        keys = request.full_block_keys(gpu_hits + moved, self.config.block_size)[gpu_hits:gpu_hits + moved]
        request.host_load = (host.start_load(keys, self.now), gpu_hits, extra)
        return True

    def _start_restore(self, request: EngineRequest, cached: int) -> bool:
        """With a disk tier: probe it for the full prompt blocks after the `cached` ones the GPU
        pool and host memory hold; if it has some, queue their read into host memory (True)."""
        host = self.host
        assert host is not None
        g3 = host.g3
        if g3 is None:
            return False
        bs = self.config.block_size
        full = min(request.prompt_len, request.length) // bs
        if cached >= full:
            return False
        keys = request.full_block_keys(full, bs)
        found = g3.probe(keys, cached, full)
        if not found:
            return False
        wanted = keys[cached:cached + found]
        request.g3_restore = (host.start_restore(wanted, self.now), wanted)
        return True

    def _drop_load(self, request: EngineRequest) -> None:
        """A waiting request leaves while holding the blocks of its load: they are freed."""
        if request.host_load is not None and request.lease:
            self.pool.release(request.lease, request.host_load[1])
            request.lease = []
        request.host_load = None
        request.g3_restore = None

    def _host_hits(self, request: EngineRequest, gpu_hits: int) -> tuple[int, int]:
        """(blocks to load, blocks reused): the full prompt blocks host memory holds right after
        the GPU pool's hits (the lookup makes every prompt block host memory holds its most
        recently used, as 0.13 does — GPU hits too) — 0.13 loads them all —, and those of them within the cache limit
        (the last prompt token is always computed)."""
        host = self.host
        assert host is not None
        bs = self.config.block_size
        full = min(request.prompt_len, request.length) // bs
        if not self.config.prefix_caching or not len(host):
            return 0, 0
        keys = request.full_block_keys(full, bs)
        host.touch(keys)
        if full <= gpu_hits:
            return 0, 0
        moved = host.hits(keys, gpu_hits, full)
        limit = self.policy.cache_limit(request)
        return moved, max(min(moved, limit - gpu_hits), 0)
