"""`servesim validate --points FILE`: servesim against measured benchmark points
(`servesim.measured.points`), with its defaults and under ``--compat reference``.

Each point is replayed as a user would configure it (`points.point_config`); the backend version
is the image's when the AIConfigurator database can time the model there, else the nearest
version that can (`choose_version`), else the roofline — the table says which served each point.
Compared per point: mean TTFT, mean TPOT (per request (E2E − TTFT)/(output − 1), then the mean:
the client's definition, and servesim's `tpot_ms`), and throughput per GPU ((input + output
tokens) / benchmark duration / GPUs), with the mean absolute (and signed) error of each.
"""

from __future__ import annotations

import logging
import re
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from servesim.measured.points import BenchmarkPoint, point_config, write_trace

MODES = ("default", "reference")
METRICS = ("ttft", "tpot", "tput")
LABELS = {"ttft": "TTFT mean", "tpot": "TPOT mean", "tput": "throughput / GPU"}


@dataclass(frozen=True)
class Source:
    """Which timing served a point: the AIC version asked and used, or the roofline and why."""

    asked: str | None
    version: str | None
    """The version put in the config (None: the backend's default)."""
    aic: bool
    reason: str = ""

    def describe(self, backend: str) -> str:
        if self.aic:
            note = "" if self.asked == self.version else f" (asked {self.asked or 'default'})"
            return f"AIC {backend} {self.version}{note}"
        return f"roofline ({self.reason})" if self.reason else "roofline"


def _numeric(version: str) -> tuple[int, ...]:
    parts = [int(p) for p in re.findall(r"\d+", version)]
    return tuple(parts + [0] * (4 - len(parts)))[:4]


def nearest_first(versions: Sequence[str], wanted: str) -> list[str]:
    """`versions` ordered by distance to `wanted` (major, minor, patch, then rc number; a tie
    goes to the older version)."""
    target = _numeric(wanted)

    def distance(v: str) -> tuple:
        got = _numeric(v)
        return tuple(abs(a - b) for a, b in zip(got, target, strict=True)) + (got > target,)
    return sorted(versions, key=distance)


def choose_version(point: BenchmarkPoint, config: dict[str, Any]) -> Source:
    """The version to time `point` with: the image's if the database can build the model there,
    else the nearest one that can; the roofline (with the reason) when none can."""
    from servesim.build.perf import aic_key
    from servesim.config.load import parse_config
    from servesim.perf import aic
    from servesim.perf.aicdata import DEFAULT_BACKEND_VERSIONS
    from servesim.perf.hardware import aic_system, ready_systems_dir, systems_dir

    wanted = point.version or DEFAULT_BACKEND_VERSIONS.get(point.backend, "current")
    systems, how = systems_dir(None)
    ready_systems_dir(systems, how, point.gpu, point.backend, None)
    gpu = aic_system(point.gpu, systems)
    versions = aic.data_versions(systems, point.gpu, point.backend) if gpu is not None and gpu.has_aic_data else []
    if not versions:
        return Source(point.version, None, False, f"no {point.backend} data for {point.gpu}")
    ordered = nearest_first([v for v in versions if "dev" not in v] or versions, wanted)
    parsed = parse_config(config)
    worker = parsed.engine.workers.aggregated
    assert worker is not None
    reason = ""
    for version in ordered:
        try:
            aic.aic_engine(aic_key(parsed.engine, worker, version, str(systems)))
        except aic.AicUnavailable as exc:
            reason = reason or _short(str(exc))
            continue
        return Source(point.version, version, True)
    return Source(point.version, ordered[0], False, f"no {point.backend} version can time it: {reason}")


def _short(message: str) -> str:
    """An AIC failure in a few words (its error class and path left out)."""
    message = re.sub(r"^\w+Error: (perf database error: )?", "", message)
    return re.sub(r" at /\S+", "", message)[:110]


@dataclass
class PointResult:
    """A point's measurement and servesim's predictions per mode."""

    point: BenchmarkPoint
    source: Source
    requests: int
    predicted: dict[str, dict[str, float]] = field(default_factory=dict)
    """mode → metric (ttft, tpot, tput, completed, rejected) → value."""

    def measured(self, metric: str) -> float:
        p = self.point
        return {"ttft": p.mean_ttft_ms, "tpot": p.mean_tpot_ms, "tput": p.tput_per_gpu}[metric]

    def error(self, mode: str, metric: str) -> float:
        """100·(predicted / measured − 1); for throughput + means servesim serves more."""
        value = self.predicted[mode][metric]
        return 100.0 * (value / self.measured(metric) - 1.0) if value == value else float("nan")


