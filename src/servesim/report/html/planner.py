"""The planner part of a run's report: worker counts over time and every scaling decision."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from servesim.report.html.page import COLORS, Page, plotly_modules

QUIET_REASONS = ("no_change", "not_due", "scaling_in_progress", "worker_count_mismatch")
"""Tick outcomes that are not decisions worth a row of their own."""
MAX_TICK_MARKERS = 2000


def planner_section(page: Page, planner: Mapping[str, Any]) -> None:
    """Worker counts per pool (provisioned and active), scaling events and their reasons."""
    page.section("Planner")
    events = planner.get("scaling_events", [])
    page.note(f"{planner.get('total_ticks', 0)} planner ticks, {len(events)} scaling decisions. "
              "Provisioned workers include those starting up and draining; hover the markers for "
              "each tick's decision.")
    page.charts_grid([worker_count_chart(planner)])
    ticks = {t["at_s"]: t for t in planner.get("ticks", [])}
    rows = []
    for event in events:
        tick = ticks.get(event["at_s"], {})
        rows.append((f"{event['at_s']:,.1f}", event["component"], f"{event['from_count']} → {event['to_count']}",
                     tick.get("reason", event["reason"]), _why(tick.get("diagnostics") or {})))
    if rows:
        page.table(("time (s)", "pool", "workers", "decision", "why (planner diagnostics)"), rows)


def worker_count_chart(planner: Mapping[str, Any]) -> Any:
    go, _ = plotly_modules()
    fig = go.Figure()
    timeline = planner.get("timeline", [])
    pools = sorted({p for entry in timeline for p in entry if p != "at_s"})
    end_s = max([e["at_s"] for e in timeline] + [t["at_s"] for t in planner.get("ticks", [])], default=0.0)
    for i, pool in enumerate(pools):
        points = [e for e in timeline if pool in e]
        x = [e["at_s"] for e in points] + [end_s]
        provisioned = [sum(e[pool].values()) for e in points]
        active = [e[pool]["active"] for e in points]
        color = COLORS[i % len(COLORS)]
        fig.add_trace(go.Scatter(x=x, y=provisioned + provisioned[-1:], name=f"{pool}: provisioned",
                                 line={"shape": "hv", "color": color, "dash": "dot"}))
        fig.add_trace(go.Scatter(x=x, y=active + active[-1:], name=f"{pool}: active",
                                 line={"shape": "hv", "color": color, "width": 2.5}))
    _tick_markers(fig, go, planner.get("ticks", []))
    fig.update_layout(title={"text": "Workers over time", "x": 0.02}, height=360)
    fig.update_xaxes(title_text="simulated time (s)")
    fig.update_yaxes(title_text="workers", rangemode="tozero", dtick=1)
    return fig


def _tick_markers(fig: Any, go: Any, ticks: Sequence[Mapping[str, Any]]) -> None:
    """A marker per tick at the non-draining worker count it saw, its decision in the hover."""
    if len(ticks) > MAX_TICK_MARKERS:
        ticks = [t for t in ticks if t["reason"] not in QUIET_REASONS]
    if not ticks:
        return
    x = [t["at_s"] for t in ticks]
    y = [sum(w["active"] + w["starting"] for w in t["workers"].values()) for t in ticks]
    text = [f"{t['reason']}<br>{_why(t.get('diagnostics') or {})}" for t in ticks]
    changed = [t["reason"] not in QUIET_REASONS and (t.get("target_decode") is not None
                                                     or t.get("target_prefill") is not None) for t in ticks]
    fig.add_trace(go.Scatter(x=x, y=y, mode="markers", name="planner ticks", text=text,
                             hovertemplate="%{x:.1f} s: %{text}<extra></extra>",
                             marker={"size": [9 if c else 5 for c in changed],
                                     "color": ["#b03a2e" if c else "#9aa5b1" for c in changed],
                                     "symbol": ["diamond" if c else "circle" for c in changed]}))


def _why(diagnostics: Mapping[str, Any], limit: int = 160) -> str:
    """The diagnostics that explain a decision, compactly (numbers to 3 significant digits)."""
    parts = []
    for key, value in diagnostics.items():
        if value is None:
            continue
        if isinstance(value, list):
            shown = ", ".join(_number(v) for v in value[:6]) + (", …" if len(value) > 6 else "")
            parts.append(f"{key}: [{shown}]")
        else:
            parts.append(f"{key}: {_number(value)}")
    text = "; ".join(parts)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _number(value: Any) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)
