"""The calibration hold-out: fit on some measurements, predict others, compare with uncalibrated.

Two hold-outs on the open runs, for each timing source (AIConfigurator data, roofline), in
fused mode:

* **load** — a calibration is fitted to the first third of a run's requests (sent while the
  server was filling up) and predicts the other two thirds (sent into a saturated server:
  queueing TTFT, full batches); the whole run is replayed in both cases, on its own trace
  (the prompt prefixes its requests share included, for the fit too);
* **model** — a calibration fitted to one run predicts another run on the same GPU type (a
  different model and parallelism); the KV capacity is not carried over.

And the one `servesim calibrate` prints before it writes its file (`check`): with several
measured runs each is predicted by a calibration fitted to the others; with one, its first
third of requests is fitted and its other two thirds predicted.
"""

from __future__ import annotations

import itertools
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from servesim.config import SimConfig, parse_config
from servesim.studies import openruns
from servesim.studies.calibrate import calibrate, predict_errors
from servesim.perf.calibration import Calibration
from servesim.measured import Measured
from servesim.studies.validate import METRICS, simulated_latencies

TIMINGS = {"AIConfigurator": {"type": "default", "mixed_pass": "fused"},
           "roofline": {"type": "roofline", "mixed_pass": "fused"}}


@dataclass(frozen=True)
class HoldoutRow:
    timing: str
    calibrated_on: str
    predicted: str
    uncalibrated: dict[str, float]
    calibrated: dict[str, float]

    def mean_abs(self, errors: dict[str, float]) -> float:
        return float(np.mean([abs(errors[m]) for m in METRICS]))


def _errors(config: dict, real: dict[str, np.ndarray], keep: np.ndarray | None = None) -> dict[str, float]:
    """Signed mean errors of a simulation; `keep` selects requests (when none was lost)."""
    sim = simulated_latencies(config)
    if keep is not None and len(sim["ttft"]) == len(keep):
        sim = {m: v[keep] for m, v in sim.items()}
    if keep is not None:
        real = {m: v[keep] for m, v in real.items()}
    return {m: 100.0 * (float(np.nanmean(sim[m])) / float(np.nanmean(real[m])) - 1.0) for m in METRICS}


def _fitted(run: openruns.OpenRun, data: Path, timing: dict, systems: str | None, path: Path,
            fit: np.ndarray | None = None, keep_kv: bool = True) -> Path:
    """Write the calibration fitted to `run` (its `fit` requests) to `path`.

    The fit replays the run's own trace (`keep_traffic`): the measured requests in their order,
    with the prompt prefixes they share, exactly the workload the calibration then predicts. A
    replay of the measurements alone gives every prompt its own blocks, so the fit would see
    no prefix-cache hits and fold the missing ones into the prefill scale.
    """
    config = parse_config(openruns.config(run, data, timing, systems))
    fitted = calibrate(config, openruns.measured(run, data, "client"), fit=fit, keep_traffic=True).calibration
    path.write_text((fitted if keep_kv else replace(fitted, kv_tokens=None)).to_yaml())
    return path


