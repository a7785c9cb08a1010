"""`servesim calibrate`: fit a calibration file to per-request measurements of a real deployment.

The measured requests are replayed (their send times and token counts as a Mooncake trace, each
prompt private) on the config's deployment, and four parameters are fitted in turn:

1. **KV capacity** — only where the data shows it: when, for most of the run, requests waited
   while fewer than ``max_sequences`` ran per rank and the KV in use at those times stayed on
   a plateau (its 10th percentile ≥ 75 % of its 90th), the KV pool was the limit; its size is
   the median KV in use at those times (each running request holding its prompt plus the
   tokens it has produced, growing linearly from its first to its last token), per rank;
2. **decode scale** ``b`` — mean TPOT is nearly proportional to decode pass times, less the
   per-pass DP synchronisation ``s`` (`timing.dp_sync_ms`), which the scale does not touch:
   ``b`` is multiplied by (measured − s) / (simulated − s) mean TPOT until they agree;
3. **front-end latency** — the median gap between measured and simulated TTFT over the quarter
   of requests that queued least in the simulation, when those requests did not queue (their
   simulated TTFT is within 3 passes' worth of the fastest one); else left unmeasured;
4. **prefill scale** ``a`` — mean TTFT rises with prefill cost (more so under queueing): ``a``
   is found by bisection on a log scale so that the simulated mean TTFT meets the measured one.

Steps 2-4 are repeated (the bisection window halving each round) until a round moves neither
scale by 0.5 %, at most 8 times. Scales stay within 0.2-5, so a run whose TTFT does not react
to prefill cost keeps ``a`` near 1.
"""

from __future__ import annotations

import json
import math
import sys
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from servesim.config import SimConfig
from servesim.config.schema import DefaultTiming, RooflineTiming
from servesim.errors import ConfigError
from servesim.fidelity.apply import dp_sync_ms
from servesim.fidelity.calibration import Calibration
from servesim.fidelity.resolve import resolved_mixed_pass
from servesim.measured import Measured

SCALE_BOUNDS = (0.2, 5.0)
ROUNDS = 8
TOLERANCE = 0.005
METRICS = ("ttft", "tpot", "e2e")


@dataclass
class CalibrationResult:
    """The fitted calibration and the mean errors before and after (signed %)."""

    calibration: Calibration
    before: dict[str, float]
    after: dict[str, float]
    simulations: int

    def describe(self) -> str:
        c = self.calibration
        kv = f"{c.kv_tokens} tokens per rank" if c.kv_tokens is not None else "not shown by the data"
        fe = f"{c.frontend_ms:.1f} ms" if c.frontend_ms is not None else "not shown by the data"
        lines = [f"prefill scale {c.prefill_scale:.3f}, decode scale {c.decode_scale:.3f}, "
                 f"front-end latency {fe}, KV capacity {kv} ({self.simulations} simulations)",
                 "mean error vs measured   TTFT      TPOT      E2E"]
        for name, errors in (("uncalibrated", self.before), ("calibrated", self.after)):
            lines.append(f"  {name:<22}" + "".join(f"{errors[m]:+8.1f} %" for m in METRICS))
        return "\n".join(lines) + "\n"


