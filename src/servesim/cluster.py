"""The replay loop's handler: where requests go and what a finished pass means for them.

`AggregatedCluster` places every request on one pool of workers. `DisaggregatedCluster` runs
each request's prompt on a prefill worker and its decoding on a decode worker, moving the KV
cache between them through the reference's handoff protocol:

    SubmitPrefill → (prompt done, KV held) → ReserveDestination → StartTransfer
        → (transfer complete) → ActivateDestination → ReleaseSource

Actions are queued and driven in FIFO order after the instant's pass completions, transfers
and arrivals; activation and source release wait for their worker's pass boundary.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

from servesim.build import LoweredRun, PoolSpec
from servesim.collect.collector import COMPLETED, FAILED, REJECTED, Collector, RequestRecord, Route
from servesim.engine.request import EngineRequest
from servesim.engine.vllm import VllmRank
from servesim.engine.worker import Worker, WorkerPass
from servesim.placement.round_robin import FlatRoundRobin, RoundRobin
from servesim.traffic.driver import Arrival, Driver

INF = float("inf")


def make_workers(spec: PoolSpec, *, fast: bool) -> list[Worker]:
    """The workers of one pool; scheduler ids are worker-major (worker w, rank r → w·dp + r)."""
    return [Worker(w, spec.make_ranks(lazy_decode=fast), w * spec.dp_size) for w in range(spec.replicas)]


class _Cluster:
    """What both topologies share: request registration, records, terminal handling."""

    def __init__(self, driver: Driver, collector: Collector) -> None:
        self.driver = driver
        self.collector = collector
        self._open: dict[int, tuple[Arrival, RequestRecord]] = {}

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
        self.collector.on_terminal(record, now, status, request.generated, request.token_spans,
                                   worker.pass_ends if worker is not None else None, request.reject_reason)
        self.driver.on_terminal(arrival, now, request.generated, ends_session=status == FAILED)

    def _record(self, request: EngineRequest) -> RequestRecord:
        return self.collector.records[request.rid]

    # -- handler protocol defaults ------------------------------------------------------------

    def next_timer(self) -> float:
        return INF

    def fire_timers(self, now: float) -> bool:
        return False

    def drive(self, now: float) -> Iterable[Worker]:
        return ()

    def in_flight(self) -> int:
        return len(self._open)

    def done(self) -> bool:
        return not self._open and self.driver.drained()


class AggregatedCluster(_Cluster):
    """One pool of workers that both prefill and decode."""

    def __init__(self, run: LoweredRun, driver: Driver, collector: Collector, *, fast: bool = True) -> None:
        super().__init__(driver, collector)
        spec = run.pool("aggregated")
        self.block_size = spec.rank_config.block_size
        self.workers = make_workers(spec, fast=fast)
        self.pools = {"decode": self.workers}
        self.placement = RoundRobin(list(range(spec.replicas)), spec.dp_size)

    def release_arrivals(self, now: float) -> list[Worker]:
        return [self._place(arrival) for arrival in self.driver.release(now)]

    def _place(self, arrival: Arrival) -> Worker:
        record, request = self._register(arrival)
        request.shared_blocks = arrival.unique_from // self.block_size
        placement = self.placement.place(request)
        worker = self.workers[placement.worker]
        scheduler_id = worker.first_scheduler_id + placement.rank
        self.collector.on_route(record, Route("agg", placement.worker, scheduler_id, placement.rank,
                                              placement.overlap_tokens))
        worker.enqueue(placement.rank, request)
        return worker

    def finish_pass(self, worker: Worker, outcome: WorkerPass, now: float, inline: bool) -> bool:
        worker.finish_pass()
        self._record_admissions(outcome, "agg")
        for _rank, result in outcome.ranks:
            for request in result.finished:
                self._terminal(request, worker, COMPLETED, now)
            for request in result.rejected:
                self._terminal(request, worker, REJECTED, now)
        return False


@dataclass(slots=True)
class _Handoff:
    """One request's way through the prefill and decode pools."""

    prefill: EngineRequest
    prefill_worker: Worker | None = None
    prefill_rank: VllmRank | None = None
    decode: EngineRequest | None = None
    decode_worker: Worker | None = None
    decode_rank: VllmRank | None = None
    transfer_tokens: int = 0


_SUBMIT, _RESERVE, _TRANSFER, _ACTIVATE, _RELEASE = range(5)


