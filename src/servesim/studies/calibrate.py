"""`servesim calibrate`: fit a calibration file to per-request measurements of a real deployment.

The measured runs (one or several: other loads, other prompt lengths) are each replayed (their
send times and token counts as a Mooncake trace, each prompt private) on the config's
deployment, and four parameters are fitted to all of them at once:

1. **KV capacity** — only where the data shows it: when, for most of a run, requests waited
   while fewer than ``max_sequences`` ran per rank and the KV in use at those times stayed on
   a plateau (its 10th percentile ≥ 75 % of its 90th), the KV pool was the limit; its size is
   the median KV in use at those times (each running request holding its prompt plus the
   tokens it has produced, growing linearly from its first to its last token), per rank (the
   median over the runs that show it);
2. **decode scale** ``b`` — mean TPOT is nearly proportional to decode pass times, less the
   per-pass DP synchronisation ``s`` (`timing.dp_sync_ms`), which the scale does not touch:
   ``b`` is multiplied by (measured − s) / (simulated − s) mean TPOT until they agree;
3. **prefill scale** ``a`` and **front-end latency** ``f`` — together, when the data can tell
   them apart (`servesim.studies.separate`): the requests are grouped by run and by prompt
   length (terciles), and ``a`` is found by a golden-section search on a log scale that
   minimises the groups' squared relative TTFT error, ``f`` (≥ 0) being for each trial ``a``
   the least-squares offset (a front-end delay shifts every TTFT by itself under replayed
   timestamps). When all groups answer a change of ``a`` like a change of ``f`` (one load,
   one prompt length), the pair trades off: ``f`` is not fitted (the deployment's default
   front-end latency stays), a warning says so, and ``a`` alone is found by bisection so that
   the simulated mean TTFT meets the measured one.

Steps 2-3 are repeated (the search window halving each round) until a round moves neither
scale by 0.5 %, at most 8 times. Scales stay within 0.2-5, so a run whose TTFT does not react
to prefill cost keeps ``a`` near 1. The file records every setting of the fit (`fitted_with`:
the mode, timing type, scheduling, backend version; `servesim.config.calibration`).
"""

from __future__ import annotations

import json
import math
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from servesim.config import SimConfig
from servesim.config.schema import DefaultTiming, RooflineTiming
from servesim.errors import ConfigError
from servesim.build.apply import async_scheduling, dp_sync_ms
from servesim.perf.calibration import Calibration
from servesim.build.resolve import resolve_backend_version, resolved_mixed_pass
from servesim.studies.separate import Separability, group_labels, separability
from servesim.measured import Measured

SCALE_BOUNDS = (0.2, 5.0)
ROUNDS = 8
TOLERANCE = 0.005
METRICS = ("ttft", "tpot", "e2e")
@dataclass
class CalibrationResult:
    """The fitted calibration, the mean errors before and after (signed %) and what the data
    could separate."""

    calibration: Calibration
    before: dict[str, float]
    after: dict[str, float]
    simulations: int
    separability: Separability | None = None
    notes: list[str] = field(default_factory=list)

    def describe(self) -> str:
        c = self.calibration
        kv = f"{c.kv_tokens} tokens per rank" if c.kv_tokens is not None else "not shown by the data"
        fe = f"{c.frontend_ms:.1f} ms" if c.frontend_ms is not None else "not fitted (the deployment's default)"
        lines = [f"prefill scale {c.prefill_scale:.3f}, decode scale {c.decode_scale:.3f}, "
                 f"front-end latency {fe}, KV capacity {kv} ({self.simulations} simulations)"]
        lines += self.notes
        lines.append("mean error vs measured   TTFT      TPOT      E2E")
        for name, errors in (("uncalibrated", self.before), ("calibrated", self.after)):
            lines.append(f"  {name:<22}" + "".join(f"{errors[m]:+8.1f} %" for m in METRICS))
        return "\n".join(lines) + "\n"


