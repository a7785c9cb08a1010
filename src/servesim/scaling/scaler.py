"""Drives a scaling policy during a replay: builds its snapshots, applies its decisions, and
records what happened for the report (ticks, scaling events, worker-count timeline)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from servesim.collect.collector import RequestRecord
from servesim.engine.metrics import ForwardPassMetrics
from servesim.engine.worker import Worker, WorkerPass
from servesim.errors import RunError
from servesim.limits import MAX_WORKERS
from servesim.scaling.contract import (
    Decision,
    PoolSnapshot,
    RankSnapshot,
    ScalingPolicy,
    Snapshot,
    TrafficWindow,
)
from servesim.scaling.fleet import ACTIVE, DRAINING, STARTING, Fleet, Transition

IDLE_FPM_MS = 1000.0
"""A rank idle this long publishes an empty forward-pass record (Dynamo: once per second)."""


@dataclass(slots=True)
class PoolTraits:
    """The fixed facts of a pool a policy may want."""

    gpus_per_worker: int
    block_size: int
    max_batched_tokens: int
    max_sequences: int
    context_length: int | None
    timing: Any
    ranks_per_worker: int = 1
    kv_blocks_per_rank: int = 0


@dataclass
class _TrafficTally:
    """Traffic since the previous tick, as the cluster reports it."""

    arrivals: int = 0
    completed: int = 0
    isl: int = 0
    osl: int = 0
    ttft_sum: float = 0.0
    ttft_n: int = 0
    itl_sum: float = 0.0
    itl_n: int = 0
    hit_sum: float = 0.0
    hit_n: int = 0

    def window(self, duration_s: float) -> TrafficWindow:
        return TrafficWindow(
            duration_s=duration_s, num_req=self.arrivals,
            avg_isl=self.isl / self.completed if self.completed else 0.0,
            avg_osl=self.osl / self.completed if self.completed else 0.0,
            avg_ttft_ms=self.ttft_sum / self.ttft_n if self.ttft_n else 0.0,
            avg_itl_ms=self.itl_sum / self.itl_n if self.itl_n else 0.0,
            avg_kv_hit_rate=self.hit_sum / self.hit_n if self.hit_n else 0.0,
            num_completed=self.completed, num_kv_hit_samples=self.hit_n)


@dataclass
class ScalingRecord:
    """What the report shows about scaling."""

    ticks: list[dict[str, Any]] = field(default_factory=list)
    scaling_events: list[dict[str, Any]] = field(default_factory=list)
    timeline: list[dict[str, Any]] = field(default_factory=list)
    transitions: list[Transition] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "total_ticks": len(self.ticks),
            "ticks": self.ticks,
            "scaling_events": self.scaling_events,
            "timeline": self.timeline,
            "lifecycle": [{"at_s": t.at_ms / 1000, "pool": t.pool, "worker_id": t.worker_id,
                           "state": t.state.value, "reason": t.reason} for t in self.transitions],
            "peak_workers": {pool: max((e[pool]["active"] + e[pool]["starting"] + e[pool]["draining"]
                                        for e in self.timeline if pool in e), default=0)
                             for pool in {p for e in self.timeline for p in e if p != "at_s"}},
        }


class Scaler:
    """Ticks a `ScalingPolicy` and applies its targets to the fleets."""

    def __init__(self, policy: ScalingPolicy, fleets: dict[str, Fleet], traits: dict[str, PoolTraits],
                 disaggregated: bool) -> None:
        self.policy = policy
        self.fleets = fleets
        self.traits = traits
        self.disaggregated = disaggregated
        first = _milliseconds(policy.initial_tick_ms(), "initial_tick_ms() returned")
        self._next_tick = max(first, 0.0) if math.isfinite(first) else math.inf
        self._ordinal = 0
        self._last_tick_ms = 0.0
        self._fpm: dict[tuple[str, int, int], ForwardPassMetrics] = {}
        self.traffic = _TrafficTally()
        self.record = ScalingRecord()
        self._note_counts(0.0)

    # -- what the cluster reports (`servesim.cluster.base.ClusterHooks`) -------------------------

    def on_arrivals(self, count: int) -> None:
        self.traffic.arrivals += count

    def on_route(self, prompt_len: int, overlap_tokens: int, block_size: int) -> None:
        blocks = prompt_len // block_size
        if blocks > 0:
            self.traffic.hit_sum += min(1.0, overlap_tokens // block_size / blocks)
            self.traffic.hit_n += 1

    def on_completed(self, record: RequestRecord) -> None:
        tally = self.traffic
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

    def on_pass(self, pool: str, worker: Worker, outcome: WorkerPass) -> None:
        for rank, result in outcome.ranks:
            if result.metrics is not None:
                self._fpm[(pool, worker.worker_id, rank)] = result.metrics

    def on_transitions(self, transitions: list[Transition], now: float) -> None:
        if transitions:
            self.record.transitions.extend(transitions)
            self._note_counts(now)

    # -- ticking -------------------------------------------------------------------------------

    def next_tick(self) -> float:
        return self._next_tick

    def tick(self, now: float) -> list[Worker]:
        """Run the policy once and apply its decision; returns workers that became active."""
        snapshot = self._snapshot(now)
        decision = _checked(self.policy.on_tick(snapshot))
        transitions: list[Transition] = []
        for pool, target in (("decode", decision.target_decode), ("prefill", decision.target_prefill)):
            fleet = self.fleets.get(pool)
            if fleet is None or target is None or target == fleet.non_draining:
                continue
            before = fleet.non_draining
            reason = "scale_up" if target > before else "scale_down"
            transitions += fleet.scale_to(max(0, target), now, reason)
            self.record.scaling_events.append({"at_s": now / 1000, "component": self._component(pool),
                                               "from_count": before, "to_count": fleet.non_draining,
                                               "reason": reason})
        self._log_tick(snapshot, decision)
        self.on_transitions(transitions, now)
        self._ordinal += 1
        self._last_tick_ms = now
        nxt = decision.next_tick_ms
        self._next_tick = nxt if nxt is not None and math.isfinite(nxt) and nxt > now else math.inf
        return [self.fleets[t.pool].by_id[t.worker_id] for t in transitions if t.state == ACTIVE]

    def _component(self, pool: str) -> str:
        return pool if self.disaggregated else "agg"

    def _log_tick(self, snapshot: Snapshot, decision: Decision) -> None:
        self.record.ticks.append({
            "ordinal": snapshot.tick, "at_s": snapshot.now_ms / 1000, "reason": decision.reason,
            "target_decode": decision.target_decode, "target_prefill": decision.target_prefill,
            "workers": {p: {"active": len(s.active), "starting": len(s.starting), "draining": len(s.draining)}
                        for p, s in snapshot.pools.items()},
            "traffic": {"num_req": snapshot.traffic.num_req, "avg_ttft_ms": snapshot.traffic.avg_ttft_ms},
            "diagnostics": decision.diagnostics,
        })

    def _note_counts(self, now: float) -> None:
        entry: dict[str, Any] = {"at_s": now / 1000}
        for pool, fleet in self.fleets.items():
            entry[pool] = {s.value: len(fleet.ids(s)) for s in (ACTIVE, STARTING, DRAINING)}
        if self.record.timeline and self.record.timeline[-1]["at_s"] == entry["at_s"]:
            self.record.timeline[-1] = entry
        else:
            self.record.timeline.append(entry)

    # -- snapshots -----------------------------------------------------------------------------

    def _snapshot(self, now: float) -> Snapshot:
        pools = {name: self._pool_snapshot(name, fleet, now) for name, fleet in self.fleets.items()}
        window = self.traffic.window((now - self._last_tick_ms) / 1000)
        self.traffic = _TrafficTally()
        self._fpm.clear()
        return Snapshot(self._ordinal, now, pools, window, self.disaggregated)

    def _pool_snapshot(self, name: str, fleet: Fleet, now: float) -> PoolSnapshot:
        traits = self.traits[name]
        ranks = [self._rank_snapshot(name, fleet, fleet.by_id[w], r, now)
                 for w in fleet.ids(ACTIVE) for r in range(len(fleet.by_id[w].ranks))]
        return PoolSnapshot(role=name, active=fleet.ids(ACTIVE), starting=fleet.ids(STARTING),
                            draining=fleet.ids(DRAINING), ranks=ranks,
                            gpus_per_worker=traits.gpus_per_worker, block_size=traits.block_size,
                            max_batched_tokens=traits.max_batched_tokens,
                            max_sequences=traits.max_sequences, context_length=traits.context_length,
                            timing=traits.timing, ranks_per_worker=traits.ranks_per_worker,
                            kv_blocks_per_rank=traits.kv_blocks_per_rank)

    def _rank_snapshot(self, pool: str, fleet: Fleet, worker: Worker, rank: int, now: float) -> RankSnapshot:
        scheduler = worker.ranks[rank]
        metrics = self._fpm.get((pool, worker.worker_id, rank))
        if metrics is None and not worker.busy:
            last = worker.pass_ends[-1] if worker.pass_ends else fleet.activated_at.get(worker.worker_id, 0.0)
            if now - last >= IDLE_FPM_MS:
                metrics = ForwardPassMetrics()
        pool_blocks = scheduler.pool
        return RankSnapshot(worker.worker_id, rank, metrics, pool_blocks.active_blocks, pool_blocks.num_blocks,
                            scheduler.num_running(), scheduler.num_waiting())


def _checked(decision: object) -> Decision:
    """The policy's answer, if it keeps the contract (else a RunError saying how it does not)."""
    if not isinstance(decision, Decision):
        raise RunError(f"scaling policy: on_tick() returned {_shown(decision)}; expected a Decision")
    for name in ("target_decode", "target_prefill"):
        target = getattr(decision, name)
        if target is not None and (type(target) is not int or not 0 <= target <= MAX_WORKERS):
            raise RunError(f"scaling policy: Decision.{name} must be None or a whole number of workers "
                           f"in [0, {MAX_WORKERS}] (got {_shown(target)})")
    if decision.next_tick_ms is not None:
        _milliseconds(decision.next_tick_ms, "Decision.next_tick_ms is")
    return decision


def _milliseconds(value: object, what: str) -> float:
    """A time the policy gave: a number (inf: never), not NaN."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise RunError(f"scaling policy: {what} {_shown(value)}; expected milliseconds (a number, inf for never)")
    return float(value)


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."

