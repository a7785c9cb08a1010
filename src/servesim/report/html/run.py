"""The report of one simulation: headline, latency distributions, state over time, planner."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from servesim.collect.sampler import TimeSeries, WorkerSeries
from servesim.report.html.charts import cdf_chart, lines_chart, within
from servesim.report.html.page import Page, plotly_modules
from servesim.report.html.planner import planner_section
from servesim.report.latency import METRICS, SUMMARY_NAMES, LatencySamples, rate_per_second
from servesim.report.headline import headline_items
from servesim.report.sla import achieved_text, margin_text, overall_line, status, target_label, within_text
from servesim.report.sla import Sla

MAX_WORKER_LINES = 12
"""Pools with more workers show their total and their busiest worker instead of every line."""
POOL_TITLES = {"agg": "", "prefill": "prefill pool: ", "decode": "decode pool: "}


class RunReport(Protocol):
    """What the page reads of a run's report (`servesim.api.Report`)."""

    @property
    def summary(self) -> Mapping[str, Any]: ...
    @property
    def timeseries(self) -> TimeSeries | None: ...
    @property
    def latency(self) -> LatencySamples | None: ...
    @property
    def sla(self) -> Sla | None: ...
    @property
    def deployment(self) -> Mapping[str, str] | None: ...


def write_run_report(report: RunReport, path: Path, title: str = "servesim prediction") -> None:
    """Write `report` as a self-contained HTML file."""
    if report.timeseries is None or report.latency is None:
        raise ValueError("the HTML report needs the run's time series: simulate(..., timeseries=True)")
    plotly_modules()  # fail early, with the install hint, if plotly is missing
    extensions = getattr(report, "extensions", None) or {}
    run_page(report.summary, report.latency, report.timeseries, report.sla, title,
             deployment=report.deployment, provenance=getattr(report, "provenance", None),
             tiers=extensions.get("kv_tiers")).write(path)


def sla_targets(sla: Sla | None) -> dict[str, float | None]:
    """The threshold drawn on each distribution: a request's TPOT (its mean gap) is what the
    ITL target bounds; the ITL chart shows the same line for reference."""
    if sla is None:
        return dict.fromkeys(METRICS)
    return {"ttft_ms": sla.ttft_ms, "tpot_ms": sla.itl_ms, "itl_ms": sla.itl_ms, "e2e_ms": sla.e2e_ms}


def run_page(summary: Mapping[str, Any], latency: LatencySamples, series: TimeSeries,
             sla: Sla | None, title: str, deployment: Mapping[str, str] | None = None,
             provenance: Mapping[str, Any] | None = None, tiers: Mapping[str, Any] | None = None) -> Page:
    """The page of one run (`deployment`, `provenance`: what was simulated, for the headline)."""
    subtitle = (f"{summary['num_requests']:,} requests · {summary['duration_ms'] / 1000:,.1f} s simulated · "
                f"{summary['gpu_hours']:.3g} GPU-hours")
    if deployment:
        subtitle = " · ".join(deployment[k] for k in ("model", "gpu", "deployment", "load") if k in deployment) \
            + " · " + subtitle
    page = Page(title, subtitle)
    if deployment or provenance:
        simulated(page, deployment or {}, summary, provenance)
    headline(page, summary, latency, sla)
    if tiers:
        tiers_section(page, tiers)
    if isinstance(summary.get("sla"), Mapping):
        verdicts_section(page, summary["sla"])
    if isinstance(summary.get("trajectories"), Mapping):
        trajectories_section(page, summary["trajectories"])
    page.section("Latency distributions")
    page.note("Empirical CDFs over completed requests; dashed lines mark the SLA targets "
              "(the ITL target bounds each request's TPOT, its mean inter-token gap).")
    if not summary["completed_requests"]:
        page.note("No request completed: the distributions are empty.")
    targets = sla_targets(sla)
    page.charts_grid([cdf_chart(m, [("run", latency)], targets[m]) for m in METRICS])
    over_time(page, latency, series)
    if summary.get("planner"):
        planner_section(page, summary["planner"])
    return page


