"""The charts reports share: latency CDFs with SLA marks, and lines over simulated time."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from servesim.report.html.page import COLORS, plotly_modules
from servesim.report.latency import LABELS, LatencySamples, cdf_points

SLA_COLOR = "#b03a2e"


def within(values: np.ndarray, weights: np.ndarray | None, threshold: float) -> float:
    """Share of the samples (weighted) at or below `threshold` (NaN without samples)."""
    if len(values) == 0:
        return float("nan")
    ok = values <= threshold
    if weights is None:
        return float(np.mean(ok))
    return float(weights[ok].sum() / weights.sum())


def _log_scale(samples: Sequence[np.ndarray]) -> bool:
    """Whether a distribution spans enough orders of magnitude to read better on a log axis."""
    values = np.concatenate([s[s > 0] for s in samples]) if samples else np.empty(0)
    if len(values) < 2:
        return False
    low, high = np.percentile(values, [1, 99])
    return bool(low > 0 and high / low > 100)


def cdf_chart(metric: str, runs: Sequence[tuple[str, LatencySamples]], sla_ms: float | None,
              colors: Sequence[str] = COLORS) -> Any:
    """Empirical CDFs of one latency, one line per run, with the SLA threshold marked."""
    go, _ = plotly_modules()
    fig = go.Figure()
    notes = []
    arrays = []
    for i, (name, samples) in enumerate(runs):
        values, weights = samples.values(metric)
        arrays.append(values)
        x, y = cdf_points(values, weights)
        if metric == "itl_ms" and samples.itl_per_request:
            name += " (per-request mean)"
        fig.add_trace(go.Scatter(x=x, y=y, name=name, mode="lines", line={"shape": "hv", "color": colors[i % len(colors)]},
                                 hovertemplate="%{x:.4g} ms: %{y:.2%}<extra>" + name + "</extra>"))
        if sla_ms is not None and len(values):
            share = within(values, weights, sla_ms)
            notes.append(f"{name}: {share:.1%}" if len(runs) > 1 else f"{share:.1%} within")
    log = _log_scale(arrays)
    if sla_ms is not None:
        fig.add_vline(x=sla_ms, line={"color": SLA_COLOR, "dash": "dash", "width": 1.5})
        # Annotations on a log axis are placed in log10 units (shapes are not).
        fig.add_annotation(x=math.log10(sla_ms) if log and sla_ms > 0 else sla_ms, y=0.02, xref="x", yref="paper",
                           xanchor="left", showarrow=False, text=f" SLA {sla_ms:g} ms — " + ", ".join(notes),
                           font={"color": SLA_COLOR, "size": 11}, bgcolor="rgba(255,255,255,0.8)")
    fig.update_layout(title={"text": LABELS[metric], "x": 0.02}, height=340, showlegend=len(runs) > 1)
    fig.update_xaxes(title_text="ms", type="log" if log else "linear", dtick=1 if log else None)
    fig.update_yaxes(title_text="fraction of requests", range=[0, 1.02], tickformat=".0%")
    return fig


def lines_chart(title: str, x: np.ndarray, lines: Sequence[tuple[str, np.ndarray]], y_title: str,
                *, percent: bool = False, x_title: str = "simulated time (s)", mode: str = "lines",
                shape: str = "linear") -> Any:
    """Several series over one x axis (gaps where a series is NaN)."""
    go, _ = plotly_modules()
    fig = go.Figure()
    for i, (name, y) in enumerate(lines):
        fig.add_trace(go.Scatter(x=x, y=y, name=name, mode=mode, connectgaps=False,
                                 line={"color": COLORS[i % len(COLORS)], "width": 1.5, "shape": shape},
                                 marker={"size": 4}))
    fig.update_layout(title={"text": title, "x": 0.02}, height=320, showlegend=len(lines) > 1,
                      hovermode="x unified")
    fig.update_xaxes(title_text=x_title)
    fig.update_yaxes(title_text=y_title, rangemode="tozero", tickformat=".0%" if percent else None)
    return fig
