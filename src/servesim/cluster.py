"""The replay loop's handler: where requests go and what a finished pass means for them.

`AggregatedCluster` places every request on one pool of workers. `DisaggregatedCluster` runs
each request's prompt on a prefill worker and its decoding on a decode worker, moving the KV
cache between them through the reference's handoff protocol. vLLM hands off *source first*:

    SubmitPrefill → (prompt done, KV held) → ReserveDestination → (reserved) → StartTransfer
        → (transfer complete) → ActivateDestination → ReleaseSource

SGLang *destination first*: the decode KV is reserved before the prompt is prefilled:

    ReserveDestination → (reserved) → SubmitPrefill → (prompt done, KV held) → StartTransfer
        → (transfer complete) → ActivateDestination → ReleaseSource

Actions are queued and driven in FIFO order after the instant's pass completions, transfers
and arrivals; activation and source release wait for their worker's pass boundary.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from servesim.build import LoweredRun, PoolSpec
from servesim.config.schema import RouterConfig
from servesim.cluster_timeouts import AbandonedRequests
from servesim.collect.collector import COMPLETED, FAILED, REJECTED, Collector, RequestRecord, Route
from servesim.engine.rank import HandoffRank
from servesim.engine.request import EngineRequest
from servesim.engine.worker import Worker, WorkerPass
from servesim.placement.base import Placement, RouteRequest, Router
from servesim.placement.round_robin import FlatRoundRobin, RoundRobin
from servesim.placement.routers import KvRouter, KvRouterSettings, LeastLoaded, RandomRouter, SessionAffinity
from servesim.runtime.replay import Pool
from servesim.scaling.contract import ScalingPolicy
from servesim.scaling.fleet import Fleet
from servesim.scaling.scaler import PoolTraits, Scaler
from servesim.traffic.driver import Arrival, Driver
from servesim.traffic.timeouts import Deadlines

INF = float("inf")


def worker_factory(spec: PoolSpec, pool_index: int, *, fast: bool) -> Callable[[int], Worker]:
    """Makes worker `w` of a pool; scheduler ids are worker-major (worker w, rank r → w·dp + r)."""
    return lambda w: Worker(w, spec.make_ranks(w, lazy_decode=fast), w * spec.dp_size, pool_index,
                            async_scheduling=spec.async_scheduling)


def make_router(config: RouterConfig, spec: PoolSpec, *, flat: bool = False, decode: bool = False) -> Router:
    """The routing policy of one pool, with every worker of the pool registered.

    In disaggregated serving round robin is one flat rotation over all ranks of the pool, and
    the KV router of the decode pool is overlap-blind (it only balances load), as in Dynamo.
    """
    ranks = spec.dp_size
    if config.policy == "kv_router":
        timing = spec.timing
        ais = config.prefill_load_model.type == "ais" and not decode
        settings = KvRouterSettings(
            block_size=spec.rank_config.block_size,
            overlap_credit=0.0 if decode else config.overlap_score_credit,
            prefill_scale=config.prefill_load_scale,
            temperature=config.temperature,
            credit_decay=config.overlap_score_credit_decay,
            request_weight=config.decode_active_request_weight,
            track_prefill=not decode,
            track_blocks=not flat or decode,
            assume_reuse=not decode,
            prefill_duration=(lambda isl, cached: timing.prefill(1, isl, cached) if isl > cached else 0.0) if ais else None,
        )
        router: Router = KvRouter(ranks, settings, config.seed)
    elif config.policy == "random":
        router = RandomRouter(ranks, config.seed)
    elif config.policy == "least_loaded":
        router = LeastLoaded(ranks, config.seed)
    else:
        router = FlatRoundRobin(ranks) if flat else RoundRobin(ranks)
    for w in range(spec.replicas):
        router.worker_added(w)
    return SessionAffinity(router) if config.session_affinity else router


def route_request(request: EngineRequest, session_id: str, block_size: int, with_keys: bool) -> RouteRequest:
    """What the router sees of a request: its prompt's shareable and private full blocks."""
    full = request.prompt_len // block_size
    shared = min(full, request.shared_blocks)
    keys = request.full_block_keys(shared, block_size)[:shared] if with_keys and shared > 0 else []
    return RouteRequest(request.rid, session_id, request.prompt_len, keys, full - shared)