def headline(page: Page, summary: Mapping[str, Any], latency: LatencySamples, sla: Sla | None) -> None:
    """The key figures and the latency table."""
    page.section("Headline")
    done, total = summary["completed_requests"], summary["num_requests"]
    rows: list[tuple[str, str]] = [
        ("Requests completed", f"{done:,} of {total:,}" + (f" ({total - done:,} not completed)" if done < total else "")),
        ("Simulated duration", f"{summary['duration_ms'] / 1000:,.2f} s"),
        ("Request throughput", f"{summary['request_throughput_rps']:,.2f} req/s"),
        ("Output throughput", f"{summary['output_throughput_tok_s']:,.1f} tok/s"),
        ("GPU-hours", f"{summary['gpu_hours']:.4g}"),
        ("Prefix-cache reused ratio", f"{summary['prefix_cache_reused_ratio']:.1%}"),
    ]
    if "goodput_completed_requests" in summary:
        good = summary["goodput_completed_requests"]
        share = good / done if done else 0.0
        rows.insert(2, ("Goodput (every per-request SLA target met)",
                        f"{good:,} requests ({share:.1%}) · {summary['goodput_request_throughput_rps']:,.2f} req/s"
                        f" · {summary['goodput_output_throughput_tok_s']:,.1f} tok/s"))
    row_classes = [["", ""] for _ in rows]
    block = summary.get("sla")
    if isinstance(block, Mapping):
        rows.insert(0, ("SLA verdict", f"{status(block['met'])} — {block['targets_met']} of "
                                       f"{len(block['targets'])} targets met (see SLA verdicts)"))
        row_classes.insert(0, ["", "good" if block["met"] else "bad"])
    page.table(("", "value"), rows, row_classes)
    targets = sla_targets(sla)
    table, classes = [], []
    for metric in METRICS:
        key = SUMMARY_NAMES[metric]
        if f"mean_{key}" not in summary:
            continue
        stats = [f"{summary[f'{s}_{key}']:,.2f}" for s in ("mean", "median", "p90", "p99", "max")]
        target = targets[metric]
        values, weights = latency.values(metric)
        share = within(values, weights, target) if target is not None else None
        table.append([metric.removesuffix("_ms").upper() + " (ms)", *stats,
                      f"{target:g}" if target is not None else "—",
                      f"{share:.1%}" if share is not None and not math.isnan(share) else "—"])
        verdict = "" if target is None else ("good" if summary[f"p90_{key}"] <= target else "bad")
        classes.append(["", "", "", verdict, "", "", "", ""])
    page.table(("latency", "mean", "p50", "p90", "p99", "max", "SLA", "within SLA"), table, classes)


def tiers_section(page: Page, tiers: Mapping[str, Any]) -> None:
    """Where reused prompt tokens came from (GPU pool, host memory) and the bytes each tier moved."""
    page.section("KV cache tiers")
    gpu, host = tiers["gpu_reused_tokens"], tiers["host_reused_tokens"]
    reused = gpu + host

    def share(tokens: int) -> str:
        return f"{tokens:,} tokens ({tokens / reused:.1%} of reused)" if reused else f"{tokens:,} tokens"

    rows = [("Reused from the GPU pool", share(gpu)), ("Reused from host memory", share(host)),
            ("Stored to host memory", _bytes(tiers["host_stored_bytes"])),
            ("Loaded from host memory", _bytes(tiers["host_loaded_bytes"]))]
    if "disk_read_bytes" in tiers:
        rows += [("Written to disk", _bytes(tiers["disk_written_bytes"])),
                 ("Read from disk", _bytes(tiers["disk_read_bytes"]))]
    if "peer_pulled_bytes" in tiers:
        rows.append(("Pulled from peer host tiers (kvcr)", _bytes(tiers["peer_pulled_bytes"])))
    rows.append(("Passes waiting for copies to host", f"{tiers.get('store_wait_ms', 0.0):,.3f} ms"))
    shared = tiers.get("shared_pool_ranks", 0)
    rows.append(("Host memory", f"one pool shared by {shared} ranks" if shared else "a tier per rank"))
    page.note("Prompt tokens admissions reused, by the tier they came from (host hits include blocks "
              "read back from disk), the bytes each tier moved, and how long passes waited for a GPU "
              "block's copy to host memory before reusing it.")
    page.table(("", "value"), rows)


def _bytes(count: int) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if count >= size:
            return f"{count / size:,.2f} {unit} ({count:,} bytes)"
    return f"{count:,} bytes"


def simulated(page: Page, deployment: Mapping[str, str], summary: Mapping[str, Any],
              provenance: Mapping[str, Any] | None) -> None:
    """What was simulated: the deployment, the offered load and where the numbers come from."""
    page.section("What was simulated")
    rows = headline_items(deployment, summary)
    rows += [(f"Provenance: {key}", str(value)) for key, value in (provenance or {}).items()]
    page.table(("", "value"), rows)


TRAJECTORY_ROWS = 200
"""Trajectories listed one by one in the HTML report (the rest are counted)."""


