"""What both topologies share: request registration, the pools and their routers, the one
path that applies a finished pass, terminal requests, and the scaling hooks."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from servesim.build import LoweredRun, PoolSpec
from servesim.collect.collector import Collector, RequestRecord, Status
from servesim.engine.cache.disk import SharedDisk
from servesim.engine.cache.shared import SharedHost
from servesim.engine.rank import RankPass
from servesim.engine.request import EngineRequest
from servesim.engine.worker import Worker, WorkerPass
from servesim.placement.base import RouteRequest, Router
from servesim.placement.factory import make_router
from servesim.runtime.replay import Pool
from servesim.scaling.fleet import Fleet, Transition
from servesim.traffic.driver import Arrival, RequestDriver

if TYPE_CHECKING:  # imported when a run scales (start-up time)
    from servesim.runtime.paths import ReplayPaths
    from servesim.scaling.contract import ScalingPolicy
    from servesim.scaling.scaler import PoolTraits, Scaler

INF = float("inf")

KvEvents = list[tuple[str, int]]


class ClusterHooks(Protocol):
    """What a scaling driver hears from the cluster (`servesim.scaling.scaler.Scaler`)."""

    def on_arrivals(self, count: int) -> None:
        """`count` requests arrived."""

    def on_route(self, prompt_len: int, overlap_tokens: int, block_size: int) -> None:
        """A request was placed with `overlap_tokens` of its prompt credited as cached."""

    def on_completed(self, record: RequestRecord) -> None:
        """A request completed (not rejected or failed)."""

    def on_pass(self, pool: str, worker: Worker, outcome: WorkerPass) -> None:
        """A worker of `pool` finished a pass."""

    def on_transitions(self, transitions: list[Transition], now: float) -> None:
        """Workers changed lifecycle state."""


class NoHooks:
    """The hooks of a run without scaling."""

    def on_arrivals(self, count: int) -> None:
        pass

    def on_route(self, prompt_len: int, overlap_tokens: int, block_size: int) -> None:
        pass

    def on_completed(self, record: RequestRecord) -> None:
        pass

    def on_pass(self, pool: str, worker: Worker, outcome: WorkerPass) -> None:
        pass

    def on_transitions(self, transitions: list[Transition], now: float) -> None:
        pass


class PassObserver(Protocol):
    """What a reader of engine state hears beside the hooks: each finished pass, with its time
    (`servesim.cluster.sampling.StateSampling` feeds the report's time series)."""

    def on_pass_end(self, label: str, worker: Worker, outcome: WorkerPass, now: float) -> None:
        """A worker of the pool records call `label` finished `outcome` at `now`; its ranks
        already hold the pass's result."""


class RequestObserver(Protocol):
    """What a reader of single requests hears (a live server, `servesim.serve`): each request
    as it is placed, and its end. Its tokens are read from the engine's request at each pass end
    (`PassObserver`)."""

    def on_placed(self, arrival: Arrival, request: EngineRequest, worker: Worker | None, now: float) -> None:
        """`arrival` became the engine's `request`, placed on `worker` at `now` (None: it found
        no worker and is rejected at once)."""

    def on_ended(self, record: RequestRecord, now: float) -> None:
        """The request of `record` reached its terminal state (`record.status`) at `now`."""


@dataclass(slots=True, eq=False, repr=False)
class ServingPool:
    """One pool as the cluster drives it."""

    name: str
    """The runtime's and the scaler's name: "decode" (also the aggregated pool) or "prefill"."""
    label: str
    """What records call it: "agg", "prefill" or "decode"."""
    spec: PoolSpec
    router: Router
    fleet: Fleet


def route_request(request: EngineRequest, session_id: str, block_size: int, with_keys: bool) -> RouteRequest:
    """What the router sees of a request: its prompt's shareable and private full blocks."""
    full = request.prompt_len // block_size
    shared = min(full, request.shared_blocks)
    keys = request.full_block_keys(shared, block_size)[:shared] if with_keys and shared > 0 else []
    return RouteRequest(request.rid, session_id, request.prompt_len, keys, full - shared)


class Cluster:
    """The replay loop's handler, minus what depends on the topology."""

    def __init__(self, run: LoweredRun, driver: RequestDriver, collector: Collector, *, paths: ReplayPaths,
                 scaling: ScalingPolicy | None = None) -> None:
        self.run = run
        self.driver = driver
        self.collector = collector
        self.paths = paths
        """The fast paths the run may take (`servesim.runtime.paths`)."""
        self._scaling = scaling
        self._open: dict[int, tuple[Arrival, RequestRecord]] = {}
        self._kv_events: dict[Worker, list[KvEvents]] = {}
        """Per worker whose router wants them: the blocks each rank cached or evicted this pass."""
        self._host_workers: list[Worker] = []
        """Workers with a host KV tier: their loads from host memory are timers (`engine.vllm.offload`)."""
        self.pools: dict[str, Pool] = {}
        """The runtime's pools: the provisioned workers of each, by name."""
        self.fleets: dict[str, Fleet] = {}
        self.serving: list[ServingPool] = []
        """By pool index (a worker's `order[0]`)."""
        self.scaler: Scaler | None = None
        self.hooks: ClusterHooks = NoHooks()
        self.observers: list[PassObserver] = []
        """Who hears every finished pass (none unless a report wants time series)."""
        self.request_observers: list[RequestObserver] = []
        """Who hears every request placed and ended (none unless a live server runs)."""

    def release(self) -> None:
        """At the end of a run (its report built): break the run's reference cycles — each
        fleet's worker factory, each rank's cache tree — so its memory returns as soon as the
        caller drops it, without a full garbage collection."""
        for fleet in self.fleets.values():
            workers = {id(worker): worker for worker in [*fleet.by_id.values(), *fleet.provisioned]}
            for worker in workers.values():
                for rank in worker.ranks:
                    release = getattr(rank, "release", None)
                    if release is not None:
                        release()
            fleet.release()

    # -- construction ---------------------------------------------------------------------------

    def _add_pool(self, name: str, label: str, spec: PoolSpec, *, flat: bool = False,
                  decode: bool = False) -> ServingPool:
        """Create a pool's router, its initial workers and the fleet that manages them."""
        if self._scaling is not None:
            spec = spec.recording_metrics()
        router = make_router(self.run.router, ranks=spec.dp_size, workers=spec.replicas,
                             block_size=spec.rank_config.block_size, prefill_time=spec.timing.prefill,
                             flat=flat, decode=decode)
        index = len(self.serving)
        listen = router.wants_kv_events
        shared = _shared_host(spec)
        disk = _shared_disk(spec)

        def make(w: int) -> Worker:
            worker = Worker(w, spec.make_ranks(w, lazy_decode=self.paths.cohort(spec.role)), w * spec.dp_size, index,
                            async_scheduling=spec.async_scheduling)
            if listen:
                self._listen_for_kv_events(worker)
            if worker.host_ranks:
                self._host_workers.append(worker)
                for rank in worker.host_ranks:
                    if shared is not None:
                        rank.host.share(shared)
                    if disk is not None:
                        rank.host.g3.share(disk)
            return worker

        workers = [make(w) for w in range(spec.replicas)]
        pool = self.pools[name] = Pool(name, workers)
        fleet = self.fleets[name] = Fleet(name, workers, pool.workers, router, make, spec.startup_ms)
        serving = ServingPool(name, label, spec, router, fleet)
        self.serving.append(serving)
        return serving

    def _start_scaling(self) -> None:
        """Let the scaling policy change the number of workers while the replay runs."""
        if self._scaling is None:
            return
        from servesim.scaling.scaler import Scaler

        traits = {p.name: _traits(p.spec) for p in self.serving}
        self.scaler = Scaler(self._scaling, self.fleets, traits, self.run.disaggregated)
        self.hooks = self.scaler

    def _listen_for_kv_events(self, worker: Worker) -> None:
        """Buffer the blocks each rank of `worker` caches and evicts until its pass ends."""
        buffers: list[KvEvents] = []
        for rank in worker.ranks:
            events: KvEvents = []
            buffers.append(events)
            rank.pool.listener = lambda kind, key, events=events: events.append((kind, key))
            host = getattr(rank, "host", None)
            if host is not None:  # the host tier's and disk's blocks, for their hit weights
                host.listener = lambda kind, key, events=events: events.append((kind, key))
                if host.g3 is not None:
                    host.g3.listener = host.listener
        self._kv_events[worker] = buffers

    # -- requests -------------------------------------------------------------------------------

    def _register(self, arrival: Arrival, block_size: int = 1) -> tuple[RequestRecord, EngineRequest]:
        """Open a record of an arriving request and make its engine request (whose shareable
        blocks are counted in `block_size` blocks)."""
        record = self.collector.on_arrival(arrival.session_id, arrival.turn_index, arrival.arrival_ms,
                                           arrival.input_length, arrival.max_output_tokens,
                                           arrival.request_id, arrival.play_id, arrival.session_index)
        self._open[record.rid] = (arrival, record)
        return record, self._engine_request(record.rid, arrival, block_size)

    def _reject_unrouted(self, request: EngineRequest, pool: str, now: float) -> None:
        """A request that finds no active worker in `pool` (the fleet was scaled to zero) is
        rejected at once."""
        request.reject_reason = f"no {pool} worker was active (the fleet had been scaled to zero)"
        self._terminal(request, None, Status.REJECTED, now)

    @staticmethod
    def _engine_request(rid: int, arrival: Arrival, block_size: int) -> EngineRequest:
        return EngineRequest(rid, arrival.prompt_runs, arrival.input_length, arrival.max_output_tokens,
                             arrival.output_base, arrival.output_ids, arrival.unique_from, block_size)

    def _record(self, request: EngineRequest) -> RequestRecord:
        return self.collector.records[request.rid]

    def _terminal(self, request: EngineRequest, worker: Worker | None, status: Status, now: float) -> None:
        arrival, record = self._open.pop(request.rid)
        self.collector.on_terminal(record, now, status, request.generated, request.token_spans,
                                   worker.pass_ends if worker is not None else None, request.reject_reason)
        completed = status is Status.COMPLETED
        self.driver.on_terminal(arrival, now, request.generated, ends_session=status is Status.FAILED,
                                completed=completed)
        if completed and self.scaler is not None:
            self.hooks.on_completed(record)
        for observer in self.request_observers:
            observer.on_ended(record, now)

    # -- a finished pass ------------------------------------------------------------------------

    def finish_pass(self, worker: Worker, outcome: WorkerPass, now: float, inline: bool) -> bool:
        """Apply a finished pass (see `servesim.runtime.replay.Handler`): admissions, KV events,
        first tokens, completions, rejections and (prefill pool) held prompts."""
        worker.finish_pass()
        pool = self.serving[worker.order[0]]
        ranks = outcome.ranks
        for _rank, result in ranks:
            if result.admitted:
                self._admitted(result.admitted, outcome.start_ms, pool.label)
                if result.host_tokens is not None:
                    self._host_tiers(result)
        if self._kv_events:
            self._flush_kv_events(pool, worker, now)
        if self.scaler is not None:
            self.hooks.on_pass(pool.name, worker, outcome)
        for observer in self.observers:
            observer.on_pass_end(pool.label, worker, outcome, now)
        if not inline:
            self._at_pass_boundary(worker, outcome)
        if outcome.early_finishes:
            self.finish_early(worker, outcome, now)
        for _rank, result in ranks:
            if result.first_tokens or result.finished or result.rejected or result.held:
                self._pass_requests(pool.router, worker, result, now)
        return self._after_pass(pool, worker, now)

    def _admitted(self, admitted: list[tuple[EngineRequest, int]], start: float, label: str) -> None:
        """Record a pass's admissions (request, reused prompt tokens) at its start."""
        open_requests, admit = self._open, self.collector.on_admit
        for request, reused in admitted:
            admit(open_requests[request.rid][1], start, reused, label)

    def _host_tiers(self, result: RankPass) -> None:
        """Record how many of each admission's reused tokens came from host memory."""
        assert result.host_tokens is not None
        for (request, _), host in zip(result.admitted, result.host_tokens, strict=True):
            self._open[request.rid][1].admissions[-1].host_tokens = host

    def kv_tiers(self) -> dict[str, Any] | None:
        """With host tiers: reused prompt tokens by tier and bytes moved, summed over ranks
        (the report's KV-cache-tiers section; None without a host tier)."""
        from servesim.engine.cache.disk import merge_summaries

        if not self._host_workers:
            return None
        tiers = merge_summaries([rank.host.tally() for worker in self._host_workers for rank in worker.host_ranks])
        disk = self.g3_summary()
        if disk is not None:
            tiers["disk_read_bytes"] = disk["read"]["completed_bytes"]
            tiers["disk_written_bytes"] = disk["write"]["completed_bytes"]
        kvcr = self.kvcr_summary()
        if kvcr is not None:
            tiers["peer_pulled_bytes"] = kvcr["bytes"]
        return tiers

    def kvcr_summary(self) -> dict[str, Any] | None:
        """0.13's `kvcr` summary section when a worker has a peer G2 fetch (all zero: no pull
        happens without KV hints, see `config.kv_tiers.KvcrConfig`); None without one."""
        import copy

        from servesim.config.kv_tiers import KVCR_SUMMARY_ZERO

        if not any(rank.host.settings.kvcr for worker in self._host_workers for rank in worker.host_ranks):
            return None
        return copy.deepcopy(KVCR_SUMMARY_ZERO)

    def g3_summary(self) -> dict[str, Any] | None:
        """0.13's `g3_offload` summary section: the disk tiers' counters summed (None without one)."""
        from servesim.engine.cache.disk import merge_summaries

        parts = [rank.host.g3.summary() for worker in self._host_workers for rank in worker.host_ranks
                 if rank.host.g3 is not None]
        return merge_summaries(parts) if parts else None

    def _pass_requests(self, router: Router, worker: Worker, result: RankPass, now: float) -> None:
        """A rank's first tokens, completions, rejections and held prompts of a pass ending now."""
        for request in result.first_tokens:
            router.on_first_token(request.rid, now)
        terminal = self._terminal
        for request in result.finished:
            router.on_terminal(request.rid, now)
            terminal(request, worker, Status.COMPLETED, now)
        for request in result.rejected:
            router.on_terminal(request.rid, now)
            terminal(request, worker, Status.REJECTED, now)
        for request in result.held:
            router.on_first_token(request.rid, now)
            router.on_terminal(request.rid, now)
            self._held(request, now)

    def finish_early(self, worker: Worker, outcome: WorkerPass, until: float) -> None:
        """The completions of a run ahead's passes that end by `until` (the time cap falls in
        its last pass, so the rest of it is never applied)."""
        router = self.serving[worker.order[0]].router
        for end, finished in outcome.early_finishes:
            if end <= until:
                for request in finished:
                    router.on_terminal(request.rid, end)
                    self._terminal(request, worker, Status.COMPLETED, end)

    def _at_pass_boundary(self, worker: Worker, outcome: WorkerPass) -> None:
        """What waited for `worker`'s pass to end (not for a pass completed within its start),
        before its tokens and terminal requests are applied."""

    def _held(self, request: EngineRequest, now: float) -> None:
        """A prefill rank holds `request`'s prompt KV for the transfer."""
        raise AssertionError("only a disaggregated prefill pool holds prompts")

    def _after_pass(self, pool: ServingPool, worker: Worker, now: float) -> bool:
        """What the topology does last; True if completing the pass had an effect of its own."""
        return False

    def _flush_kv_events(self, pool: ServingPool, worker: Worker, now: float) -> None:
        """Hand the blocks a worker's ranks cached and evicted during its pass to the router."""
        buffers = self._kv_events.get(worker)
        if buffers is None:
            return
        for r, events in enumerate(buffers):
            if events:
                pool.router.on_kv_events((worker.worker_id, r), events[:], now)
                events.clear()

    # -- handler protocol: worker lifecycle and scaling ticks -----------------------------------

    def next_timer(self) -> float:
        timer = min((f.next_ready() for f in self.fleets.values()), default=INF)
        if self._host_workers:
            timer = min(timer, min(worker.next_load_ms() for worker in self._host_workers))
        return timer

    def fire_timers(self, now: float) -> bool:
        """Workers whose startup ends now become active (before any other timer)."""
        ready = [t for fleet in self.fleets.values() for t in fleet.ready(now)]
        if ready:
            self.hooks.on_transitions(ready, now)
        return bool(ready)

    def drive(self, now: float) -> Iterable[Worker]:
        """Remove draining workers that have finished their last request."""
        if self.scaler is not None:
            for fleet in self.fleets.values():
                self.scaler.on_transitions(fleet.settle_drained(now), now)
        if self._host_workers:
            return [worker for worker in self._host_workers if worker.loads_done(now)]
        return ()

    def next_control(self) -> float:
        return self.scaler.next_tick() if self.scaler is not None else INF

    def control(self, now: float) -> Iterable[Worker]:
        assert self.scaler is not None
        return self.scaler.tick(now)

    def in_flight(self) -> int:
        return len(self._open)

    def open_requests(self) -> list[int]:
        """The ids of the requests registered and not yet terminal."""
        return list(self._open)

    def done(self) -> bool:
        return not self._open and self.driver.drained()


def _traits(spec: PoolSpec) -> PoolTraits:
    from servesim.scaling.scaler import PoolTraits

    config = spec.rank_config
    return PoolTraits(spec.gpus_per_worker, config.block_size, config.max_batched_tokens,
                      config.max_sequences, config.max_model_len, spec.timing, spec.dp_size,
                      config.num_blocks)


def _shared_host(spec: PoolSpec) -> SharedHost | None:
    """The pool's one deployment-wide host pool (`host_offload.scope: cluster_shared`), if so."""
    host = spec.rank_config.host
    if host is None or host.shared_h2d_gb_per_second is None:
        return None
    return SharedHost(host.latency_ms)


def _shared_disk(spec: PoolSpec) -> SharedDisk | None:
    """The pool's one cluster-shared disk pool (`g3_offload.scope: cluster_shared`), if so."""
    host = spec.rank_config.host
    if host is None or host.g3 is None or not host.g3.shared:
        return None
    return SharedDisk(host.g3.latency_ms)