def listen_for_kv_events(worker: Worker, buffers: dict[tuple[int, int], list[tuple[str, int]]]) -> None:
    """Buffer the blocks each rank of `worker` caches and evicts until its pass ends."""
    for r, rank in enumerate(worker.ranks):
        events: list[tuple[str, int]] = []
        buffers[(worker.worker_id, r)] = events
        rank.pool.listener = lambda kind, key, events=events: events.append((kind, key))


class _Cluster:
    """What both topologies share: request registration, records, terminal handling."""

    def __init__(self, run: LoweredRun, driver: Driver, collector: Collector, *, fast: bool) -> None:
        self.run = run
        self.driver = driver
        self.collector = collector
        self.fast = fast
        self._open: dict[int, tuple[Arrival, RequestRecord]] = {}
        self._kv_events: dict[tuple[int, int], list[tuple[str, int]]] = {}
        self._kv_router: Router | None = None
        self.pools: dict[str, Pool] = {}
        """The runtime's pools: the provisioned workers of each, by role ("decode" is also the
        aggregated pool)."""
        self.fleets: dict[str, Fleet] = {}
        self.scaler: Scaler | None = None
        self._placed: dict[int, tuple[Worker, int, EngineRequest]] = {}
        """Client timeouts: the worker, rank and engine request of each request in flight."""

    def _add_pool(self, name: str, spec: PoolSpec, router: Router, *, kv_events: bool = False) -> Fleet:
        """Create a pool's initial workers and the fleet that manages their lifecycle."""
        make = worker_factory(spec, len(self.pools), fast=self.fast)
        if kv_events:
            plain = make

            def make(w: int) -> Worker:
                worker = plain(w)
                listen_for_kv_events(worker, self._kv_events)
                return worker
        workers = [make(w) for w in range(spec.replicas)]
        pool = self.pools[name] = Pool(name, workers)
        fleet = self.fleets[name] = Fleet(name, workers, pool.workers, router, make, spec.startup_ms)
        return fleet

    def enable_scaling(self, policy: ScalingPolicy) -> None:
        """Let `policy` change the number of workers while the replay runs."""
        specs = {name: self.run.pool(_role(name, self.run.disaggregated)) for name in self.fleets}
        for spec in specs.values():
            spec.rank_config.record_metrics = True  # shared by every rank of the pool
        traits = {name: _traits(spec) for name, spec in specs.items()}
        self.scaler = Scaler(policy, self.fleets, traits, self.run.disaggregated)

    def _register(self, arrival: Arrival) -> tuple[RequestRecord, EngineRequest]:
        record = self.collector.on_arrival(arrival.session_id, arrival.turn_index, arrival.arrival_ms,
                                           arrival.input_length, arrival.max_output_tokens)
        self._open[record.rid] = (arrival, record)
        return record, self._engine_request(record.rid, arrival, 1)

    @staticmethod
    def _engine_request(rid: int, arrival: Arrival, block_size: int) -> EngineRequest:
        return EngineRequest(rid, arrival.prompt_runs, arrival.input_length, arrival.max_output_tokens,
                             arrival.output_base, arrival.output_ids, unique_from=arrival.unique_from,
                             block_size=block_size)

    def _record_admissions(self, outcome: WorkerPass, pool: str) -> None:
        for _rank, result in outcome.ranks:
            for request, reused in result.admitted:
                self.collector.on_admit(self._open[request.rid][1], outcome.start_ms, reused, pool)

    def _terminal(self, request: EngineRequest, worker: Worker | None, status: str, now: float) -> None:
        arrival, record = self._open.pop(request.rid)
        self._placed.pop(request.rid, None)
        self.collector.on_terminal(record, now, status, request.generated, request.token_spans,
                                   worker.pass_ends if worker is not None else None, request.reject_reason)
        self.driver.on_terminal(arrival, now, request.generated, ends_session=status == FAILED)
        if self.scaler is not None and status == COMPLETED:
            self._tally_completion(record)

    def _tally_completion(self, record: RequestRecord) -> None:
        tally = self.scaler.traffic
        tally.completed += 1
        tally.isl += record.input_length
        tally.osl += record.output_length
        times = record.token_times()
        if times and times[0] > record.arrival_ms:
            tally.ttft_sum += times[0] - record.arrival_ms
            tally.ttft_n += 1
        if len(times) > 1:
            tally.itl_sum += (times[-1] - times[0]) / (len(times) - 1)
            tally.itl_n += 1

    def _tally_route(self, request: EngineRequest, overlap_tokens: int, block_size: int) -> None:
        if self.scaler is not None:
            blocks = request.prompt_len // block_size
            if blocks > 0:
                self.scaler.traffic.hit_sum += min(1.0, overlap_tokens // block_size / blocks)
                self.scaler.traffic.hit_n += 1

    def _record(self, request: EngineRequest) -> RequestRecord:
        return self.collector.records[request.rid]

    def _flush_kv_events(self, worker: Worker, now: float) -> None:
        """Hand the blocks a worker's ranks cached and evicted during its pass to the router."""
        if not self._kv_events:
            return
        router = self._kv_router
        for r in range(len(worker.ranks)):
            events = self._kv_events[(worker.worker_id, r)]
            if events:
                router.on_kv_events((worker.worker_id, r), events[:], now)
                events.clear()

    # -- handler protocol: worker lifecycle and scaling ticks --------------------------------

    def next_timer(self) -> float:
        return min((f.next_ready() for f in self.fleets.values()), default=INF)

    def fire_timers(self, now: float) -> bool:
        """Workers whose startup ends now become active (before any other timer)."""
        ready = [t for fleet in self.fleets.values() for t in fleet.ready(now)]
        if ready and self.scaler is not None:
            self.scaler.on_transitions(ready, now)
        return bool(ready)

    def drive(self, now: float) -> Iterable[Worker]:
        """Remove draining workers that have finished their last request."""
        if self.scaler is not None:
            for fleet in self.fleets.values():
                self.scaler.on_transitions(fleet.settle_drained(now), now)
        return ()

    def next_control(self) -> float:
        return self.scaler.next_tick() if self.scaler is not None else INF

    def control(self, now: float) -> Iterable[Worker]:
        assert self.scaler is not None
        return self.scaler.tick(now)

    def in_flight(self) -> int:
        return len(self._open)

    def done(self) -> bool:
        return not self._open and self.driver.drained()


class AggregatedCluster(AbandonedRequests, _Cluster):
    """One pool of workers that both prefill and decode."""

    isolated_workers = True

    def __init__(self, run: LoweredRun, driver: Driver, collector: Collector, *, fast: bool = True) -> None:
        super().__init__(run, driver, collector, fast=fast)
        spec = run.pool("aggregated")
        self.block_size = spec.rank_config.block_size
        self.router = self._kv_router = make_router(run.config.router, spec)
        self.fleet = self._add_pool("decode", spec, self.router, kv_events=self.router.wants_kv_events)
        timeout = run.config.traffic.client_timeout_seconds
        self.deadlines = Deadlines(1000 * timeout) if timeout is not None else None
        self._abandoned: dict[Worker, list[tuple[int, EngineRequest, float]]] = {}
        """Client timeouts: (rank, request, deadline) to drop at the worker's pass boundary."""

    def release_arrivals(self, now: float) -> list[Worker]:
        arrivals = self.driver.release(now)
        if self.scaler is not None:
            self.scaler.traffic.arrivals += len(arrivals)
        return [self._place(arrival, now) for arrival in arrivals]

    @property
    def isolated(self) -> bool:
        """Whether each worker's timeline depends only on the requests routed to it, which are
        known before the run (see `servesim.runtime.isolated`)."""
        return (self.driver.fixed_arrivals and self.router.state_free and self.scaler is None
                and self.deadlines is None)

    def route_ahead(self, until: float) -> list[tuple[float, Worker, int, EngineRequest]]:
        """Register and route every request arriving by `until`: (arrival, worker, rank, request)."""
        routed = []
        lag = self.driver.frontend_ms
        for arrival in self.driver.release(until):
            seen = arrival.arrival_ms + lag
            worker, rank, request = self._route(arrival, seen)
            routed.append((seen, worker, rank, request))
        return routed

    def _place(self, arrival: Arrival, now: float) -> Worker:
        worker, rank, request = self._route(arrival, now)
        worker.enqueue(rank, request)
        return worker

    def _route(self, arrival: Arrival, now: float) -> tuple[Worker, int, EngineRequest]:
        """Register a request and choose its worker and rank."""
        record, request = self._register(arrival)
        request.shared_blocks = arrival.unique_from // self.block_size
        routed = route_request(request, arrival.session_id, self.block_size, self.router.wants_kv_events)
        placement = self.router.place(routed, now)
        self._tally_route(request, placement.overlap_tokens, self.block_size)
        worker = self.fleet.by_id[placement.worker]
        scheduler_id = worker.first_scheduler_id + placement.rank
        self.collector.on_route(record, Route("agg", placement.worker, scheduler_id, placement.rank,
                                              placement.overlap_tokens))
        if self.deadlines is not None:
            self.deadlines.add(record.rid, record.arrival_ms, now)
            self._placed[record.rid] = (worker, placement.rank, request)
        return worker, placement.rank, request

    def finish_pass(self, worker: Worker, outcome: WorkerPass, now: float, inline: bool) -> bool:
        worker.finish_pass()
        self._record_admissions(outcome, "agg")
        self._flush_kv_events(worker, now)
        if self.scaler is not None:
            self.scaler.on_pass("decode", worker, outcome)
        dropped = self._drop_abandoned(worker) if self._abandoned else set()
        router = self.router
        for end, finished in outcome.early_finishes:
            for request in finished:
                router.on_terminal(request.rid, end)
                self._terminal(request, worker, COMPLETED, end)
        for _rank, result in outcome.ranks:
            for request in result.first_tokens:
                if request.rid not in dropped:
                    router.on_first_token(request.rid, now)
            for request in result.finished:
                if request.rid not in dropped:
                    router.on_terminal(request.rid, now)
                    self._terminal(request, worker, COMPLETED, now)
            for request in result.rejected:
                if request.rid not in dropped:
                    router.on_terminal(request.rid, now)
                    self._terminal(request, worker, REJECTED, now)
        return bool(dropped)


@dataclass(slots=True)
class _Handoff:
    """One request's way through the prefill and decode pools."""

    prefill: EngineRequest
    prefill_worker: Worker | None = None
    prefill_rank: HandoffRank | None = None
    decode: EngineRequest | None = None
    decode_worker: Worker | None = None
    decode_rank: HandoffRank | None = None
    transfer_tokens: int = 0


_SUBMIT, _RESERVE, _TRANSFER, _ACTIVATE, _RELEASE = range(5)


@dataclass(frozen=True, slots=True)
class HandoffOrder:
    """Which action each step of a handoff queues next (the backends differ only here)."""

    on_arrival: int
    """Queued when the request arrives."""
    on_reserved: int
    """Queued when its destination is reserved."""
    on_held: int
    """Queued when its prompt is done and held on the prefill worker."""


SOURCE_FIRST = HandoffOrder(on_arrival=_SUBMIT, on_reserved=_TRANSFER, on_held=_RESERVE)
"""vLLM: prefill, then reserve a destination, then transfer."""
DESTINATION_FIRST = HandoffOrder(on_arrival=_RESERVE, on_reserved=_SUBMIT, on_held=_TRANSFER)
"""SGLang: reserve a destination, then prefill, then transfer."""


class DisaggregatedCluster(_Cluster):
    """Prefill and decode pools with KV transfer between them (source- or destination-first)."""

    isolated_workers = False
    """Handoffs reach decode workers at their pass boundaries: every pass must be an event."""

    def __init__(self, run: LoweredRun, driver: Driver, collector: Collector, *, fast: bool = True) -> None:
        super().__init__(run, driver, collector, fast=fast)
        prefill, decode = run.pool("prefill"), run.pool("decode")
        self.transfer = run.transfer
        self.order = DESTINATION_FIRST if decode.rank_config.backend == "sglang" else SOURCE_FIRST
        self.prefill_block_size = prefill.rank_config.block_size
        self.decode_block_size = decode.rank_config.block_size
        self.decode_blocks = decode.rank_config.num_blocks
        self.prefill_router = self._kv_router = make_router(run.config.router, prefill, flat=True)
        self.decode_router = make_router(run.config.router, decode, flat=True, decode=True)
        self.prefill_fleet = self._add_pool("prefill", prefill, self.prefill_router,
                                            kv_events=self.prefill_router.wants_kv_events)
        self.decode_fleet = self._add_pool("decode", decode, self.decode_router)
        self._actions: deque[tuple[int, _Handoff]] = deque()
        self._deferred: dict[Worker, list[tuple[int, _Handoff]]] = {}
        self._timers: list[tuple[float, int, _Handoff]] = []
        self._timer_seq = 0
        self._handoffs: dict[int, _Handoff] = {}
        self._reserving: dict[EngineRequest, _Handoff] = {}

    # -- arrivals, timers and the action queue ------------------------------------------------

    def release_arrivals(self, now: float) -> list[Worker]:
        arrivals = self.driver.release(now)
        if self.scaler is not None:
            self.scaler.traffic.arrivals += len(arrivals)
        for arrival in arrivals:
            _, request = self._register(arrival)
            request.shared_blocks = arrival.unique_from // self.prefill_block_size
            self._actions.append((self.order.on_arrival, _Handoff(request)))
        return []

    def next_timer(self) -> float:
        transfer = self._timers[0][0] if self._timers else INF
        return min(transfer, super().next_timer())

    def fire_timers(self, now: float) -> bool:
        fired = super().fire_timers(now)
        while self._timers and self._timers[0][0] == now:
            _, _, handoff = heapq.heappop(self._timers)
            self._actions.append((_ACTIVATE, handoff))
            fired = True
        return fired

    def drive(self, now: float) -> list[Worker]:
        touched: list[Worker] = []
        actions = self._actions
        while actions:
            kind, handoff = actions.popleft()
            worker = self._apply(kind, handoff, now)
            if worker is not None:
                worker.parked = False
                touched.append(worker)
        super().drive(now)
        return touched

    def _apply(self, kind: int, handoff: _Handoff, now: float) -> Worker | None:
        """Apply one action; returns the worker it gave work to, if any."""
        if kind == _SUBMIT:
            return self._submit_prefill(handoff, now)
        if kind == _RESERVE:
            return self._reserve_destination(handoff, now)
        if kind == _TRANSFER:
            self._start_transfer(handoff, now)
            return None
        if kind == _ACTIVATE:
            return self._activate(handoff, now)
        return self._release_source(handoff, now)

    def _route(self, router: Router, request: EngineRequest, block_size: int, now: float) -> Placement:
        record = self._record(request)
        return router.place(route_request(request, record.session_id, block_size, router.wants_kv_events), now)

    def _submit_prefill(self, handoff: _Handoff, now: float) -> Worker:
        placement = self._route(self.prefill_router, handoff.prefill, self.prefill_block_size, now)
        worker_id, rank = placement.worker, placement.rank
        worker = self.prefill_fleet.by_id[worker_id]
        self._tally_route(handoff.prefill, placement.overlap_tokens, self.prefill_block_size)
        record = self._record(handoff.prefill)
        self.collector.on_route(record, Route("prefill", worker_id, worker.first_scheduler_id + rank, rank,
                                              placement.overlap_tokens))
        handoff.prefill_worker, handoff.prefill_rank = worker, worker.ranks[rank]
        self._handoffs[handoff.prefill.rid] = handoff
        worker.enqueue(rank, handoff.prefill)
        return worker

    def _reserve_destination(self, handoff: _Handoff, now: float) -> Worker | None:
        arrival = self._open[handoff.prefill.rid][0]
        request = self._engine_request(handoff.prefill.rid, arrival, self.decode_block_size)
        placement = self._route(self.decode_router, request, self.decode_block_size, now)
        worker_id, rank = placement.worker, placement.rank
        worker = self.decode_fleet.by_id[worker_id]
        self.collector.on_route(self._record(handoff.prefill),
                                Route("decode", worker_id, worker.first_scheduler_id + rank, rank,
                                      placement.overlap_tokens))
        if -(-request.prompt_len // self.decode_block_size) > self.decode_blocks:  # routed, then failed
            self.decode_router.on_terminal(request.rid, now)
            self._fail(handoff, now)
            return None
        handoff.decode, handoff.decode_worker = request, worker
        handoff.decode_rank = worker.ranks[rank]
        handoff.decode_rank.pending.append(request)
        self._reserving[request] = handoff
        if not worker.busy:
            self._queue_reserved(self._try_reserve(handoff.decode_rank, now))
        return worker

    def _try_reserve(self, rank: HandoffRank, now: float) -> _Handoff | None:
        """One reservation attempt on a decode rank; the handoff it reserved, if any."""
        reserved = rank.try_reserve()
        if reserved is None:
            return None
        request, tokens = reserved
        handoff = self._reserving.pop(request)
        handoff.transfer_tokens = tokens
        self._record(request).destination_reserved_ms = now
        return handoff

    def _queue_reserved(self, handoff: _Handoff | None) -> None:
        """Queue what follows a reservation (if one was made)."""
        if handoff is not None:
            self._actions.append((self.order.on_reserved, handoff))

    def _start_transfer(self, handoff: _Handoff, now: float) -> None:
        assert self.transfer is not None
        tokens = handoff.prefill.prompt_len if self.transfer.mode == "full_prompt" else handoff.transfer_tokens
        delay = self.transfer.delay_ms(tokens)
        if delay > 0:
            self._timer_seq += 1
            heapq.heappush(self._timers, (now + delay, self._timer_seq, handoff))
        else:
            self._actions.append((_ACTIVATE, handoff))

    def _activate(self, handoff: _Handoff, now: float) -> Worker | None:
        worker, rank = handoff.decode_worker, handoff.decode_rank
        assert worker is not None and rank is not None and handoff.decode is not None
        if worker.busy:
            self._deferred.setdefault(worker, []).append((_ACTIVATE, handoff))
            return None
        self._record(handoff.prefill).destination_activated_ms = now
        rank.activate(handoff.decode)
        self._actions.append((_RELEASE, handoff))
        self._queue_reserved(self._try_reserve(rank, now))
        return worker

    def _release_source(self, handoff: _Handoff, now: float, *, record_time: bool = True) -> Worker | None:
        worker = handoff.prefill_worker
        assert worker is not None and handoff.prefill_rank is not None
        if worker.busy:
            self._deferred.setdefault(worker, []).append((_RELEASE, handoff))
            return None
        handoff.prefill_rank.release_held(handoff.prefill)
        self._flush_kv_events(worker, now)  # an SGLang prefill worker caches the prompt only now
        if record_time:
            self._record(handoff.prefill).source_released_ms = now
        return worker

    def _fail(self, handoff: _Handoff, now: float) -> None:
        """The prompt can never fit the decode pool: the request fails, its prefill KV (if it was
        prefilled already) is freed."""
        if handoff.prefill_worker is not None:
            self._release_source(handoff, now, record_time=False)
            del self._handoffs[handoff.prefill.rid]
        self._terminal(handoff.prefill, None, FAILED, now)

    # -- pass completions ---------------------------------------------------------------------

    def finish_pass(self, worker: Worker, outcome: WorkerPass, now: float, inline: bool) -> bool:
        worker.finish_pass()
        decode = worker.order[0] == 1
        reserved = self._try_reserve(worker.ranks[0], now) if decode else None
        if self.scaler is not None:
            self.scaler.on_pass("decode" if decode else "prefill", worker, outcome)
        if not inline:
            self._actions.extend(self._deferred.pop(worker, ()))
        self._record_admissions(outcome, "decode" if decode else "prefill")
        router = self.decode_router if decode else self.prefill_router
        if not decode:
            self._flush_kv_events(worker, now)
        for _rank, result in outcome.ranks:
            for request in result.first_tokens:
                router.on_first_token(request.rid, now)
            for request in result.finished:
                router.on_terminal(request.rid, now)
                self._handoffs.pop(request.rid, None)
                self._terminal(request, worker, COMPLETED, now)
            for request in result.rejected:
                router.on_terminal(request.rid, now)
                self._handoffs.pop(request.rid, None)
                self._terminal(request, worker, REJECTED, now)
            for request in result.held:
                router.on_first_token(request.rid, now)
                router.on_terminal(request.rid, now)
                self._record(request).source_held_ms = now
                self._actions.append((self.order.on_held, self._handoffs[request.rid]))
        self._queue_reserved(reserved)
        return reserved is not None


def _role(pool: str, disaggregated: bool) -> str:
    return pool if disaggregated else "aggregated"


def _traits(spec: PoolSpec) -> PoolTraits:
    config = spec.rank_config
    return PoolTraits(spec.gpus_per_worker, config.block_size, config.max_batched_tokens,
                      config.max_sequences, config.max_model_len, spec.timing, spec.dp_size,
                      config.num_blocks)