def trajectories_section(page: Page, block: Mapping[str, Any]) -> None:
    """Per trajectory (play): its E2E latency, the time its model requests were in flight and
    the rest (tool calls, think time, dependency delays); report/trajectories.py."""
    def ms(value: float | None) -> str:
        return "—" if value is None else f"{value:,.1f}"

    plays = block["plays"]
    page.section("Trajectories")
    page.note(f"{len(plays):,} trajectories. Model time: while at least one of its requests was in flight; "
              "wait: the rest of its E2E latency (tool calls, think time, dependency delays). Means over "
              f"completed trajectories: E2E {ms(block['mean_e2e_ms'])} ms, model {ms(block['mean_model_ms'])} ms, "
              f"wait {ms(block['mean_wait_ms'])} ms.")
    rows = [[p["play_id"], p["status"], f"{p['requests']:,}", ms(p["e2e_ms"]), ms(p["model_ms"]), ms(p["wait_ms"])]
            for p in plays[:TRAJECTORY_ROWS]]
    page.table(("trajectory", "status", "requests", "E2E ms", "model ms", "wait ms"), rows)
    if len(plays) > TRAJECTORY_ROWS:
        page.note(f"… and {len(plays) - TRAJECTORY_ROWS:,} more (prediction.json, `trajectories`).")


def verdicts_section(page: Page, block: Mapping[str, Any]) -> None:
    """Every SLA target: met or missed, the value achieved and the margin (report/sla.py)."""
    page.section("SLA verdicts")
    page.note(overall_line(block) + ". Margin = target − achieved (positive: headroom). A per-request "
              "target is met when every request is within it (achieved: the worst request); a "
              "percentile target when that statistic of the run is within it.")
    rows, classes = [], []
    for target in block["targets"]:
        pct = target["margin_pct"]
        rows.append([target_label(target), status(target["met"]), achieved_text(target),
                     margin_text(target).split(" (")[0], "—" if pct is None else f"{pct:+,.1f}%".replace("-", "−"),
                     within_text(target) or "—"])
        verdict = "good" if target["met"] else "bad"
        classes.append(["", verdict, "", verdict, verdict, ""])
    page.table(("target", "verdict", "achieved", "margin", "margin %", "requests within"), rows, classes)


def over_time(page: Page, latency: LatencySamples, series: TimeSeries) -> None:
    """Traffic, queues, batches, KV-cache use and prefix hits over simulated time."""
    x = (series.start_ms + series.width_ms / 2) / 1000
    edges = np.append(series.start_ms, series.start_ms[-1] + series.width_ms)
    page.section("Over simulated time")
    page.note(f"Each point is a {series.width_ms / 1000:.3g} s bucket: time-weighted means of what "
              "each worker held between its pass ends; prefix-hit rate over the prompt tokens admitted "
              "in the bucket.")
    traffic = lines_chart("Arrivals and completions", x,
                          [("arrivals/s", rate_per_second(latency.arrival_ms, edges)),
                           ("completions/s", rate_per_second(latency.completion_ms, edges))], "requests per second")
    charts = [traffic]
    for pool in series.pools():
        workers = series.of_pool(pool)
        prefix = POOL_TITLES.get(pool, f"{pool} pool: ")
        charts += [
            lines_chart(prefix + "waiting requests", x, _lines(workers, "waiting", np.nansum), "requests"),
            lines_chart(prefix + "running requests", x, _lines(workers, "running", np.nansum), "requests"),
            lines_chart(prefix + "KV-cache use", x, _lines(workers, "kv_usage", np.nanmean), "blocks in use",
                        percent=True),
            lines_chart(prefix + "prefix-cache hit rate", x, _hit_lines(workers), "prompt tokens from cache",
                        percent=True, mode="lines+markers"),
        ]
    page.charts_grid(charts)


def _lines(workers: list[WorkerSeries], name: str, combine: Any) -> list[tuple[str, np.ndarray]]:
    """One line per worker, or for a large pool its combined line and its busiest worker."""
    arrays = [getattr(w, name) for w in workers]
    if len(workers) <= MAX_WORKER_LINES:
        return [(f"worker {w.worker_id}", a) for w, a in zip(workers, arrays, strict=True)]
    stacked = np.vstack(arrays)
    observed = ~np.all(np.isnan(stacked), axis=0)
    total = np.full(stacked.shape[1], np.nan)
    peak = np.full(stacked.shape[1], np.nan)
    total[observed] = combine(stacked[:, observed], axis=0)
    peak[observed] = np.nanmax(stacked[:, observed], axis=0)
    label = "all workers (sum)" if combine is np.nansum else "all workers (mean)"
    return [(label, total), ("busiest worker", peak)]


def _hit_lines(workers: list[WorkerSeries]) -> list[tuple[str, np.ndarray]]:
    if len(workers) <= MAX_WORKER_LINES:
        return [(f"worker {w.worker_id}", w.hit_rate) for w in workers]
    hits = np.sum([w.prefix_hits for w in workers], axis=0)
    tokens = np.sum([w.prompt_tokens for w in workers], axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return [("all workers", np.where(tokens > 0, hits / tokens, np.nan))]
