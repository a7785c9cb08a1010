"""The report of a `recommend` search: every candidate on the Pareto chart, the top-N table.

It reads the search's ledger (`recommendation.json`): the target, the SLA and the GPU budget,
and one entry per candidate with its knobs, its metrics (the summary of its replay, when it ran),
its score, whether it is feasible and, if not, why. Throughput per GPU is output tokens per
second per time-averaged provisioned GPU; throughput per user is the mean per-user output rate.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from servesim.report.html.page import COLORS, Page, plotly_modules

TOP_N = 10
MAX_LISTED = 500
"""Infeasible candidates listed one by one (the counts per reason cover all of them)."""


def throughput_per_gpu(metrics: Mapping[str, Any]) -> float | None:
    """Output tokens/s per time-averaged provisioned GPU (None without the fields)."""
    if "throughput_per_gpu" in metrics:
        return metrics["throughput_per_gpu"]
    try:
        duration_h = metrics["duration_ms"] / 3.6e6
        gpus = metrics["gpu_hours"] / duration_h
        return metrics["output_throughput_tok_s"] / gpus if gpus > 0 else None
    except (KeyError, TypeError, ZeroDivisionError):
        return None


def throughput_per_user(metrics: Mapping[str, Any]) -> float | None:
    """Mean output tokens/s a user sees (None without the field)."""
    return metrics.get("throughput_per_user", metrics.get("mean_output_token_throughput_per_user"))


def pareto_front(points: Sequence[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point beats on both coordinates (higher is better), by x."""
    order = sorted(range(len(points)), key=lambda i: (-points[i][0], -points[i][1]))
    front, best_y = [], -math.inf
    for i in order:
        if points[i][1] > best_y:
            front.append(i)
            best_y = points[i][1]
    return sorted(front, key=lambda i: points[i][0])


def write_search_report(ledger: Path | Mapping[str, Any], out: Path, base_dir: Path | None = None) -> None:
    """Write the search report for a ledger (a `recommendation.json` path or its content);
    links to `recommendations/NNNN.yaml` are relative to `base_dir` (the ledger's folder)."""
    plotly_modules()
    if isinstance(ledger, Path):
        base_dir = base_dir or ledger.parent
        content: Mapping[str, Any] = json.loads(ledger.read_text(encoding="utf-8"))
    else:
        content = ledger
    search_page(content, _relative_to(out, base_dir)).write(out)


def _relative_to(out: Path, base_dir: Path | None) -> str:
    """The prefix that makes ledger paths (relative to `base_dir`) valid links from `out`."""
    if base_dir is None:
        return ""
    try:
        rel = Path(base_dir).resolve().relative_to(out.resolve().parent)
    except ValueError:
        return Path(base_dir).resolve().as_uri() + "/"
    return "" if str(rel) == "." else rel.as_posix() + "/"


def search_page(ledger: Mapping[str, Any], link_prefix: str = "") -> Page:
    candidates = list(ledger.get("candidates", []))
    feasible = [c for c in candidates if c.get("feasible")]
    target = ledger.get("target", "?")
    page = Page("servesim recommendation", f"target {target} · {len(candidates)} candidates · "
                                            f"{len(feasible)} feasible")
    page.section("Search")
    page.table(("", "value"), _search_rows(ledger, candidates, feasible))
    page.section("Candidates: throughput per GPU against throughput per user")
    page.note("Every candidate that ran. Feasible ones in colour (the best ranked are numbered), "
              "infeasible ones grey (hover for the reason); the line joins the Pareto front of "
              "feasible candidates. The dashed line is the per-user rate the ITL target implies.")
    page.charts_grid([pareto_chart(candidates, ledger.get("sla") or {})])
    page.section(f"Top {min(TOP_N, len(feasible))} candidates")
    page.raw_table(("rank", "candidate", "GPUs", "score", "tok/s/GPU", "tok/s/user", "TTFT p90 (ms)",
                    "ITL p90 (ms)", "config"), _top_rows(feasible, link_prefix))
    infeasible = [c for c in candidates if not c.get("feasible")]
    if infeasible:
        page.section("Infeasible candidates")
        reasons: dict[str, int] = {}
        for c in infeasible:
            reasons[c.get("reason") or "unknown"] = reasons.get(c.get("reason") or "unknown", 0) + 1
        page.table(("reason", "candidates"), sorted(reasons.items(), key=lambda kv: -kv[1]))
        page.table(("candidate", "knobs", "reason"),
                   [(_label(c), _knobs(c), c.get("reason") or "unknown") for c in infeasible[:MAX_LISTED]])
    return page


def _sla_text(metric: str, bound: Any) -> str:
    """'ttft_ms ≤ 500', or for percentile targets 'itl_ms p99 ≤ 50'."""
    if isinstance(bound, Mapping):
        return ", ".join(f"{metric} {stat} ≤ {value:g}" for stat, value in bound.items())
    return f"{metric} ≤ {bound:g}"


