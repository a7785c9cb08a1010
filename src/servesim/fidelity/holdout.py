"""The calibration hold-out: fit on some measurements, predict others, compare with uncalibrated.

Two hold-outs on the open runs, for each timing source (AIConfigurator data, roofline), in
fused mode:

* **load** — a calibration is fitted to the first third of a run's requests (sent while the
  server was filling up) and predicts the other two thirds (sent into a saturated server:
  queueing TTFT, full batches); the whole run is replayed in both cases;
* **model** — a calibration fitted to one run predicts another run on the same GPU type (a
  different model and parallelism); the KV capacity is not carried over.
"""

from __future__ import annotations

import itertools
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from servesim.config import parse_config
from servesim.fidelity import openruns
from servesim.fidelity.calibrate import calibrate
from servesim.fidelity.validate import METRICS, simulated_latencies

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
    """Write the calibration fitted to `run` (its `fit` requests) to `path`."""
    config = parse_config(openruns.config(run, data, timing, systems))
    fitted = calibrate(config, openruns.measured(run, data, "client"), fit=fit).calibration
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
