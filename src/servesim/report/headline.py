"""The report's headline (servesim mode): what was simulated — the deployment and the offered
load — and, when the run records it, where its numbers come from (`Report.provenance`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

DEPLOYMENT_ITEMS = ("backend", "deployment", "gpus")
LOAD_ITEMS = ("load", "source", "time cap")


def headline_items(deployment: Mapping[str, str], summary: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(label, text) rows: model, GPU, backend, replicas × shape, GPU count, offered load,
    request count, source, time cap (the items `deployment` has)."""
    rows = [(label, deployment[key]) for key, label in (("model", "Model"), ("gpu", "GPU"), ("backend", "Backend"),
                                                        ("deployment", "Deployment"), ("gpus", "GPUs"),
                                                        ("load", "Offered load")) if key in deployment]
    if "num_requests" in summary:
        rows.append(("Requests", f"{summary['num_requests']:,}"))
    rows += [(key.capitalize(), deployment[key]) for key in ("source", "time cap") if key in deployment]
    return rows


def headline_lines(deployment: Mapping[str, str] | None, summary: Mapping[str, Any],
                   provenance: Mapping[str, Any] | None = None) -> list[str]:
    """The text table's first lines: the deployment, the load and (if any) the provenance."""
    lines = []
    if deployment:
        what = [deployment[key] for key in DEPLOYMENT_ITEMS if key in deployment]
        if "gpus" in deployment:
            what[-1] = f"{deployment['gpus']} GPU" + ("" if deployment["gpus"] == "1" else "s")
        lines.append(f"servesim: {deployment.get('model', '?')} on {deployment.get('gpu', '?')} · " + " · ".join(what))
        load = [deployment["load"]] if "load" in deployment else []
        if "num_requests" in summary:
            load.append(f"{summary['num_requests']:,} requests")
        load += [deployment[key] for key in LOAD_ITEMS[1:] if key in deployment]
        lines.append("Load: " + " · ".join(load))
    if provenance:
        lines.append("Provenance: " + " · ".join(f"{key} {value}" for key, value in provenance.items()))
    return lines