def _search_rows(ledger: Mapping[str, Any], candidates: list, feasible: list) -> list[tuple[str, str]]:
    sla = ledger.get("sla") or {}
    budget = ledger.get("constraints") or ledger.get("gpu_budget") or {}
    rows = [("Target", str(ledger.get("target", "?"))),
            ("Candidates", f"{len(candidates)} ({len(feasible)} feasible)"),
            ("SLA", ", ".join(_sla_text(k, v) for k, v in sla.items() if v is not None) or "none"),
            ("GPU budget", ", ".join(f"{k} = {v}" for k, v in budget.items() if v is not None) or "none")]
    if ledger.get("algorithm"):
        rows.insert(1, ("Search", str(ledger["algorithm"])))
    return rows


def pareto_chart(candidates: Sequence[Mapping[str, Any]], sla: Mapping[str, Any]) -> Any:
    go, _ = plotly_modules()
    fig = go.Figure()
    placed: list[tuple[Mapping[str, Any], float, float]] = []
    for c in candidates:
        x, y = throughput_per_user(c.get("metrics") or {}), throughput_per_gpu(c.get("metrics") or {})
        if x is not None and y is not None:
            placed.append((c, x, y))
    bad = [(c, x, y) for c, x, y in placed if not c.get("feasible")]
    good = [(c, x, y) for c, x, y in placed if c.get("feasible")]
    if bad:
        fig.add_trace(go.Scatter(x=[x for _, x, _ in bad], y=[y for _, _, y in bad], mode="markers",
                                 name="infeasible", marker={"color": "#b8c2cc", "symbol": "x", "size": 8},
                                 text=[f"{_label(c)}: {html.escape(c.get('reason') or '')}<br>{_knobs(c)}" for c, _, _ in bad],
                                 hovertemplate="%{text}<extra></extra>"))
    if good:
        ranked = sorted(good, key=lambda point: _rank_key(point[0]))
        top = {id(c) for c, _, _ in ranked[:TOP_N]}
        fig.add_trace(go.Scatter(
            x=[x for _, x, _ in good], y=[y for _, _, y in good], mode="markers+text", name="feasible",
            marker={"color": COLORS[0], "size": [12 if id(c) in top else 8 for c, _, _ in good]},
            text=[str(c.get("rank")) if id(c) in top and c.get("rank") else "" for c, _, _ in good],
            textposition="top center",
            customdata=[f"{_label(c)}<br>{_knobs(c)}" for c, _, _ in good],
            hovertemplate="%{customdata}<br>%{x:.1f} tok/s/user, %{y:.1f} tok/s/GPU<extra></extra>"))
        front = pareto_front([(x, y) for _, x, y in good])
        fig.add_trace(go.Scatter(x=[good[i][1] for i in front], y=[good[i][2] for i in front], mode="lines",
                                 name="Pareto front", line={"color": COLORS[1], "shape": "linear"}))
    if isinstance(sla.get("itl_ms"), (int, float)) and sla["itl_ms"]:  # a per-request ITL bound
        fig.add_vline(x=1000.0 / sla["itl_ms"], line={"color": "#b03a2e", "dash": "dash", "width": 1.5})
    fig.update_layout(title={"text": "Throughput per GPU vs per user", "x": 0.02}, height=460)
    fig.update_xaxes(title_text="output tokens/s per user")
    fig.update_yaxes(title_text="output tokens/s per GPU", rangemode="tozero")
    return fig


def _rank_key(c: Mapping[str, Any]) -> tuple[float, float]:
    rank = c.get("rank")
    score = c.get("score")
    return (rank if rank is not None else math.inf, -score if isinstance(score, (int, float)) else math.inf)


def _top_rows(feasible: Sequence[Mapping[str, Any]], link_prefix: str) -> list[list[str]]:
    rows = []
    for c in sorted(feasible, key=_rank_key)[:TOP_N]:
        metrics = c.get("metrics") or {}
        link = c.get("recommendation", c.get("config_path"))
        config = (f'<a href="{html.escape(link_prefix + link)}">{html.escape(Path(link).name)}</a>'
                  if link else "—")
        rows.append([html.escape(str(c.get("rank", "—"))), html.escape(_knobs(c)), html.escape(str(c.get("gpus", c.get("used_gpus", "—")))),
                     _fmt(c.get("score")), _fmt(throughput_per_gpu(metrics)), _fmt(throughput_per_user(metrics)),
                     _fmt(metrics.get("p90_ttft_ms")), _fmt(metrics.get("p90_itl_ms")), config])
    return rows


def _label(c: Mapping[str, Any]) -> str:
    return f"#{c.get('id', c.get('trial', c.get('rank', '?')))}"


def _knobs(c: Mapping[str, Any]) -> str:
    knobs = c.get("knobs") or {}
    return ", ".join(f"{k}={v}" for k, v in knobs.items())


def _fmt(value: Any) -> str:
    return f"{value:,.2f}" if isinstance(value, (int, float)) and math.isfinite(value) else "—"
