"""The planner policy: Dynamo's planner behind servesim's `ScalingPolicy` contract."""

from __future__ import annotations

import math
from typing import Any

from servesim.scaling.contract import Decision, PoolSnapshot, Snapshot
from servesim.scaling.planner.budget import guard_pair, guard_single
from servesim.scaling.planner.capacity import Capacity, agg_capacity, decode_capacity, engine_of, prefill_capacity
from servesim.scaling.planner.load import REASON_RANK, LoadSteps, Step, classify
from servesim.scaling.planner.observed import MergedTraffic, Observations, fpm_coverage_ok
from servesim.scaling.planner.settings import PlannerSettings

_EPS_MS = 1e-6


class DynamoPlanner:
    """Dynamo's planner behind servesim's `ScalingPolicy` contract (see `servesim.scaling.planner`)."""

    def __init__(self, settings: PlannerSettings) -> None:
        self.settings = settings
        self.seen = Observations(settings.fpm_window)
        self.steps = LoadSteps(settings, self.seen)
        self._num_req, self._isl, self._osl = (settings.forecast.make() for _ in range(3))
        self._seen_traffic = False
        self._last_shape: tuple[float, float] | None = None
        self._bound = {"prefill": settings.min_prefill, "decode": settings.min_decode}
        """Throughput scaling's floor for load scaling, per pool."""
        self._last_run = {"load": 0.0, "throughput": 0.0}

    # -- contract -----------------------------------------------------------------------------

    def initial_tick_ms(self) -> float:
        """One base interval after the start."""
        return self.settings.tick_s * 1000.0

    def on_tick(self, snapshot: Snapshot) -> Decision:
        """Observe, run the decisions that are due, and answer with targets and the next tick."""
        self.seen.observe(snapshot)
        diag: dict[str, Any] = {}
        targets: dict[str, int] | None = None
        reasons: list[str] = []
        if self._due("throughput", snapshot.now_ms):
            targets, reason = self._throughput_tick(snapshot, diag)
            diag["throughput_decision_reason"] = reason
            reasons.append(reason)
        if self._due("load", snapshot.now_ms):
            load_targets, reason = self._load_tick(snapshot, diag)
            diag["load_decision_reason"] = reason
            reasons.insert(0, reason)
            targets = load_targets if load_targets is not None else targets
        diag["throughput_lower_bound"] = dict(self._bound) if self.settings.throughput_scaling else None
        return self._decision(snapshot, targets, reasons[0] if reasons else "not_due", diag)

    # -- bookkeeping --------------------------------------------------------------------------

    def _due(self, kind: str, now_ms: float) -> bool:
        """Whether the decision `kind` runs at `now_ms` (and mark it run)."""
        enabled = self.settings.load_scaling if kind == "load" else self.settings.throughput_scaling
        interval = (self.settings.load_interval_s if kind == "load" else self.settings.throughput_interval_s) * 1000.0
        if not enabled or now_ms - self._last_run[kind] < interval - _EPS_MS:
            return False
        self._last_run[kind] = now_ms
        return True

    def _decision(self, snapshot: Snapshot, targets: dict[str, int] | None, reason: str,
                  diag: dict[str, Any]) -> Decision:
        """The contract's answer: only targets that change the non-draining count."""
        changed = {}
        for name, target in (targets or {}).items():
            pool = snapshot.pools.get(name)
            if pool is not None and target != pool.non_draining:
                changed[name] = max(0, target)
        if changed and reason == "scale":
            reason = self._direction(snapshot, changed)
        return Decision(target_decode=changed.get("decode"), target_prefill=changed.get("prefill"),
                        next_tick_ms=snapshot.now_ms + self.settings.tick_s * 1000.0, reason=reason, diagnostics=diag)

    @staticmethod
    def _direction(snapshot: Snapshot, changed: dict[str, int]) -> str:
        """scale_up / scale_down for a throughput decision (scale_up if any pool grows)."""
        up = any(t > snapshot.pools[name].non_draining for name, t in changed.items())
        return "scale_up" if up else "scale_down"

    # -- load scaling -------------------------------------------------------------------------

    def _load_tick(self, snapshot: Snapshot, diag: dict[str, Any]) -> tuple[dict[str, int] | None, str]:
        """The load decision (gating, then the per-pool step, then bounds)."""
        if self.settings.disaggregated:
            return self._load_disagg(snapshot, diag)
        return self._load_agg(snapshot, diag)

    def _gate(self, snapshot: Snapshot, names: tuple[str, ...]) -> str | None:
        """Why no load decision can be made now (None: go ahead)."""
        pools = [snapshot.pools[n] for n in names if n in snapshot.pools]
        if not any(self.seen.fpm.get(n) for n in names):
            return "no_fpm_data"
        if any(pool.starting for pool in pools):
            return "scaling_in_progress"
        for name in names:
            fpms = self.seen.fpm.get(name)
            pool = snapshot.pools[name]
            if fpms and not fpm_coverage_ok(fpms, len(pool.active), engine_of(pool).ranks):
                return "worker_count_mismatch"
        return None

    def _load_agg(self, snapshot: Snapshot, diag: dict[str, Any]) -> tuple[dict[str, int] | None, str]:
        """Aggregated pool: one step from the combined KV utilisation (easy targets) or the
        TTFT and ITL predictions (sla)."""
        blocked = self._gate(snapshot, ("decode",))
        if blocked:
            return None, blocked
        pool, fpms = snapshot.pools["decode"], self.seen.fpm["decode"]
        workers = len(pool.active)
        if self.settings.target != "sla":
            sub = self.steps.easy_agg(pool, fpms, workers, diag)
            if sub.desired is None:
                return None, sub.reason
        else:
            sub = self.steps.sla_agg(pool, fpms, workers, diag)
        final, reason = self._bounded_single("decode", pool, sub, workers)
        return {"decode": final}, reason

    def _bounded_single(self, name: str, pool: PoolSnapshot, sub: Step, workers: int) -> tuple[int, str]:
        """Apply the minimum, the throughput floor and the GPU budget to one pool's step."""
        original = sub.target(workers)
        desired = max(original, self.settings.min_workers(name))
        if self.settings.throughput_scaling:
            desired = max(desired, self._bound[name])
        final, budget = guard_single(workers, desired, pool.gpus_per_worker, self.settings.min_gpus, self.settings.max_gpus,
                                     self.settings.min_workers(name))
        return final, budget or classify(final, workers, original, sub.refused)

    def _load_disagg(self, snapshot: Snapshot, diag: dict[str, Any]) -> tuple[dict[str, int] | None, str]:
        """Prefill and decode decided separately, then bounded together."""
        blocked = self._gate(snapshot, ("prefill", "decode"))
        if blocked:
            return None, blocked
        pools = ("prefill", "decode")
        subs = {name: self._disagg_step(name, snapshot.pools[name], diag) for name in pools}
        current = {n: len(snapshot.pools[n].active) for n in pools}
        original = {n: subs[n].target(current[n]) for n in pools}
        desired = {n: max(original[n], self.settings.min_workers(n)) for n in pools}
        if self.settings.throughput_scaling:
            desired = {n: max(desired[n], self._bound[n]) for n in pools}
        gpus = (snapshot.pools["prefill"].gpus_per_worker, snapshot.pools["decode"].gpus_per_worker)
        fp, fd, budget = guard_pair((current["prefill"], current["decode"]), (desired["prefill"], desired["decode"]),
                                    gpus, self.settings.min_gpus, self.settings.max_gpus,
                                    (self.settings.min_prefill, self.settings.min_decode))
        final = {"prefill": fp, "decode": fd}
        per_pool = {n: classify(final[n], current[n], original[n], subs[n].refused) for n in pools}
        diag["load_decision_reason_prefill"] = per_pool["prefill"]
        diag["load_decision_reason_decode"] = per_pool["decode"]
        reason = budget or max(per_pool.values(), key=lambda r: REASON_RANK.get(r, 0))
        if final == current and budget is None:
            quiet = ("no_change", "scale_up", "scale_down", "no_fpm_data")
            reason = next((s.reason for s in subs.values() if s.reason not in quiet), reason)
            return None, reason
        return {"prefill": fp, "decode": fd}, reason

    def _disagg_step(self, name: str, pool: PoolSnapshot, diag: dict[str, Any]) -> Step:
        """One disaggregated pool's raw step (no FPMs: no opinion)."""
        fpms = self.seen.fpm.get(name)
        if not fpms:
            return Step(None, "no_fpm_data")
        workers = len(pool.active)
        if self.settings.target == "sla":
            return self.steps.sla_prefill(pool, fpms, workers, diag) if name == "prefill" else \
                self.steps.sla_decode(pool, fpms, workers, diag)
        return self.steps.easy_prefill(pool, fpms, workers, diag) if name == "prefill" else \
            self.steps.easy_decode(pool, fpms, workers, diag)

    # -- throughput scaling -------------------------------------------------------------------

    def _throughput_tick(self, snapshot: Snapshot, diag: dict[str, Any]) -> tuple[dict[str, int] | None, str]:
        """Forecast the next interval from the merged windows and size the pools for it."""
        window = self.seen.take_traffic()
        if window.duration_s <= 0:
            return None, "no_traffic_data"
        num_req, isl, osl = self._forecast(window)
        diag.update(predicted_num_req=num_req, predicted_isl=isl, predicted_osl=osl, predicted_kv_hit_rate=self.seen.hit_rate)
        demand = num_req / window.duration_s
        if self.settings.disaggregated:
            return self._throughput_disagg(snapshot, demand, isl, osl, diag)
        return self._throughput_agg(snapshot, demand, isl, osl, diag)

    def _forecast(self, window: MergedTraffic) -> tuple[float, float, float]:
        """Feed the window to the three forecasters (carrying the last request shape over idle
        windows) and return their predictions."""
        self._num_req.observe(float(window.num_req))
        isl, osl = window.isl, window.osl
        if window.num_req > 0 and window.completed > 0:
            self._seen_traffic = True
            self._last_shape = (isl, osl)
        elif self._seen_traffic and self._last_shape is not None:
            isl, osl = self._last_shape
        self._isl.observe(isl)
        self._osl.observe(osl)
        return self._num_req.predict(), self._isl.predict(), self._osl.predict()

    def _replicas(self, name: str, demand: float, capacity: Capacity | None, current: int,
                  diag: dict[str, Any]) -> tuple[int, bool]:
        """ceil(demand / engine rps) capped to ±max_step of now, at least the minimum; the
        current count when the capacity is unknown. Also says whether the model was ready."""
        rps = capacity.rps if capacity is not None and capacity.rps > 0 else None
        ready = rps is not None
        diag[f"engine_rps_{name}"] = rps
        desired = math.ceil(demand / rps - 1e-9) if rps is not None else current
        desired = max(desired, self.settings.min_workers(name))
        desired = min(max(desired, current - self.settings.max_step), current + self.settings.max_step)
        return max(desired, self.settings.min_workers(name)), ready

    def _throughput_agg(self, snapshot: Snapshot, demand: float, isl: float, osl: float,
                        diag: dict[str, Any]) -> tuple[dict[str, int] | None, str]:
        """One aggregated pool sized for the forecast demand."""
        pool = snapshot.pools["decode"]
        workers = len(pool.active)
        capacity = agg_capacity(engine_of(pool), isl, osl, self.seen.hit_rate, self.settings.ttft_ms, self.settings.itl_ms)
        desired, ready = self._replicas("decode", demand, capacity, workers, diag)
        gpus, floor = pool.gpus_per_worker, self.settings.min_decode
        fitted, ceiling = guard_single(workers, desired, gpus, -1, self.settings.max_gpus, floor)
        if self.settings.load_scaling:
            self._bound["decode"] = fitted
            return None, "model_not_ready" if not ready else ceiling or "set_lower_bound"
        final, budget = guard_single(workers, fitted, gpus, self.settings.min_gpus, self.settings.max_gpus, floor)
        if final == workers:
            return None, "model_not_ready" if not ready else budget or ceiling or "no_change"
        return {"decode": final}, "model_not_ready" if not ready else "scale"

    def _throughput_disagg(self, snapshot: Snapshot, demand: float, isl: float, osl: float,
                           diag: dict[str, Any]) -> tuple[dict[str, int] | None, str]:
        """Prefill and decode pools sized for the forecast demand, budgeted together."""
        pp, dp = snapshot.pools["prefill"], snapshot.pools["decode"]
        current = (len(pp.active), len(dp.active))
        cap_p = prefill_capacity(engine_of(pp), isl, self.seen.hit_rate, self.settings.ttft_ms)
        cap_d = decode_capacity(engine_of(dp), isl, osl, self.settings.itl_ms)
        want_p, ready_p = self._replicas("prefill", demand, cap_p, current[0], diag)
        want_d, ready_d = self._replicas("decode", demand, cap_d, current[1], diag)
        if not (ready_p and ready_d):
            want_p, want_d = max(current[0], self.settings.min_prefill), max(current[1], self.settings.min_decode)
        gpus, floors = (pp.gpus_per_worker, dp.gpus_per_worker), (self.settings.min_prefill, self.settings.min_decode)
        fp, fd, ceiling = guard_pair(current, (want_p, want_d), gpus, -1, self.settings.max_gpus, floors)
        if self.settings.load_scaling:
            self._bound["prefill"], self._bound["decode"] = fp, fd
            return None, "set_lower_bound" if ready_p and ready_d else "model_not_ready"
        fp, fd, budget = guard_pair(current, (fp, fd), gpus, self.settings.min_gpus, self.settings.max_gpus, floors)
        if (fp, fd) == current:
            return None, "model_not_ready" if not (ready_p and ready_d) else budget or ceiling or "no_change"
        return {"prefill": fp, "decode": fd}, "scale"


