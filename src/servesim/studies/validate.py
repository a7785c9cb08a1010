"""`servesim validate`: servesim against the open real vLLM runs, under `compat: reference` and
with servesim's defaults.

For each run of `servesim.studies.openruns` the run's config is simulated twice — under
``compat: reference`` (the reference's timing model: ``mixed_pass: sum``) and with no fidelity
key set (servesim's defaults: fused mixed passes, async scheduling, front-end latency) — and the mean, p50, p90 and p99 of TTFT, TPOT and E2E are compared with the measured
ones (client anchor). The result is a Markdown table, printed and optionally written into a
file (between ``<!-- servesim validate -->`` markers when the file has them).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from servesim.studies import openruns

METRICS = ("ttft", "tpot", "e2e")
STATS = ("mean", "p50", "p90", "p99")
MODES = ("reference", "default")
"""`compat: reference`, and servesim's defaults (no fidelity key set)."""


def describe(values: np.ndarray) -> dict[str, float]:
    """Mean and linear-interpolated p50/p90/p99 of a sample (NaNs left out)."""
    values = values[~np.isnan(values)]
    return {"mean": float(np.mean(values)), "p50": float(np.percentile(values, 50)),
            "p90": float(np.percentile(values, 90)), "p99": float(np.percentile(values, 99))}


def signed_error(value: float, real: float) -> float:
    """100·(value / real − 1): positive when servesim is slower than the real run."""
    return 100.0 * (value / real - 1.0)


def simulated_latencies(config: dict[str, Any]) -> dict[str, np.ndarray]:
    """TTFT, TPOT and E2E (ms) of every completed request of a simulation, in arrival order
    (TPOT is NaN below 2 tokens)."""
    from servesim.api import simulate

    report = simulate(config, capture_per_request=True)
    done = [r for r in report.per_request or () if r["terminal_status"] == "completed" and r["output_length"]]
    return {
        "ttft": np.array([r["ttft_ms"] for r in done]),
        "tpot": np.array([(r["last_token_ms"] - r["first_token_ms"]) / (r["output_length"] - 1)
                          if r["output_length"] >= 2 else np.nan for r in done]),
        "e2e": np.array([r["e2e_latency_ms"] for r in done]),
    }


@dataclass
class RunResult:
    """Measured and simulated statistics of one run."""

    name: str
    requests: int
    measured: dict[str, dict[str, float]]
    simulated: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)
    """mode → metric → statistic."""

    def error(self, mode: str, metric: str, stat: str = "mean") -> float:
        return signed_error(self.simulated[mode][metric][stat], self.measured[metric][stat])


def validate_run(run: openruns.OpenRun, data: Path, systems: str | None = None,
                 modes: Sequence[str] = MODES) -> RunResult:
    """Simulate one run in each mode and summarise it next to the measurement."""
    real = openruns.measured(run, data, "client")
    result = RunResult(run.name, len(real), {m: describe(v) for m, v in real.latencies().items()})
    for mode in modes:
        config = openruns.config(run, data, {"type": "default"}, systems)
        if mode == "reference":
            config["compat"] = "reference"
        result.simulated[mode] = {m: describe(v) for m, v in simulated_latencies(config).items()}
    return result


def validate(data: Path, systems: str | None = None, runs: Sequence[openruns.OpenRun] = openruns.RUNS,
             progress: bool = False) -> list[RunResult]:
    """Every run's result."""
    results = []
    for run in runs:
        if progress:
            print(f"[validate] {run.name} ...", file=sys.stderr)
        results.append(validate_run(run, data, systems))
    return results


def _num(value: float) -> str:
    return f"{value:,.1f}" if abs(value) >= 10 else f"{value:,.2f}"


def render(results: Sequence[RunResult], detail: bool = True) -> str:
    """The Markdown tables: mean errors of every run, then (`detail`) every statistic per run."""
    lines = ["Signed error of the mean, servesim vs measured (+ = servesim slower; *reference* = "
             "`--compat reference`, *default* = servesim's defaults):", "",
             "| run | TTFT reference | TTFT default | TPOT reference | TPOT default | E2E reference | E2E default |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for res in results:
        cells = [f"{res.error(mode, m):+.1f} %" for m in METRICS for mode in MODES]
        lines.append(f"| {res.name} | " + " | ".join(cells) + " |")
    mean_abs = {mode: [abs(res.error(mode, m)) for res in results for m in METRICS] for mode in MODES}
    if results:
        lines.append("| mean absolute error | " + " | ".join(
            f"{sum(abs(r.error(mode, m)) for r in results) / len(results):.1f} %" for m in METRICS for mode in MODES)
            + " |")
        lines += ["", "Over all runs and metrics: " + ", ".join(
            f"{mode} {sum(v) / len(v):.1f} %" for mode, v in mean_abs.items()) + " mean absolute error."]
    for res in results if detail else ():
        lines += ["", f"#### {res.name} ({res.requests} requests)", "",
                  "| metric | measured | reference | default | reference error | default error |",
                  "|---|---:|---:|---:|---:|---:|"]
        for m in METRICS:
            for stat in STATS:
                real = res.measured[m][stat]
                s, f = res.simulated["reference"][m][stat], res.simulated["default"][m][stat]
                lines.append(f"| {m.upper()} {stat} (ms) | {_num(real)} | {_num(s)} | {_num(f)} | "
                             f"{signed_error(s, real):+.1f} % | {signed_error(f, real):+.1f} % |")
    return "\n".join(lines) + "\n"


def section_text(existing: str | None, name: str, body: str) -> str:
    """`existing` with `body` between its ``<!-- name: begin -->`` and ``<!-- name: end -->``
    markers, or `body` alone when it lacks them (or there is no file)."""
    begin, end = f"<!-- {name}: begin -->", f"<!-- {name}: end -->"
    text = existing or ""
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        _, tail = rest.split(end, 1)
        return f"{head}{begin}\n{body.rstrip()}\n{end}{tail}"
    return body


def write_section(path: Path, name: str, body: str) -> None:
    """Put `body` between the ``<!-- name: begin -->`` and ``<!-- name: end -->`` markers of
    `path`, or write it as the whole file when the file lacks them (atomically: `OutputFile`)."""
    from servesim.output_file import OutputFile

    target = OutputFile("-o", path)
    target.write(section_text(target.check(read_existing=True), name, body))


def all_finite(results: Sequence[RunResult]) -> bool:
    return all(math.isfinite(v) for r in results for mode in r.simulated.values()
               for stats in mode.values() for v in stats.values())