def summarise(records: Sequence[dict[str, Any]], num_gpus: int) -> dict[str, float]:
    """Mean TTFT, mean TPOT and throughput per GPU of a run's per-request records."""
    done = [r for r in records if r["terminal_status"] == "completed" and r["output_length"]]
    out: dict[str, float] = {"completed": float(len(done)), "rejected": float(len(records) - len(done))}
    if not done:
        return {**out, "ttft": float("nan"), "tpot": float("nan"), "tput": float("nan")}
    tpot = [(r["last_token_ms"] - r["first_token_ms"]) / (r["output_length"] - 1) for r in done
            if r["output_length"] >= 2]
    start = min(r["arrival_time_ms"] for r in done)
    end = max(r["terminal_time_ms"] for r in done)
    tokens = sum(r["input_length"] + r["output_length"] for r in done)
    out["ttft"] = float(np.mean([r["ttft_ms"] for r in done]))
    out["tpot"] = float(np.mean(tpot)) if tpot else float("nan")
    out["tput"] = tokens / ((end - start) / 1000.0) / num_gpus if end > start else float("nan")
    return out


def run_point(point: BenchmarkPoint, requests: int | None = None, modes: Sequence[str] = MODES) -> PointResult:
    """Simulate one point in each mode."""
    from servesim.api import simulate

    with tempfile.TemporaryDirectory(prefix="servesim-point-") as folder:
        trace = write_trace(point, Path(folder) / "requests.jsonl", requests)
        source = choose_version(point, point_config(point, trace))
        result = PointResult(point, source, min(requests or point.num_prompts, point.num_prompts))
        for mode in modes:
            config = point_config(point, trace, source.version)
            if mode == "reference":
                config["compat"] = "reference"
            report = simulate(config, capture_per_request=True, unservable="reject")
            result.predicted[mode] = summarise(report.per_request or (), point.num_gpus)
    return result


def validate_points(points: Sequence[BenchmarkPoint], requests: int | None = None,
                    progress: bool = False, modes: Sequence[str] = MODES) -> list[PointResult]:
    """Every point's result (warnings of the timing fallback are left to the table's source column)."""
    results = []
    logger = logging.getLogger("servesim")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        for point in points:
            if progress:
                print(f"[validate] {point.row_id} ...", file=sys.stderr)
            results.append(run_point(point, requests, modes))
    finally:
        logger.setLevel(level)
    return results


def _cell(value: float) -> str:
    if value != value:
        return "—"
    return f"{value:,.1f}" if abs(value) >= 10 else f"{value:,.2f}"


def _pct(value: float) -> str:
    return "—" if value != value else f"{value:+.0f} %"


def mae(results: Sequence[PointResult], mode: str, metric: str) -> tuple[float, float]:
    """(mean absolute, mean signed) error in % over the points servesim predicted."""
    errors = [r.error(mode, metric) for r in results if mode in r.predicted]
    errors = [e for e in errors if e == e]
    if not errors:
        return float("nan"), float("nan")
    return float(np.mean(np.abs(errors))), float(np.mean(errors))


def render(results: Sequence[PointResult], modes: Sequence[str] = MODES) -> str:
    """The Markdown tables: the MAE summary, then every point (measured, predicted, error)."""
    lines = ["Mean absolute error of the per-point means (signed mean in brackets; + = servesim "
             "slower, or for throughput higher):", "",
             "| mode | TTFT mean | TPOT mean | throughput / GPU | points predicted |", "|---|---:|---:|---:|---:|"]
    for mode in modes:
        cells = []
        for metric in METRICS:
            absolute, signed = mae(results, mode, metric)
            cells.append(f"{absolute:.0f} % ({signed:+.0f})" if absolute == absolute else "—")
        served = sum(1 for r in results if r.predicted.get(mode, {}).get("completed", 0) > 0)
        label = "defaults" if mode == "default" else "`--compat reference`"
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {served} / {len(results)} |")
    lines += ["", "| point | timing source | requests | TTFT ms measured | " + " | ".join(
        f"TTFT {m}" for m in modes) + " | TPOT ms measured | " + " | ".join(f"TPOT {m}" for m in modes)
        + " | tok/s/GPU measured | " + " | ".join(f"tok/s/GPU {m}" for m in modes) + " |",
        "|---|---|---:|" + "---:|" * (3 * (1 + len(modes)))]
    for r in results:
        cells = [r.point.row_id, r.source.describe(r.point.backend), str(r.requests)]
        for metric in METRICS:
            cells.append(_cell(r.measured(metric)))
            for mode in modes:
                cells.append(f"{_cell(r.predicted[mode][metric])} ({_pct(r.error(mode, metric))})")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