class _Replay:
    """Simulations of the measured deployment, one per measured run, with trial calibrations."""

    def __init__(self, config: SimConfig, runs: Sequence[Measured], keep_traffic: bool, folder: Path,
                 fits: Sequence[np.ndarray | None]) -> None:
        self.folder = folder
        self.runs = list(runs)
        self.fits = list(fits)
        self.role, worker = _the_role(config)
        self.mode = getattr(worker.timing, "mixed_pass", None) or resolved_mixed_pass(config.engine.backend,
                                                                                     config.compat)
        base = config.model_dump(mode="json", exclude_unset=True)
        base.pop("compat", None)  # the trials set the mode explicitly and add calibrations
        timing = base["engine"]["workers"][self.role].setdefault("timing", {"type": "default"})
        timing.pop("calibration", None)
        timing.pop("frontend_ms", None)
        timing["mixed_pass"] = self.mode
        self.bases = []
        for index, measured in enumerate(self.runs):
            run_base = json.loads(json.dumps(base))
            if not keep_traffic:
                trace = folder / f"measured-{index}.mooncake.jsonl"
                trace.write_text("".join(json.dumps(row) + "\n" for row in measured.mooncake_rows()))
                run_base["traffic"] = {"source": {"type": "trace", "format": "mooncake", "paths": [str(trace)]},
                                       "load": {"type": "trace_timestamps"}}
            self.bases.append(run_base)
        self.real = self._select([m.latencies() for m in self.runs])
        self.groups = group_labels([m.input_tokens for m in self.runs], self.fits)
        """Run × prompt-length tercile of every selected request (`servesim.studies.separate`)."""
        par = worker.parallelism
        self.ranks = par.replicas * par.attention_data
        self.max_sequences = worker.scheduler.max_sequences_for(self.role)
        replayed = worker.model_copy(update={"timing": worker.timing.model_copy(update={"mixed_pass": self.mode})})
        self.sync_ms = dp_sync_ms(config.engine, replayed)
        """The per-pass DP synchronisation, a constant outside the scales."""
        self.settings = _fitted_with(config, replayed)
        self.count = 0

    def run(self, calibration: Calibration) -> dict[str, np.ndarray]:
        """The selected requests' latencies of every run, simulated with `calibration`."""
        from servesim.studies.validate import simulated_latencies

        self.count += 1
        path = self.folder / f"trial-{self.count}.yaml"
        path.write_text(calibration.to_yaml())
        results = []
        for base in self.bases:
            config = json.loads(json.dumps(base))
            config["engine"]["workers"][self.role]["timing"]["calibration"] = str(path)
            results.append(simulated_latencies(config))
        return self._select(results)

    def _select(self, per_run: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
        """The requests the fit looks at, pooled over the runs (a run's all when its simulation
        lost some)."""
        picked = []
        for latencies, fit in zip(per_run, self.fits, strict=True):
            if fit is not None and len(latencies["ttft"]) == len(fit):
                latencies = {m: v[fit] for m, v in latencies.items()}
            picked.append(latencies)
        return {m: np.concatenate([p[m] for p in picked]) for m in METRICS}

    def complete(self, sim: dict[str, np.ndarray]) -> bool:
        """Whether `sim` has a value for every measured request (none was lost)."""
        return len(sim["ttft"]) == len(self.real["ttft"])

    def mean(self, sim: dict[str, np.ndarray], metric: str) -> float:
        return float(np.nanmean(sim[metric]))

    def errors(self, sim: dict[str, np.ndarray]) -> dict[str, float]:
        return {m: 100.0 * (self.mean(sim, m) / float(np.nanmean(self.real[m])) - 1.0) for m in METRICS}


def _fitted_with(config: SimConfig, worker: Any) -> dict[str, dict[str, Any]]:
    """The settings a calibration of `config` is fitted with (`Calibration.fitted_with`)."""
    timing: dict[str, Any] = {"type": worker.timing.type}
    if getattr(worker.timing, "dp_sync_ms", None) is not None:
        timing["dp_sync_ms"] = worker.timing.dp_sync_ms
    if getattr(worker.timing, "gpu", None) is not None:
        timing["gpu"] = worker.timing.gpu
    engine = resolve_backend_version(config).engine
    return {"timing": timing, "scheduler": {"async_scheduling": async_scheduling(worker)},
            "engine": {"model": engine.model, "hardware": engine.hardware, "backend": engine.backend,
                       **({"backend_version": engine.backend_version} if engine.backend_version else {})}}


def _the_role(config: SimConfig) -> tuple[str, Any]:
    roles = config.engine.roles
    if list(roles) != ["aggregated"]:
        raise ConfigError("calibrate needs an aggregated deployment (engine.workers.aggregated)")
    worker = roles["aggregated"]
    if not isinstance(worker.timing, (DefaultTiming, RooflineTiming)):
        raise ConfigError("engine.workers.aggregated.timing: calibrate needs type 'default' or 'roofline' "
                          f"(got '{worker.timing.type}')")
    return "aggregated", worker


def _as_runs(measured: Measured | Sequence[Measured], fit: Any) -> tuple[list[Measured], list[np.ndarray | None]]:
    runs = [measured] if isinstance(measured, Measured) else list(measured)
    if not runs:
        raise ConfigError("calibrate needs at least one measured run")
    fits = [fit] if isinstance(measured, Measured) or fit is None or isinstance(fit, np.ndarray) else list(fit)
    if len(fits) == 1 and len(runs) > 1:
        fits = fits * len(runs) if fits[0] is None else fits
    if len(fits) != len(runs):
        raise ConfigError(f"calibrate: {len(fits)} fit masks for {len(runs)} measured runs")
    return runs, fits


def calibrate(config: SimConfig, measured: Measured | Sequence[Measured], *, keep_traffic: bool = False,
              fit: np.ndarray | Sequence[np.ndarray | None] | None = None,
              progress: bool = False) -> CalibrationResult:
    """Fit a calibration of `config`'s deployment to `measured` (one run or several).

    `fit` (per run, a boolean mask over its measured requests in send order) restricts the fit
    to some requests; every request is still replayed.
    """
    runs, fits = _as_runs(measured, fit)
    if keep_traffic and len(runs) > 1:
        raise ConfigError("--keep-traffic replays the config's traffic: give one measured run with it")
    with tempfile.TemporaryDirectory(prefix="servesim-calibrate-") as tmp:
        replay = _Replay(config, runs, keep_traffic, Path(tmp), fits)
        kv = _kv_tokens(replay)
        current = Calibration(kv_tokens=kv, mixed_pass=replay.mode, frontend_ms=0.0)
        before = replay.errors(replay.run(replace(current, kv_tokens=None, frontend_ms=None)))
        sep = separability(replay, current)
        if not sep.prefill_frontend:
            current = replace(current, frontend_ms=None)
        for round_ in range(ROUNDS):
            if progress:
                print(f"[calibrate] round {round_ + 1} ...", file=sys.stderr)
            previous = current
            current = _fit_decode(replay, current)
            width = 0.5 / (round_ + 1)
            current = _fit_prefill_frontend(replay, current, width) if sep.prefill_frontend \
                else _fit_prefill(replay, current, width)
            if _settled(previous, current):
                break
        after = replay.errors(replay.run(current))
        fitted_on = {"measurements": ", ".join(m.path for m in runs), "format": runs[0].format,
                     "requests": sum(len(m) for m in runs), "runs": len(runs),
                     "failed_requests": sum(m.failed for m in runs), "model": config.engine.model,
                     "hardware": config.engine.hardware, "backend": config.engine.backend,
                     "separable": sep.summary(),
                     "mean_error_before_pct": {m: round(v, 2) for m, v in before.items()},
                     "mean_error_after_pct": {m: round(v, 2) for m, v in after.items()}}
        fitted = replace(current, fitted_with=replay.settings, fitted_on=fitted_on)
        return CalibrationResult(fitted, before, after, replay.count, sep, sep.notes())


def predict_errors(config: SimConfig, measured: Sequence[Measured], calibrations: Sequence[Calibration],
                   *, keep_traffic: bool = False,
                   fit: Sequence[np.ndarray | None] | None = None) -> list[dict[str, float]]:
    """Signed mean errors (%) of `config`'s deployment with each of `calibrations` against
    `measured` (the `fit` requests of each run, all by default)."""
    runs, fits = _as_runs(list(measured), fit)
    with tempfile.TemporaryDirectory(prefix="servesim-predict-") as tmp:
        replay = _Replay(config, runs, keep_traffic, Path(tmp), fits)
        return [replay.errors(replay.run(replace(c, mixed_pass=replay.mode))) for c in calibrations]


def _kv_tokens(replay: _Replay) -> int | None:
    """The KV capacity per rank the runs show (the median of those that show one)."""
    found = []
    for measured, fit in zip(replay.runs, replay.fits, strict=True):
        window = None if fit is None else (float(measured.send_s[fit].min()), float(measured.end_s[fit].max()))
        kv = measured_kv_tokens(measured, replay.max_sequences, replay.ranks, window)
        if kv is not None:
            found.append(kv)
    return int(np.median(found)) if found else None


def _settled(before: Calibration, after: Calibration) -> bool:
    """Whether a round moved both scales by less than `TOLERANCE` (relative)."""
    return (abs(after.prefill_scale / before.prefill_scale - 1) < TOLERANCE
            and abs(after.decode_scale / before.decode_scale - 1) < TOLERANCE)


def _clamp(scale: float) -> float:
    return min(max(scale, SCALE_BOUNDS[0]), SCALE_BOUNDS[1])


def _fit_decode(replay: _Replay, current: Calibration) -> Calibration:
    """One fixed-point step of the decode scale on mean TPOT."""
    sim = replay.mean(replay.run(current), "tpot")
    real = float(np.nanmean(replay.real["tpot"]))
    sync = replay.sync_ms if min(real, sim) > 2 * replay.sync_ms else 0.0
    return replace(current, decode_scale=_clamp(current.decode_scale * (real - sync) / (sim - sync)))


GOLDEN = (math.sqrt(5) - 1) / 2


def _fit_prefill_frontend(replay: _Replay, current: Calibration, width: float, steps: int = 8) -> Calibration:
    """Golden-section search on log(prefill scale), within ±`width` of the current one, for the
    least grouped TTFT misfit, the front-end latency profiled out (`servesim.studies.separate`)."""
    from servesim.studies.separate import frontend_and_misfit

    lo = max(math.log(SCALE_BOUNDS[0]), math.log(current.prefill_scale) - width)
    hi = min(math.log(SCALE_BOUNDS[1]), math.log(current.prefill_scale) + width)
    seen: dict[float, tuple[float, float]] = {}

    def misfit(log_scale: float) -> float:
        if log_scale not in seen:
            sim = replay.run(replace(current, prefill_scale=math.exp(log_scale), frontend_ms=0.0))
            seen[log_scale] = frontend_and_misfit(replay, sim)
        return seen[log_scale][1]

    x1, x2 = hi - GOLDEN * (hi - lo), lo + GOLDEN * (hi - lo)
    for _ in range(steps):
        if misfit(x1) <= misfit(x2):
            hi, x2 = x2, x1
            x1 = hi - GOLDEN * (hi - lo)
        else:
            lo, x1 = x1, x2
            x2 = lo + GOLDEN * (hi - lo)
    best = min(seen, key=lambda x: seen[x][1])
    return replace(current, prefill_scale=math.exp(best), frontend_ms=seen[best][0])


def _fit_prefill(replay: _Replay, current: Calibration, width: float, steps: int = 6) -> Calibration:
    """Bisection on log(prefill scale), within ±`width` of the current one, for the measured
    mean TTFT."""
    target = float(np.mean(replay.real["ttft"]))
    lo, hi = math.log(SCALE_BOUNDS[0]), math.log(SCALE_BOUNDS[1])
    mid = math.log(current.prefill_scale)
    lo, hi = max(lo, mid - width), min(hi, mid + width)
    best = current
    for _ in range(steps):
        mid = (lo + hi) / 2
        trial = replace(current, prefill_scale=math.exp(mid))
        mean = replay.mean(replay.run(trial), "ttft")
        best = trial
        if mean > target:
            hi = mid
        else:
            lo = mid
    return best


def measured_kv_tokens(measured: Measured, max_sequences: int, ranks: int,
                       window: tuple[float, float] | None = None, points: int = 4000) -> int | None:
    """The KV capacity per rank the measurements show (within `window`, seconds), or None when
    the KV pool did not limit admission for most of that time (see the module docstring)."""
    start, stop = window if window is not None else (float(measured.send_s.min()), float(measured.end_s.max()))
    grid = np.linspace(start, stop, points)
    usage = np.zeros(points)
    running = np.zeros(points)
    waiting = np.zeros(points)
    for send, first, end, isl, osl in zip(measured.send_s, measured.first_s, measured.end_s,
                                          measured.input_tokens, measured.output_tokens, strict=True):
        lo, mid, hi = np.searchsorted(grid, (send, first, end))
        waiting[lo:mid] += 1
        if hi > mid:
            share = (grid[mid:hi] - first) / max(end - first, 1e-9)
            usage[mid:hi] += isl + share * osl
            running[mid:hi] += 1
    busy = (running > 0) | (waiting > 0)
    bound = (waiting > 0) & (running < max_sequences * ranks)
    if not busy.any() or bound.sum() < 0.5 * busy.sum():
        return None
    low, high = np.percentile(usage[bound], [10, 90])
    if low < PLATEAU * high:
        return None  # the KV in use wanders: something else (the budget, arrivals) set the pace
    return int(round(float(np.median(usage[bound])) / ranks))


PLATEAU = 0.75
"""While the KV pool is the limit, the KV in use stays near its size: the 10th percentile of the
usage at such times is at least this share of the 90th."""
