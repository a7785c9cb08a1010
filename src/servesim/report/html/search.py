"""The report of a `recommend` search: the answer, the sizing (capacity curves), every replayed
candidate on the Pareto chart, the top-N table and what missed the target.

It reads the search's ledger (`recommendation.json`): the target, the SLA and the GPU budget,
one entry per candidate with its knobs, its metrics (the summary of its replay, when it ran),
its score, whether it meets the target and, if not, why; and per shape the sizing answer
(fewest GPUs that meet the target, the capacity curve). Throughput per GPU is output tokens per
second per time-averaged provisioned GPU; throughput per user is the mean per-user output rate.
Only candidates that meet the target are drawn in colour or ranked: one that ran but missed
the SLA (or min_goodput_rps) is drawn as a miss, one that never ran is only listed.
"""

from __future__ import annotations

import html
import json
import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from servesim.report.html.page import COLORS, Page, plotly_modules

TOP_N = 10
MAX_LISTED = 500
"""Candidates that missed or never ran, listed one by one (the counts per reason cover all)."""
MISS_COLOR = "#d9623b"
ROLES = ("aggregated", "prefill", "decode")
SPLIT_TAGS = (("pipeline", "pp"), ("attention_data", "dp"), ("moe_tensor", "mtp"), ("moe_expert", "ep"))


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


def missed_target(c: Mapping[str, Any]) -> bool:
    """A candidate that ran (has metrics) but does not meet the target."""
    return not c.get("feasible") and bool(c.get("metrics"))


def search_page(ledger: Mapping[str, Any], link_prefix: str = "") -> Page:
    """The page: search summary, sizing, Pareto chart, top table, misses and rejects."""
    candidates = list(ledger.get("candidates", []))
    feasible = [c for c in candidates if c.get("feasible")]
    missed = [c for c in candidates if missed_target(c)]
    target = ledger.get("target", "?")
    page = Page("servesim recommendation", f"target {target} · {len(candidates)} candidates · "
                                            f"{len(feasible)} meet the target · {len(missed)} miss it")
    page.section("Search")
    page.table(("", "value"), _search_rows(ledger, candidates, feasible))
    sizing = list(ledger.get("sizing") or [])
    if sizing:
        page.section("Sizing: the fewest GPUs that meet the target, per shape")
        page.note("Per shape (mode, backend, worker split), each GPU count replayed: the request rate "
                  "served within the SLA at the offered load. Filled markers meet the target, open ones "
                  "miss it — the step from open to filled is the fewest GPUs that hold.")
        page.charts_grid([capacity_chart(sizing)])
        page.table(("shape", "fewest GPUs", "misses at", "curve (GPUs: SLA req/s)"), _sizing_rows(sizing))
    page.section("Candidates: throughput per GPU against throughput per user")
    page.note("Every candidate that ran. Those that meet the target in blue (the best ranked are "
              "numbered), those that miss it as orange crosses (hover for what they missed); the line "
              "joins the Pareto front of the qualifying ones. The dashed line is the per-user rate the "
              "ITL target implies.")
    page.charts_grid([pareto_chart(candidates, ledger.get("sla") or {})])
    page.section(f"Top {min(TOP_N, len(feasible))} candidates" if feasible else "No candidate meets the target")
    if feasible:
        headers, rows = _top_table(feasible, link_prefix)
        page.raw_table(headers, rows)
    _rejects(page, missed, [c for c in candidates if not c.get("feasible") and not missed_target(c)])
    return page


def _rejects(page: Page, missed: list, never_ran: list) -> None:
    if missed:
        page.section(f"Missed the target ({len(missed)})")
        page.table(("candidate", "GPUs", "shape", "SLA met", "reason"),
                   [(_label(c), _gpus(c), _shape_text(c.get("knobs") or {}), _attainment(c.get("metrics") or {}),
                     c.get("reason") or "misses the target") for c in missed[:MAX_LISTED]])
    if never_ran:
        page.section(f"Not replayed ({len(never_ran)})")
        reasons: dict[str, int] = {}
        for c in never_ran:
            reasons[c.get("reason") or "unknown"] = reasons.get(c.get("reason") or "unknown", 0) + 1
        page.table(("reason", "candidates"), sorted(reasons.items(), key=lambda kv: -kv[1]))
        page.table(("candidate", "GPUs", "shape", "reason"),
                   [(_label(c), _gpus(c), _shape_text(c.get("knobs") or {}), c.get("reason") or "unknown")
                    for c in never_ran[:MAX_LISTED]])


def _sla_text(metric: str, bound: Any) -> str:
    """'ttft_ms ≤ 500', or for percentile targets 'itl_ms p99 ≤ 50'."""
    if isinstance(bound, Mapping):
        return ", ".join(f"{metric} {stat} ≤ {value:g}" for stat, value in bound.items())
    return f"{metric} ≤ {bound:g}"