def by_load(data: Path, systems: str | None = None, runs: Sequence[openruns.OpenRun] = openruns.RUNS,
            progress: bool = False) -> list[HoldoutRow]:
    """Fit on a run's first third of requests, predict its other two thirds."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="servesim-holdout-") as tmp:
        for (label, timing), run in itertools.product(TIMINGS.items(), runs):
            if timing["type"] == "default" and not openruns.has_aic_data(run, systems):
                continue  # the database cannot time this GPU: the roofline row covers it
            if progress:
                print(f"[holdout] {label}: {run.name} ...", file=sys.stderr)
            real = openruns.measured(run, data, "client").latencies()
            first = np.arange(len(real["ttft"])) < len(real["ttft"]) // 3
            path = _fitted(run, data, timing, systems, Path(tmp) / f"{label}-{run.folder.replace('/', '-')}.yaml", first)
            plain = openruns.config(run, data, timing, systems)
            tuned = openruns.config(run, data, {**timing, "calibration": str(path)}, systems)
            rows.append(HoldoutRow(label, f"{run.name}, first third", "the other two thirds",
                                   _errors(plain, real, ~first), _errors(tuned, real, ~first)))
    return rows


def by_model(data: Path, systems: str | None = None, runs: Sequence[openruns.OpenRun] | None = None,
             progress: bool = False) -> list[HoldoutRow]:
    """Every (timing, calibrated-on, predicted) row over the runs sharing a GPU type."""
    runs = runs if runs is not None else [r for r in openruns.RUNS if r.hardware == "rtx_pro_6000_server"]
    rows = []
    with tempfile.TemporaryDirectory(prefix="servesim-holdout-") as tmp:
        for label, timing in TIMINGS.items():
            files: dict[str, Path] = {}
            for run in runs:
                if progress:
                    print(f"[holdout] calibrating {label} on {run.name} ...", file=sys.stderr)
                files[run.name] = _fitted(run, data, timing, systems, Path(tmp) / f"{label}-{len(files)}.yaml",
                                          keep_kv=False)
            for a, b in itertools.permutations(runs, 2):
                real = openruns.measured(b, data, "client").latencies()
                plain = openruns.config(b, data, timing, systems)
                tuned = openruns.config(b, data, {**timing, "calibration": str(files[a.name])}, systems)
                rows.append(HoldoutRow(label, a.name, b.name, _errors(plain, real), _errors(tuned, real)))
    return rows


def render(rows: Sequence[HoldoutRow], title: str) -> str:
    """A hold-out table: signed mean errors without and with the calibration."""
    lines = [f"{title} (fused mode; signed error of the mean, uncalibrated → calibrated):", "",
             "| timing | calibrated on | predicted | TTFT | TPOT | E2E | mean abs. error |",
             "|---|---|---|---:|---:|---:|---:|"]
    for r in rows:
        cells = [f"{r.uncalibrated[m]:+.1f} → {r.calibrated[m]:+.1f} %" for m in METRICS]
        lines.append(f"| {r.timing} | {r.calibrated_on} | {r.predicted} | " + " | ".join(cells)
                     + f" | {r.mean_abs(r.uncalibrated):.1f} → {r.mean_abs(r.calibrated):.1f} % |")
    return "\n".join(lines) + "\n"


def check(config: SimConfig, runs: Sequence[Measured], keep_traffic: bool = False,
          progress: bool = False) -> list[HoldoutRow]:
    """`calibrate`'s hold-out: each run predicted by a calibration fitted to the others, or
    (one run) its last two thirds by one fitted to its first third."""
    runs = list(runs)
    label = "calibrate"
    if len(runs) == 1:
        measured = runs[0]
        first = np.arange(len(measured)) < max(1, len(measured) // 3)
        if progress:
            print("[calibrate] hold-out: fitting the first third of the requests ...", file=sys.stderr)
        fitted = calibrate(config, measured, keep_traffic=keep_traffic, fit=first).calibration
        plain, tuned = predict_errors(config, runs, [Calibration(), fitted], keep_traffic=keep_traffic, fit=[~first])
        return [HoldoutRow(label, "first third of the requests", "the other two thirds", plain, tuned)]
    rows = []
    for index, held in enumerate(runs):
        if progress:
            print(f"[calibrate] hold-out: fitting without run {index + 1} ...", file=sys.stderr)
        others = [m for i, m in enumerate(runs) if i != index]
        fitted = calibrate(config, others).calibration
        plain, tuned = predict_errors(config, [held], [Calibration(), fitted])
        rows.append(HoldoutRow(label, "the other runs", f"run {index + 1} ({held.path})", plain, tuned))
    return rows


def render_check(rows: Sequence[HoldoutRow]) -> str:
    """`calibrate`'s hold-out as text: signed mean errors without and with the calibration."""
    lines = ["hold-out (fitted without the predicted requests) TTFT      TPOT      E2E   mean abs."]
    for r in rows:
        lines.append(f"  {r.predicted}, fitted on {r.calibrated_on}:")
        for name, errors in (("uncalibrated", r.uncalibrated), ("calibrated", r.calibrated)):
            lines.append(f"    {name:<44}" + "".join(f"{errors[m]:+8.1f} %" for m in METRICS)
                         + f"{r.mean_abs(errors):8.1f} %")
    worse = [r for r in rows if r.mean_abs(r.calibrated) > r.mean_abs(r.uncalibrated)]
    if worse:
        lines.append(f"warning: on {len(worse)} of {len(rows)} hold-outs the calibration predicts worse than "
                     "none: it may not extrapolate beyond the measured loads")
    return "\n".join(lines) + "\n"