class DisaggregatedCluster(_Cluster):
    """Prefill and decode pools with KV transfer between them (vLLM source-first handoff)."""

    def __init__(self, run: LoweredRun, driver: Driver, collector: Collector, *, fast: bool = True) -> None:
        super().__init__(driver, collector)
        prefill, decode = run.pool("prefill"), run.pool("decode")
        self.transfer = run.transfer
        self.prefill_workers = make_workers(prefill, fast=fast)
        self.decode_workers = make_workers(decode, fast=fast)
        self.pools = {"prefill": self.prefill_workers, "decode": self.decode_workers}
        self.workers = self.prefill_workers + self.decode_workers
        self.prefill_block_size = prefill.rank_config.block_size
        self.decode_block_size = decode.rank_config.block_size
        self.decode_blocks = decode.rank_config.num_blocks
        self.prefill_placement = FlatRoundRobin([(w.worker_id, len(w.ranks)) for w in self.prefill_workers])
        self.decode_placement = FlatRoundRobin([(w.worker_id, len(w.ranks)) for w in self.decode_workers])
        self._actions: deque[tuple[int, _Handoff]] = deque()
        self._deferred: dict[Worker, list[tuple[int, _Handoff]]] = {}
        self._timers: list[tuple[float, int, _Handoff]] = []
        self._timer_seq = 0
        self._handoffs: dict[int, _Handoff] = {}
        self._reserving: dict[EngineRequest, _Handoff] = {}
        self._decode_set = set(self.decode_workers)

    # -- arrivals, timers and the action queue ------------------------------------------------

    def release_arrivals(self, now: float) -> list[Worker]:
        for arrival in self.driver.release(now):
            _, request = self._register(arrival)
            request.shared_blocks = arrival.unique_from // self.prefill_block_size
            self._actions.append((_SUBMIT, _Handoff(request)))
        return []

    def next_timer(self) -> float:
        return self._timers[0][0] if self._timers else INF

    def fire_timers(self, now: float) -> bool:
        fired = False
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
        return touched

    def _apply(self, kind: int, handoff: _Handoff, now: float) -> Worker | None:
        """Apply one action; returns the worker it gave work to, if any."""
        if kind == _SUBMIT:
            return self._submit_prefill(handoff)
        if kind == _RESERVE:
            return self._reserve_destination(handoff, now)
        if kind == _TRANSFER:
            self._start_transfer(handoff, now)
            return None
        if kind == _ACTIVATE:
            return self._activate(handoff, now)
        return self._release_source(handoff, now)

    def _submit_prefill(self, handoff: _Handoff) -> Worker:
        worker_id, rank = self.prefill_placement.place()
        worker = self.prefill_workers[worker_id]
        record = self._record(handoff.prefill)
        self.collector.on_route(record, Route("prefill", worker_id, worker.first_scheduler_id + rank, rank, 0))
        handoff.prefill_worker, handoff.prefill_rank = worker, worker.ranks[rank]
        self._handoffs[handoff.prefill.rid] = handoff
        worker.enqueue(rank, handoff.prefill)
        return worker

    def _reserve_destination(self, handoff: _Handoff, now: float) -> Worker | None:
        worker_id, rank = self.decode_placement.place()
        prompt = handoff.prefill.prompt_len
        if -(-prompt // self.decode_block_size) > self.decode_blocks:
            self._fail(handoff, now)
            return None
        worker = self.decode_workers[worker_id]
        record = self._record(handoff.prefill)
        self.collector.on_route(record, Route("decode", worker_id, worker.first_scheduler_id + rank, rank, 0))
        request = self._engine_request(handoff.prefill.rid, self._open[handoff.prefill.rid][0],
                                       self.decode_block_size)
        handoff.decode, handoff.decode_worker = request, worker
        handoff.decode_rank = worker.ranks[rank]
        handoff.decode_rank.pending.append(request)
        self._reserving[request] = handoff
        if not worker.busy:
            self._queue_transfer(self._try_reserve(handoff.decode_rank, now))
        return worker

    def _try_reserve(self, rank: VllmRank, now: float) -> _Handoff | None:
        """One reservation attempt on a decode rank; the handoff it reserved, if any."""
        reserved = rank.try_reserve()
        if reserved is None:
            return None
        request, tokens = reserved
        handoff = self._reserving.pop(request)
        handoff.transfer_tokens = tokens
        self._record(request).destination_reserved_ms = now
        return handoff

    def _queue_transfer(self, handoff: _Handoff | None) -> None:
        if handoff is not None:
            self._actions.append((_TRANSFER, handoff))

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
        self._queue_transfer(self._try_reserve(rank, now))
        return worker

    def _release_source(self, handoff: _Handoff, now: float, *, record_time: bool = True) -> Worker | None:
        worker = handoff.prefill_worker
        assert worker is not None and handoff.prefill_rank is not None
        if worker.busy:
            self._deferred.setdefault(worker, []).append((_RELEASE, handoff))
            return None
        handoff.prefill_rank.release_held(handoff.prefill)
        if record_time:
            self._record(handoff.prefill).source_released_ms = now
        return worker

    def _fail(self, handoff: _Handoff, now: float) -> None:
        """The prompt can never fit the decode pool: the request fails, its prefill KV is freed."""
        self._release_source(handoff, now, record_time=False)
        del self._handoffs[handoff.prefill.rid]
        self._terminal(handoff.prefill, None, FAILED, now)

    # -- pass completions ---------------------------------------------------------------------

    def finish_pass(self, worker: Worker, outcome: WorkerPass, now: float, inline: bool) -> bool:
        worker.finish_pass()
        decode = worker in self._decode_set
        reserved = self._try_reserve(worker.ranks[0], now) if decode else None
        if not inline:
            self._actions.extend(self._deferred.pop(worker, ()))
        self._record_admissions(outcome, "decode" if decode else "prefill")
        for _rank, result in outcome.ranks:
            for request in result.finished:
                self._handoffs.pop(request.rid, None)
                self._terminal(request, worker, COMPLETED, now)
            for request in result.rejected:
                self._handoffs.pop(request.rid, None)
                self._terminal(request, worker, REJECTED, now)
            for request in result.held:
                self._record(request).source_held_ms = now
                self._actions.append((_RESERVE, self._handoffs[request.rid]))
        self._queue_transfer(reserved)
        return reserved is not None
