"""Disaggregated serving: each request's prompt runs on a prefill worker and its decoding on a
decode worker, the KV cache moving between them through the reference's handoff protocol.

vLLM and TRT-LLM hand off *source first*:

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
from dataclasses import dataclass
from enum import IntEnum

from servesim.build import LoweredRun
from servesim.cluster.base import INF, Cluster, ServingPool, route_request
from servesim.collect.collector import Collector, Route, Status
from servesim.engine.interface import HandoffRank
from servesim.engine.request import EngineRequest
from servesim.engine.worker import Worker, WorkerPass
from servesim.placement.base import Placement
from servesim.runtime.paths import ReplayPaths
from servesim.scaling.contract import ScalingPolicy
from servesim.traffic.driver import RequestDriver


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


class Action(IntEnum):
    """One step of a handoff."""

    SUBMIT_PREFILL = 0
    RESERVE_DESTINATION = 1
    START_TRANSFER = 2
    ACTIVATE_DESTINATION = 3
    RELEASE_SOURCE = 4


@dataclass(frozen=True, slots=True)
class HandoffOrder:
    """Which action each step of a handoff queues next (the backends differ only here)."""

    on_arrival: Action
    """Queued when the request arrives."""
    on_reserved: Action
    """Queued when its destination is reserved."""
    on_held: Action
    """Queued when its prompt is done and held on the prefill worker."""


SOURCE_FIRST = HandoffOrder(on_arrival=Action.SUBMIT_PREFILL, on_reserved=Action.START_TRANSFER,
                            on_held=Action.RESERVE_DESTINATION)
"""vLLM: prefill, then reserve a destination, then transfer."""
DESTINATION_FIRST = HandoffOrder(on_arrival=Action.RESERVE_DESTINATION, on_reserved=Action.SUBMIT_PREFILL,
                                 on_held=Action.START_TRANSFER)
"""SGLang: reserve a destination, then prefill, then transfer."""


class DisaggregatedCluster(Cluster):
    """Prefill and decode pools with KV transfer between them (source- or destination-first)."""

    def __init__(self, run: LoweredRun, driver: RequestDriver, collector: Collector, *, paths: ReplayPaths,
                 scaling: ScalingPolicy | None = None) -> None:
        """(Handoffs reach decode workers at their pass boundaries, so every pass is an event:
        `runtime.paths` refuses running ahead and the per-worker replays.)"""
        super().__init__(run, driver, collector, paths=paths, scaling=scaling)
        self.prefill = self._add_pool("prefill", "prefill", run.pool("prefill"), flat=True)
        self.decode = self._add_pool("decode", "decode", run.pool("decode"), flat=True, decode=True)
        assert run.transfer is not None
        self.transfer = run.transfer
        decode_config = self.decode.spec.rank_config
        self.order = DESTINATION_FIRST if decode_config.backend == "sglang" else SOURCE_FIRST
        self.prefill_block_size = self.prefill.spec.rank_config.block_size
        self.decode_block_size = decode_config.block_size
        self.decode_blocks = decode_config.num_blocks
        self._actions: deque[tuple[Action, _Handoff]] = deque()
        self._deferred: dict[Worker, list[tuple[Action, _Handoff]]] = {}
        self._timers: list[tuple[float, int, _Handoff]] = []
        self._timer_seq = 0
        self._handoffs: dict[int, _Handoff] = {}
        self._reserving: dict[EngineRequest, _Handoff] = {}
        self._start_scaling()

    # -- arrivals, timers and the action queue ------------------------------------------------

    def release_arrivals(self, now: float) -> list[Worker]:
        arrivals = self.driver.release(now)
        self.hooks.on_arrivals(len(arrivals))
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
            self._actions.append((Action.ACTIVATE_DESTINATION, handoff))
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

    def _apply(self, kind: Action, handoff: _Handoff, now: float) -> Worker | None:
        """Apply one action; returns the worker it gave work to, if any."""
        if kind == Action.SUBMIT_PREFILL:
            return self._submit_prefill(handoff, now)
        if kind == Action.RESERVE_DESTINATION:
            return self._reserve_destination(handoff, now)
        if kind == Action.START_TRANSFER:
            self._start_transfer(handoff, now)
            return None
        if kind == Action.ACTIVATE_DESTINATION:
            return self._activate(handoff, now)
        return self._release_source(handoff, now)

    def _route(self, pool: ServingPool, request: EngineRequest, block_size: int, now: float) -> Placement:
        router = pool.router
        record = self._record(request)
        return router.place(route_request(request, record.session_id, block_size, router.wants_kv_events), now)

    def _submit_prefill(self, handoff: _Handoff, now: float) -> Worker | None:
        if not self.prefill.router.workers:
            self._reject_unrouted(handoff.prefill, "prefill", now)
            return None
        placement = self._route(self.prefill, handoff.prefill, self.prefill_block_size, now)
        worker_id, rank = placement.worker, placement.rank
        worker = self.prefill.fleet.by_id[worker_id]
        self.hooks.on_route(handoff.prefill.prompt_len, placement.overlap_tokens, self.prefill_block_size)
        record = self._record(handoff.prefill)
        self.collector.on_route(record, Route("prefill", worker_id, worker.first_scheduler_id + rank, rank,
                                              placement.overlap_tokens))
        handoff.prefill_worker, handoff.prefill_rank = worker, worker.ranks[rank]
        self._handoffs[handoff.prefill.rid] = handoff
        worker.enqueue(rank, handoff.prefill)
        return worker

    def _reserve_destination(self, handoff: _Handoff, now: float) -> Worker | None:
        if not self.decode.router.workers:
            handoff.prefill.reject_reason = "no decode worker was active (the fleet had been scaled to zero)"
            self._fail(handoff, now)
            return None
        arrival = self._open[handoff.prefill.rid][0]
        request = self._engine_request(handoff.prefill.rid, arrival, self.decode_block_size)
        placement = self._route(self.decode, request, self.decode_block_size, now)
        worker_id, rank = placement.worker, placement.rank
        worker = self.decode.fleet.by_id[worker_id]
        self.collector.on_route(self._record(handoff.prefill),
                                Route("decode", worker_id, worker.first_scheduler_id + rank, rank,
                                      placement.overlap_tokens))
        blocks = -(-request.prompt_len // self.decode_block_size)
        if blocks > self.decode_blocks:  # routed, then failed
            self.decode.router.on_terminal(request.rid, now)
            handoff.prefill.reject_reason = (f"its prompt of {request.prompt_len} tokens needs {blocks} KV blocks, "
                                             f"more than the {self.decode_blocks} of a decode rank's pool")
            self._fail(handoff, now)
            return None
        handoff.decode, handoff.decode_worker = request, worker
        handoff.decode_rank = worker.ranks[rank]
        handoff.decode_rank.handoff.expect(request)
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
            self._actions.append((Action.ACTIVATE_DESTINATION, handoff))

    def _activate(self, handoff: _Handoff, now: float) -> Worker | None:
        worker, rank = handoff.decode_worker, handoff.decode_rank
        assert worker is not None and rank is not None and handoff.decode is not None
        if worker.busy:
            self._deferred.setdefault(worker, []).append((Action.ACTIVATE_DESTINATION, handoff))
            return None
        self._record(handoff.prefill).destination_activated_ms = now
        rank.activate(handoff.decode)
        self._actions.append((Action.RELEASE_SOURCE, handoff))
        self._queue_reserved(self._try_reserve(rank, now))
        return worker

    def _release_source(self, handoff: _Handoff, now: float, *, record_time: bool = True) -> Worker | None:
        worker = handoff.prefill_worker
        assert worker is not None and handoff.prefill_rank is not None
        if worker.busy:
            self._deferred.setdefault(worker, []).append((Action.RELEASE_SOURCE, handoff))
            return None
        handoff.prefill_rank.release_held(handoff.prefill)
        self._flush_kv_events(self.prefill, worker, now)  # an SGLang prefill worker caches the prompt only now
        if record_time:
            self._record(handoff.prefill).source_released_ms = now
        return worker

    def _fail(self, handoff: _Handoff, now: float) -> None:
        """The prompt can never fit the decode pool: the request fails, its prefill KV (if it was
        prefilled already) is freed."""
        if handoff.prefill_worker is not None:
            self._release_source(handoff, now, record_time=False)
        self._terminal(handoff.prefill, None, Status.FAILED, now)

    # -- pass completions ---------------------------------------------------------------------

    def _at_pass_boundary(self, worker: Worker, outcome: WorkerPass) -> None:
        """Activations and source releases deferred to this worker's pass boundary are queued."""
        self._actions.extend(self._deferred.pop(worker, ()))

    def _held(self, request: EngineRequest, now: float) -> None:
        self._record(request).source_held_ms = now
        self._actions.append((self.order.on_held, self._handoffs[request.rid]))

    def _after_pass(self, pool: ServingPool, worker: Worker, now: float) -> bool:
        """A decode worker makes one reservation attempt, and what follows it is queued."""
        if pool is not self.decode:
            return False
        reserved = self._try_reserve(worker.ranks[0], now)
        self._queue_reserved(reserved)
        return reserved is not None

    def _terminal(self, request: EngineRequest, worker: Worker | None, status: Status, now: float) -> None:
        self._handoffs.pop(request.rid, None)
        super()._terminal(request, worker, status, now)
