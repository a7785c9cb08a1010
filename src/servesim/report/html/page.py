"""One self-contained HTML page of tables and Plotly charts.

plotly.js is embedded once, inline, so the file opens offline (no CDN, no server); every chart is
a `<div class="plotly-graph-div">` drawn by `Plotly.newPlot` from the figure's JSON. Element ids
are numbered in order, so the same figures give the same bytes.
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servesim.version import __version__

COLORS = ("#3b6fb6", "#d9623b", "#3f9e6e", "#8a5cb8", "#c9a227", "#2aa5b8", "#c4487d", "#6b7d2f",
          "#7f7f7f", "#a0522d")

_NUMERIC = re.compile(r"^[+\-−]?[\d,.]+(%|\s.*)?$")
"""A cell that starts with a number (right-aligned)."""

_STYLE = """
body { font-family: -apple-system, "Segoe UI", Roboto, Helvetica, Arial, sans-serif; margin: 0;
       color: #1f2933; background: #f5f7fa; }
header { background: #1f2d3d; color: #fff; padding: 18px 32px; }
header h1 { margin: 0; font-size: 22px; font-weight: 600; }
header p { margin: 4px 0 0; color: #c4cdd5; font-size: 13px; }
main { padding: 8px 32px 32px; max-width: 1400px; }
section { background: #fff; border-radius: 6px; margin-top: 18px; padding: 14px 18px;
          box-shadow: 0 1px 2px rgba(0,0,0,.08); }
h2 { font-size: 17px; margin: 0 0 10px; }
p.note { color: #52606d; font-size: 13px; margin: 4px 0 10px; }
table { border-collapse: collapse; font-size: 13px; margin-bottom: 8px; }
th, td { padding: 4px 10px; border-bottom: 1px solid #e4e7eb; text-align: left; white-space: nowrap; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
th { background: #f0f4f8; font-weight: 600; }
td.good { color: #2f7a4b; } td.bad { color: #b03a2e; }
.grid { display: grid; grid-template-columns: repeat(auto-fit, minmax(560px, 1fr)); gap: 12px; }
.chart { min-height: 340px; min-width: 0; }
footer { color: #7b8794; font-size: 12px; padding: 0 32px 24px; }
"""


_FIT_CHARTS = """<script>
window.addEventListener("load", function () {
  document.querySelectorAll(".plotly-graph-div").forEach(function (chart) { Plotly.Plots.resize(chart); });
});
</script>"""
"""Charts are drawn as the page is parsed, before the grid has its final column widths: once
the page has loaded, each is fitted to its cell."""


def plotly_modules() -> tuple[Any, Any]:
    """plotly's graph_objects and io modules, or an ImportError naming the extra to install."""
    try:
        import plotly.graph_objects as go
        import plotly.io as pio
    except ImportError:
        raise ImportError("HTML reports need plotly: pip install 'servesim[report]'") from None
    return go, pio


def chart_template() -> Any:
    """A small Plotly template (the stock ones add ~8 KB of JSON to every chart)."""
    go, _ = plotly_modules()
    axis = {"gridcolor": "#e4e7eb", "linecolor": "#9aa5b1", "zeroline": False, "automargin": True}
    return go.layout.Template(layout={
        "font": {"family": "Helvetica, Arial, sans-serif", "size": 12, "color": "#1f2933"},
        "colorway": list(COLORS), "paper_bgcolor": "white", "plot_bgcolor": "white",
        "xaxis": axis, "yaxis": axis, "margin": {"l": 60, "r": 20, "t": 44, "b": 50},
        "legend": {"font": {"size": 11}, "tracegroupgap": 2},
        "hoverlabel": {"align": "left"},
    })


@dataclass
class Section:
    title: str
    parts: list[str] = field(default_factory=list)


class Page:
    """Sections of notes, tables and charts, rendered to one HTML document."""

    def __init__(self, title: str, subtitle: str = "") -> None:
        self.title = title
        self.subtitle = subtitle
        self.sections: list[Section] = []
        self.charts = 0

    def section(self, title: str) -> Page:
        """Start a new section; what is added next goes into it."""
        self.sections.append(Section(title))
        return self

    def _add(self, part: str) -> None:
        if not self.sections:
            self.section("")
        self.sections[-1].parts.append(part)

    def note(self, text: str) -> None:
        self._add(f'<p class="note">{html.escape(text)}</p>')

    def table(self, headers: Sequence[str], rows: Sequence[Sequence[Any]],
              classes: Sequence[Sequence[str]] | None = None) -> None:
        """A table; cells are escaped text (`classes`, if given, one CSS class per cell)."""
        head = "".join(f"<th>{html.escape(str(h))}</th>" for h in headers)
        body = []
        for i, row in enumerate(rows):
            cells = []
            for j, cell in enumerate(row):
                cls = " ".join(filter(None, (classes[i][j] if classes is not None else "",
                                             "num" if _NUMERIC.match(str(cell)) else "")))
                attr = f' class="{cls}"' if cls else ""
                cells.append(f"<td{attr}>{html.escape(str(cell))}</td>")
            body.append("<tr>" + "".join(cells) + "</tr>")
        self._add(f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>")

    def raw_table(self, headers: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
        """A table whose cells are trusted HTML (links)."""
        head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
        body = "".join("<tr>" + "".join(f'<td class="num">{cell}</td>' if _NUMERIC.match(cell) else f"<td>{cell}</td>"
                                        for cell in row) + "</tr>" for row in rows)
        self._add(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")

    def charts_grid(self, figures: Sequence[Any]) -> None:
        """Charts side by side (two per row on a wide screen)."""
        divs = [self._chart(fig) for fig in figures]
        self._add('<div class="grid">' + "".join(divs) + "</div>")

    def _chart(self, figure: Any) -> str:
        _, pio = plotly_modules()
        self.charts += 1
        figure.update_layout(template=chart_template())
        return '<div class="chart">' + pio.to_html(
            figure, full_html=False, include_plotlyjs=False, div_id=f"chart-{self.charts}",
            config={"displaylogo": False, "responsive": True}) + "</div>"

    def render(self) -> str:
        from plotly.offline import get_plotlyjs

        sections = []
        for s in self.sections:
            heading = f"<h2>{html.escape(s.title)}</h2>" if s.title else ""
            sections.append(f"<section>{heading}{''.join(s.parts)}</section>")
        subtitle = f"<p>{html.escape(self.subtitle)}</p>" if self.subtitle else ""
        return (
            "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{html.escape(self.title)}</title><style>{_STYLE}</style>"
            f"<script type=\"text/javascript\">{get_plotlyjs()}</script></head>\n<body>"
            f"<header><h1>{html.escape(self.title)}</h1>{subtitle}</header>\n<main>"
            + "\n".join(sections)
            + "</main>" + _FIT_CHARTS + f"<footer>servesim {__version__} · self-contained report "
              f"(plotly.js embedded, opens offline) · {self.charts} charts</footer></body></html>\n"
        )

    def write(self, path: Path) -> None:
        path.write_text(self.render(), encoding="utf-8")
