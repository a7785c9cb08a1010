"""`servesim calibrate`: fit a calibration file to per-request measurements of a real deployment.

The measured requests are replayed (their send times and token counts as a Mooncake trace, each
prompt private) on the config's deployment, and four parameters are fitted in turn:

1. **KV capacity** — only where the data shows it: when, for most of the run, requests waited
   while fewer than ``max_sequences`` ran per rank, the KV pool was the limit; its size is the
   median KV in use at those times (each running request holding its prompt plus the tokens
   it has produced, growing linearly from its first to its last token), per rank;
2. **decode scale** ``b`` — mean TPOT is nearly proportional to decode pass times: ``b`` is
   multiplied by measured / simulated mean TPOT until they agree;
3. **front-end latency** — the median gap between measured and simulated TTFT over the quarter
   of requests that queued least in the simulation, when those requests did not queue (their
   simulated TTFT is within 3 passes' worth of the fastest one); else left unmeasured;
4. **prefill scale** ``a`` — mean TTFT rises with prefill cost (more so under queueing): ``a``
   is found by bisection on a log scale so that the simulated mean TTFT meets the measured one.

Steps 2-4 are repeated three times. Each step is bounded (scales within 0.2-5), so a run whose
TTFT does not react to prefill cost keeps ``a`` near 1.
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
from servesim.fidelity.calibration import Calibration
from servesim.fidelity.measured import Measured

SCALE_BOUNDS = (0.2, 5.0)
ROUNDS = 3
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

    def __init__(self, config: SimConfig, measured: Measured, keep_traffic: bool, folder: Path) -> None:
        self.folder = folder
        self.measured = measured
        self.role, worker = _the_role(config)
        self.mode = worker.timing.mixed_pass if "mixed_pass" in worker.timing.model_fields_set else "fused"
        self.base = config.model_dump(mode="json", exclude_unset=True)
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
        self.count = 0

    def run(self, calibration: Calibration) -> dict[str, np.ndarray]:
        from servesim.fidelity.validate import simulated_latencies

        self.count += 1
        path = self.folder / f"trial-{self.count}.yaml"
        path.write_text(calibration.to_yaml())
        config = json.loads(json.dumps(self.base))
        config["engine"]["workers"][self.role]["timing"]["calibration"] = str(path)
        return simulated_latencies(config)

    def errors(self, sim: dict[str, np.ndarray]) -> dict[str, float]:
        real = self.measured.latencies()
        return {m: 100.0 * (float(np.mean(sim[m])) / float(np.mean(real[m])) - 1.0) for m in METRICS}


def _the_role(config: SimConfig) -> tuple[str, Any]:
    roles = config.engine.roles
    if list(roles) != ["aggregated"]:
        raise ConfigError("calibrate needs an aggregated deployment (engine.workers.aggregated)")
    worker = roles["aggregated"]
    if not isinstance(worker.timing, (DefaultTiming, RooflineTiming)):
        raise ConfigError("engine.workers.aggregated.timing: calibrate needs type 'default' or 'roofline' "
                          f"(got '{worker.timing.type}')")
    return "aggregated", worker


def calibrate(config: SimConfig, measured: Measured, *, keep_traffic: bool = False,
              progress: bool = False) -> CalibrationResult:
    """Fit a calibration of `config`'s deployment to `measured`."""
    with tempfile.TemporaryDirectory(prefix="servesim-calibrate-") as tmp:
        replay = _Replay(config, measured, keep_traffic, Path(tmp))
        kv = measured_kv_tokens(measured, replay.max_sequences, replay.ranks)
        current = Calibration(kv_tokens=kv, mixed_pass=replay.mode, frontend_ms=0.0)
        before = replay.errors(replay.run(replace(current, kv_tokens=None, frontend_ms=None)))
        for round_ in range(ROUNDS):
            if progress:
                print(f"[calibrate] round {round_ + 1}/{ROUNDS} ...", file=sys.stderr)
            current = _fit_decode(replay, current)
            current = _fit_frontend(replay, current)
            current = _fit_prefill(replay, current)
        after = replay.errors(replay.run(current))
        fitted_on = {"measurements": measured.path, "format": measured.format, "requests": len(measured),
                     "failed_requests": measured.failed, "model": config.engine.model,
                     "hardware": config.engine.hardware, "backend": config.engine.backend,
                     "mean_error_before_pct": {m: round(v, 2) for m, v in before.items()},
                     "mean_error_after_pct": {m: round(v, 2) for m, v in after.items()}}
        return CalibrationResult(replace(current, fitted_on=fitted_on), before, after, replay.count)


def _clamp(scale: float) -> float:
    return min(max(scale, SCALE_BOUNDS[0]), SCALE_BOUNDS[1])


def _fit_decode(replay: _Replay, current: Calibration) -> Calibration:
    """One fixed-point step of the decode scale on mean TPOT."""
    sim = replay.run(current)
    real = float(np.mean(replay.measured.latencies()["tpot"]))
    return replace(current, decode_scale=_clamp(current.decode_scale * real / float(np.mean(sim["tpot"]))))


def _fit_frontend(replay: _Replay, current: Calibration) -> Calibration:
    """The front-end latency from the requests that queued least, if they did not queue."""
    zero = replace(current, frontend_ms=0.0)
    sim = replay.run(zero)["ttft"]
    real = replay.measured.latencies()["ttft"]
    if len(sim) != len(real):
        return replace(current, frontend_ms=None)
    calm = np.argsort(sim)[: max(1, len(sim) // 4)]
    tpot = float(np.median(replay.measured.latencies()["tpot"]))
    if float(np.max(sim[calm])) > float(np.min(sim)) + 3 * tpot:
        return replace(current, frontend_ms=None)
    return replace(current, frontend_ms=max(0.0, float(np.median(real[calm] - sim[calm]))))


def _fit_prefill(replay: _Replay, current: Calibration, steps: int = 7) -> Calibration:
    """Bisection on log(prefill scale) for the measured mean TTFT."""
    target = float(np.mean(replay.measured.latencies()["ttft"]))
    lo, hi = math.log(SCALE_BOUNDS[0]), math.log(SCALE_BOUNDS[1])
    mid = math.log(current.prefill_scale)
    width = 0.5
    lo, hi = max(lo, mid - width), min(hi, mid + width)
    best = current
    for _ in range(steps):
        mid = (lo + hi) / 2
        trial = replace(current, prefill_scale=math.exp(mid))
        mean = float(np.mean(replay.run(trial)["ttft"]))
        best = trial
        if mean > target:
            hi = mid
        else:
            lo = mid
    return best


def measured_kv_tokens(measured: Measured, max_sequences: int, ranks: int, points: int = 4000) -> int | None:
    """The KV capacity per rank the measurements show, or None when the KV pool never limited
    admission for most of the run (see the module docstring)."""
    grid = np.linspace(float(measured.send_s.min()), float(measured.end_s.max()), points)
    usage = np.zeros(points)
    running = np.zeros(points)
    waiting = np.zeros(points)
    for send, first, end, isl, osl in zip(measured.send_s, measured.first_s, measured.end_s,
                                          measured.input_tokens, measured.output_tokens):
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
    return int(round(float(np.median(usage[bound])) / ranks))
