"""`servesim compare`: several runs side by side — overlaid CDFs and a table of differences.

A run is a servesim output directory (`prediction.json`, with `requests.jsonl` or
`requests.parquet` when per-request records were captured) or a measured run that
`servesim.measured` reads (per-request JSONL, AIPerf export, vLLM benchmark JSON). The first run
is the baseline the differences are relative to.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servesim.errors import ConfigError
from servesim.report.html.charts import cdf_chart
from servesim.report.html.page import COLORS, Page, plotly_modules
from servesim.report.latency import LABELS, METRICS, SUMMARY_NAMES, LatencySamples, quantile
from servesim.report.sla import Sla

STATS = ("mean", "p50", "p90", "p99")
_SUMMARY_PREFIX = {"mean": "mean", "p50": "median", "p90": "p90", "p99": "p99"}
_PERCENTILE_POINTS = (("min", 0.0), ("median", 0.5), ("p75", 0.75), ("p90", 0.9), ("p95", 0.95),
                      ("p99", 0.99), ("max", 1.0))


@dataclass
class ComparedRun:
    """One input of a comparison: its latency samples (if it has per-request data) and figures."""

    name: str
    kind: str
    latency: LatencySamples | None
    stats: dict[str, dict[str, float]] = field(default_factory=dict)
    """Per metric: mean, p50, p90, p99 (ms)."""
    figures: dict[str, float] = field(default_factory=dict)
    """Requests, completed requests, throughputs."""
    percentiles: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    """Per metric, (value, fraction) points of a run known only by its summary."""


def load_run(path: str | Path, name: str | None = None) -> ComparedRun:
    """Read one input of a comparison (a servesim output directory or a measured run)."""
    path = Path(path)
    if os.path.lexists(path / "prediction.json"):  # a folder there: a broken output, not a measurement
        return _servesim_run(path, name or path.name)
    from servesim.measured import load_measured

    measured = load_measured(path, replayable=False)
    file = Path(measured.path)
    label = name or (file.parent.name if file.name in ("requests.jsonl", "profile_export.jsonl") else file.stem)
    latency = measured.latency()
    run = ComparedRun(label, f"measured ({measured.format})", latency, _sample_stats(latency))
    run.figures = {"requests": measured.num_requests, "completed_requests": len(measured), **measured.throughput()}
    return run


def _servesim_run(path: Path, name: str) -> ComparedRun:
    """A servesim output folder, streamed and checked (`compare_inputs`)."""
    from servesim.report.html.compare_inputs import read_latency, read_summary, summary_number

    file = path / "prediction.json"
    summary, has_records = read_summary(file)
    latency = read_latency(path, has_records)
    stats = {m: {s: summary_number(file, summary, f"{_SUMMARY_PREFIX[s]}_{SUMMARY_NAMES[m]}") for s in STATS}
             for m in METRICS if f"mean_{SUMMARY_NAMES[m]}" in summary}
    run = ComparedRun(name, "servesim", latency, stats)
    run.figures = {key: summary_number(file, summary, key) for key in
                   ("num_requests", "completed_requests", "request_throughput_rps", "output_throughput_tok_s")}
    run.figures["requests"] = run.figures.pop("num_requests")
    if latency is None:
        run.percentiles = {m: [(summary_number(file, summary, f"{p}_{SUMMARY_NAMES[m]}"), q)
                               for p, q in _PERCENTILE_POINTS] for m in stats}
    return run


def _sample_stats(latency: LatencySamples) -> dict[str, dict[str, float]]:
    out = {}
    for metric in METRICS:
        values, weights = latency.values(metric)
        if len(values):
            mean = float((values * weights).sum() / weights.sum()) if weights is not None else float(values.mean())
            out[metric] = {"mean": mean, "p50": quantile(values, weights, 0.5),
                           "p90": quantile(values, weights, 0.9), "p99": quantile(values, weights, 0.99)}
    return out


def compare_page(runs: Sequence[ComparedRun], sla: Sla | None = None) -> Page:
    """The comparison page: difference table, then one overlaid CDF per latency."""
    from servesim.report.html.run import sla_targets

    names = [r.name for r in runs]
    page = Page("servesim comparison", " vs ".join(names))
    page.section("Runs")
    page.table(("run", "kind", "requests", "completed"),
               [(r.name, r.kind, f"{int(r.figures.get('requests', 0)):,}",
                 f"{int(r.figures.get('completed_requests', 0)):,}") for r in runs])
    page.section(f"Differences (relative to {names[0]})")
    page.table(("metric", *names, *(f"{n} vs {names[0]}" for n in names[1:])), _difference_rows(runs))
    page.section("Latency distributions")
    if any(r.latency is None for r in runs):
        page.note("Runs without per-request records are drawn from their summary percentiles (markers).")
    if any(r.kind.startswith("measured") and r.latency is not None for r in runs):
        page.note("Where a measured run has no per-token times, its ITL samples are each request's TPOT.")
    targets = sla_targets(sla)
    page.charts_grid([_overlaid_cdf(m, runs, targets[m]) for m in METRICS])
    return page


def _overlaid_cdf(metric: str, runs: Sequence[ComparedRun], sla_ms: float | None) -> Any:
    go, _ = plotly_modules()
    sampled = [(i, r.name, r.latency) for i, r in enumerate(runs) if r.latency is not None]
    fig = cdf_chart(metric, [(name, latency) for _, name, latency in sampled], sla_ms,
                    colors=[COLORS[i % len(COLORS)] for i, _, _ in sampled] or COLORS)
    for i, run in enumerate(runs):
        if run.latency is None and metric in run.percentiles:
            x, y = zip(*run.percentiles[metric], strict=True)
            fig.add_trace(go.Scatter(x=x, y=y, name=f"{run.name} (percentiles)", mode="markers+lines",
                                     line={"dash": "dot", "color": COLORS[i % len(COLORS)]}))
    fig.update_layout(showlegend=True)
    return fig


def _difference_rows(runs: Sequence[ComparedRun]) -> list[list[str]]:
    rows = []
    for metric in METRICS:
        for stat in STATS:
            values = [r.stats.get(metric, {}).get(stat) for r in runs]
            if all(v is None for v in values):
                continue
            label = f"{LABELS[metric].split(' (')[0]} {stat} (ms)"
            rows.append(_row(label, values, "{:,.2f}"))
    for key, label, fmt in (("request_throughput_rps", "Request throughput (req/s)", "{:,.3f}"),
                            ("output_throughput_tok_s", "Output throughput (tok/s)", "{:,.1f}")):
        rows.append(_row(label, [r.figures.get(key) for r in runs], fmt))
    return rows


def _row(label: str, values: Sequence[float | None], fmt: str) -> list[str]:
    shown = [fmt.format(v) if _number(v) else "—" for v in values]
    base = values[0]
    deltas = [f"{(v - base) / base:+.1%}" if v is not None and base and _number(v) and _number(base) else "—"
              for v in values[1:]]
    return [label, *shown, *deltas]


def _number(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


def write_compare(paths: Sequence[str], out: Path, labels: Sequence[str] = (), sla: Sla | None = None) -> None:
    """Read every input and write the comparison page to `out` (checked writable first, then
    replaced atomically: `servesim.output_file`)."""
    from servesim.output_file import OutputFile

    plotly_modules()
    if len(labels) > len(paths):
        raise ConfigError(f"--label given {len(labels)} times for {len(paths)} runs")
    target = OutputFile("-o", out)
    target.check()
    runs = [load_run(p, labels[i] if i < len(labels) else None) for i, p in enumerate(paths)]
    target.write(compare_page(runs, sla).render())