def _search_rows(ledger: Mapping[str, Any], candidates: list, feasible: list) -> list[tuple[str, str]]:
    sla = ledger.get("sla") or {}
    budget = ledger.get("constraints") or ledger.get("gpu_budget") or {}
    rows = [("Target", str(ledger.get("target", "?"))),
            ("Candidates", f"{len(candidates)} ({len(feasible)} meet the target)"),
            ("SLA", ", ".join(_sla_text(k, v) for k, v in sla.items() if v is not None) or "none"),
            ("GPU budget", ", ".join(f"{k} = {v}" for k, v in budget.items() if v is not None) or "none")]
    gates = [f"at least {100 * ledger['sla_attainment']:g} % of requests within the SLA"
             if ledger.get("sla_attainment") is not None and sla else "",
             "means within the SLA (strict_sla)" if ledger.get("strict_sla") else "",
             f"SLA-meeting rate ≥ {ledger['min_goodput_rps']:g} req/s" if ledger.get("min_goodput_rps") else ""]
    if any(gates):
        rows.append(("Meets the target when", "; ".join(g for g in gates if g)))
    if ledger.get("algorithm"):
        rows.insert(1, ("Search", str(ledger["algorithm"])))
    coverage = ledger.get("coverage") or {}
    if coverage.get("space"):
        rows.append(("Coverage", f"{coverage['evaluated']} of {coverage['space']} candidates evaluated"))
    rows += [("Note", note) for note in ledger.get("notes") or [] if "evaluated" not in note]
    closest = next((c for c in candidates if c.get("trial") == ledger.get("closest")), None)
    if not feasible and closest is not None:
        rows.append(("Answer", f"none meets the target; closest: {_label(closest)} ({_gpus(closest)} GPUs, "
                               f"{_shape_text(closest.get('knobs') or {})}), missing by "
                               f"{100 * (closest.get('shortfall') or 0):.0f} %: {'; '.join(closest.get('missed') or [])}"))
    return rows


def capacity_chart(sizing: Sequence[Mapping[str, Any]]) -> Any:
    """SLA-meeting request rate against GPUs, one line per shape; filled where it meets the target."""
    go, _ = plotly_modules()
    fig = go.Figure()
    for i, row in enumerate(sizing[:len(COLORS)]):
        curve = [p for p in row.get("curve") or [] if p.get("goodput_request_throughput_rps") is not None]
        color = COLORS[i % len(COLORS)]
        fig.add_trace(go.Scatter(
            x=[p["gpus"] for p in curve], y=[p["goodput_request_throughput_rps"] for p in curve],
            mode="lines+markers", name=f"{row['mode'][:5]} {row['shape']}", line={"color": color},
            marker={"size": 10, "color": [color if p["meets_target"] else "white" for p in curve],
                    "line": {"color": color, "width": 2}},
            customdata=[f"trial {p['trial']}: {'meets' if p['meets_target'] else 'misses'} the target" for p in curve],
            hovertemplate="%{x} GPUs: %{y:.2f} req/s within SLA<br>%{customdata}<extra></extra>"))
    fig.update_layout(title={"text": "Capacity curve: SLA-meeting request rate against GPUs", "x": 0.02}, height=420,
                      legend={"orientation": "h", "y": -0.2})
    fig.update_xaxes(title_text="GPUs", dtick=1 if _max_gpus(sizing) <= 16 else None)
    fig.update_yaxes(title_text="requests/s within SLA", rangemode="tozero")
    return fig


def _max_gpus(sizing: Sequence[Mapping[str, Any]]) -> int:
    return max((p["gpus"] for row in sizing for p in row.get("curve") or []), default=0)