class _Replay:
    """Simulations of the measured deployment with trial calibrations."""

    def __init__(self, config: SimConfig, measured: Measured, keep_traffic: bool, folder: Path,
                 fit: np.ndarray | None) -> None:
        self.folder = folder
        self.measured = measured
        self.fit = fit
        self.real = self.select(measured.latencies())
        self.role, worker = _the_role(config)
        self.mode = getattr(worker.timing, "mixed_pass", None) or resolved_mixed_pass(config.engine.backend, config.compat)
        self.base = config.model_dump(mode="json", exclude_unset=True)
        self.base.pop("compat", None)  # the trials set the mode explicitly and add calibrations
        timing = self.base["engine"]["workers"][self.role].setdefault("timing", {"type": "default"})
        timing.pop("calibration", None)
        timing.pop("frontend_ms", None)
        timing["mixed_pass"] = self.mode
        if not keep_traffic:
            trace = folder / "measured.mooncake.jsonl"
            trace.write_text("".join(json.dumps(row) + "\n" for row in measured.mooncake_rows()))
            self.base["traffic"] = {"source": {"type": "trace", "format": "mooncake", "paths": [str(trace)]},
                                    "load": {"type": "trace_timestamps"}}
        par = worker.parallelism
        self.ranks = par.replicas * par.attention_data
        self.max_sequences = worker.scheduler.max_sequences_for(self.role)
        replayed = worker.model_copy(update={"timing": worker.timing.model_copy(update={"mixed_pass": self.mode})})
        self.sync_ms = dp_sync_ms(config.engine, replayed)
        """The per-pass DP synchronisation, a constant outside the scales."""
        self.count = 0

    def run(self, calibration: Calibration) -> dict[str, np.ndarray]:
        from servesim.fidelity.validate import simulated_latencies

        self.count += 1
        path = self.folder / f"trial-{self.count}.yaml"
        path.write_text(calibration.to_yaml())
        config = json.loads(json.dumps(self.base))
        config["engine"]["workers"][self.role]["timing"]["calibration"] = str(path)
        return simulated_latencies(config)

    def select(self, latencies: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The requests the fit looks at (all when the simulation lost some)."""
        fit = self.fit
        if fit is None or len(latencies["ttft"]) != len(fit):
            return latencies
        return {m: v[fit] for m, v in latencies.items()}

    def mean(self, sim: dict[str, np.ndarray], metric: str) -> float:
        return float(np.nanmean(self.select(sim)[metric]))

    def errors(self, sim: dict[str, np.ndarray]) -> dict[str, float]:
        return {m: 100.0 * (self.mean(sim, m) / float(np.nanmean(self.real[m])) - 1.0) for m in METRICS}


def _the_role(config: SimConfig) -> tuple[str, Any]:
    roles = config.engine.roles
    if list(roles) != ["aggregated"]:
        raise ConfigError("calibrate needs an aggregated deployment (engine.workers.aggregated)")
    worker = roles["aggregated"]
    if not isinstance(worker.timing, (DefaultTiming, RooflineTiming)):
        raise ConfigError("engine.workers.aggregated.timing: calibrate needs type 'default' or 'roofline' "
                          f"(got '{worker.timing.type}')")
    return "aggregated", worker


def calibrate(config: SimConfig, measured: Measured, *, keep_traffic: bool = False, fit: np.ndarray | None = None,
              progress: bool = False) -> CalibrationResult:
    """Fit a calibration of `config`'s deployment to `measured`.

    `fit` (a boolean mask over the measured requests in send order) restricts the fit to some
    requests; every request is still replayed.
    """
    with tempfile.TemporaryDirectory(prefix="servesim-calibrate-") as tmp:
        replay = _Replay(config, measured, keep_traffic, Path(tmp), fit)
        window = None if fit is None else (float(measured.send_s[fit].min()), float(measured.end_s[fit].max()))
        kv = measured_kv_tokens(measured, replay.max_sequences, replay.ranks, window)
        current = Calibration(kv_tokens=kv, mixed_pass=replay.mode, frontend_ms=0.0)
        before = replay.errors(replay.run(replace(current, kv_tokens=None, frontend_ms=None)))
        for round_ in range(ROUNDS):
            if progress:
                print(f"[calibrate] round {round_ + 1} ...", file=sys.stderr)
            previous = current
            current = _fit_decode(replay, current)
            current = _fit_frontend(replay, current)
            current = _fit_prefill(replay, current, width=0.5 / (round_ + 1))
            if _settled(previous, current):
                break
        after = replay.errors(replay.run(current))
        fitted_on = {"measurements": measured.path, "format": measured.format, "requests": len(measured),
                     "failed_requests": measured.failed, "model": config.engine.model,
                     "hardware": config.engine.hardware, "backend": config.engine.backend,
                     "mean_error_before_pct": {m: round(v, 2) for m, v in before.items()},
                     "mean_error_after_pct": {m: round(v, 2) for m, v in after.items()}}
        return CalibrationResult(replace(current, fitted_on=fitted_on), before, after, replay.count)


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


def _fit_frontend(replay: _Replay, current: Calibration) -> Calibration:
    """The front-end latency from the requests that queued least, if they did not queue."""
    sim = replay.select(replay.run(replace(current, frontend_ms=0.0)))["ttft"]
    real = replay.real["ttft"]
    if len(sim) != len(real):
        return replace(current, frontend_ms=None)
    calm = np.argsort(sim)[: max(1, len(sim) // 4)]
    tpot = float(np.nanmedian(replay.real["tpot"]))
    if float(np.max(sim[calm])) > float(np.min(sim)) + 3 * tpot:
        return replace(current, frontend_ms=None)
    return replace(current, frontend_ms=max(0.0, float(np.median(real[calm] - sim[calm]))))


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