def _sizing_rows(sizing: Sequence[Mapping[str, Any]]) -> list[tuple[str, str, str, str]]:
    rows = []
    for row in sizing[:TOP_N]:
        curve = "  ".join(f"{p['gpus']}: {_fmt(p.get('goodput_request_throughput_rps'))}"
                          f" {'ok' if p['meets_target'] else 'miss'}" for p in row.get("curve") or [])
        rows.append((f"{row['mode'][:5]} {row['shape']}",
                     "none within budget" if row.get("fewest_gpus") is None else str(row["fewest_gpus"]),
                     "—" if row.get("misses_at") is None else str(row["misses_at"]), curve))
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
                                 name="misses the target", marker={"color": MISS_COLOR, "symbol": "x", "size": 8},
                                 text=[f"{_label(c)} {_gpus(c)} GPUs: {html.escape(c.get('reason') or '')}"
                                       f"<br>{html.escape(_knobs(c))}" for c, _, _ in bad],
                                 hovertemplate="%{text}<extra></extra>"))
    if good:
        ranked = sorted(good, key=lambda point: _rank_key(point[0]))
        top = {id(c) for c, _, _ in ranked[:TOP_N]}
        fig.add_trace(go.Scatter(
            x=[x for _, x, _ in good], y=[y for _, _, y in good], mode="markers+text", name="meets the target",
            marker={"color": COLORS[0], "size": [12 if id(c) in top else 8 for c, _, _ in good]},
            text=[str(c.get("rank")) if id(c) in top and c.get("rank") else "" for c, _, _ in good],
            textposition="top center",
            customdata=[f"{_label(c)} {_gpus(c)} GPUs<br>{html.escape(_knobs(c))}" for c, _, _ in good],
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


def varying(entries: Sequence[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """(column, knob) for each knob outside mode, backend and parallelism whose value differs
    among `entries`; the column is the knob's last name (with its role when two share it)."""
    keys = sorted({k for e in entries for k in e.get("knobs") or {}})
    keys = [k for k in keys if k not in ("engine.mode", "engine.backend") and ".parallelism." not in k
            and len({json.dumps((e.get("knobs") or {}).get(k)) for e in entries}) > 1]
    short = [k.rsplit(".", 1)[-1] for k in keys]
    return [(f"{k.split('.')[2][0].upper()} {name}" if short.count(name) > 1 and k.startswith("engine.workers.")
             else name, k) for k, name in zip(keys, short, strict=True)]


_SAFE_LINK = re.compile(r"[A-Za-z0-9_.\-]+(/[A-Za-z0-9_.\-]+)*")


def _config_link(link: Any, link_prefix: str) -> str:
    """A link to a candidate's recommended config: only a plain path relative to the ledger's
    folder becomes a link (a ledger is input: no `javascript:` or other scheme, no absolute
    path, no way up out of the folder); anything else is shown as text."""
    if not link:
        return "—"
    text = str(link)
    if not _SAFE_LINK.fullmatch(text) or ".." in text.split("/"):
        return html.escape(text)
    return f'<a href="{html.escape(link_prefix + text)}">{html.escape(Path(text).name)}</a>'


def _top_table(feasible: Sequence[Mapping[str, Any]], link_prefix: str) -> tuple[list[str], list[list[str]]]:
    """The best TOP_N: shape and the knobs that vary, then the metrics (compact columns)."""
    top = sorted(feasible, key=_rank_key)[:TOP_N]
    cols = varying(top)
    structured = any("engine.backend" in (c.get("knobs") or {}) for c in top)
    headers = ["rank", "GPUs"] + (["mode", "backend", "shape"] if structured else [])
    headers += [name for name, _ in cols]
    headers += ["score", "tok/s/GPU", "tok/s/user", "SLA met", "TTFT p90 ms", "ITL p90 ms", "config"]
    rows = []
    for c in top:
        metrics, knobs = c.get("metrics") or {}, c.get("knobs") or {}
        config = _config_link(c.get("recommendation", c.get("config_path")), link_prefix)
        row = [html.escape(str(c.get("rank", "—"))), html.escape(str(_gpus(c)))]
        if structured:
            row += [html.escape(str(c.get("mode", knobs.get("engine.mode", "")))[:5]),
                    html.escape(str(knobs.get("engine.backend", ""))), html.escape(_shape_text(knobs))]
        row += [html.escape(str(knobs.get(key, "—"))) for _, key in cols]
        row += [_fmt(c.get("score")), _fmt(throughput_per_gpu(metrics)), _fmt(throughput_per_user(metrics)),
                _attainment(metrics), _fmt(metrics.get("p90_ttft_ms")), _fmt(metrics.get("p90_itl_ms")), config]
        rows.append(row)
    return headers, rows


def _shape_text(knobs: Mapping[str, Any]) -> str:
    """``A 2x tp2`` or ``P 1x tp1 | D 2x tp2`` from a ledger entry's knobs ("—" without them)."""
    parts = []
    for role in ROLES:
        p = {k.rsplit(".", 1)[1]: v for k, v in knobs.items() if k.startswith(f"engine.workers.{role}.parallelism.")}
        if "replicas" not in p:
            continue
        text = f"{p['replicas']}x tp{p.get('tensor', 1)}"
        text += "".join(f" {tag}{p[key]}" for key, tag in SPLIT_TAGS if (p.get(key) or 1) > 1)
        parts.append(f"{role[0].upper()} {text}")
    return " | ".join(parts) or "—"


def _attainment(metrics: Mapping[str, Any]) -> str:
    share = metrics.get("sla_attainment")
    return "—" if share is None else f"{100 * share:.1f} %"


def _gpus(c: Mapping[str, Any]) -> Any:
    return c.get("gpus", c.get("used_gpus", "—"))


def _label(c: Mapping[str, Any]) -> str:
    return f"#{c.get('id', c.get('trial', c.get('rank', '?')))}"


def _knobs(c: Mapping[str, Any]) -> str:
    knobs = c.get("knobs") or {}
    return ", ".join(f"{k.removeprefix('engine.workers.')}={v}" for k, v in knobs.items())


def _fmt(value: Any) -> str:
    return f"{value:,.2f}" if isinstance(value, (int, float)) and math.isfinite(value) else "—"
