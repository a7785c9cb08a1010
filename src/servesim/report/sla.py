"""SLA verdicts (servesim extension): for every target of the run's SLA, whether the run met it
and by how much (docs/metrics.md, "SLA verdicts").

A per-request target (the reference's form) is met when every request of the run is within it;
its `achieved` value is the worst request's, and it also says how many requests were within.
A request that did not complete (rejected, failed, unfinished) is within no per-request target.
A run-level target (`{p90: 500}`) is met when that statistic of the run's distribution — the
summary's own `p90_ttft_ms`, `p99_itl_ms` (pooled token gaps), `mean_e2e_latency_ms` — is at
most the threshold; without a sample (no request completed) it is not met. The margin is
target − achieved: positive is headroom, negative is the overshoot.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

SUMMARY_METRIC = {"ttft_ms": "ttft_ms", "itl_ms": "itl_ms", "e2e_ms": "e2e_latency_ms"}
"""The summary's name of each SLA metric's distribution."""
SUMMARY_STATISTIC = {"p50": "median", "p90": "p90", "p95": "p95", "p99": "p99", "mean": "mean"}
"""The summary's prefix of each run-level statistic."""
PER_REQUEST = "per_request"
"""The `statistic` of a per-request target."""
LABELS = {"ttft_ms": "TTFT", "itl_ms": "ITL", "e2e_ms": "E2E"}


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Sla:
    """The run's SLA targets: per-request thresholds (the reference's; goodput counts the
    requests within all of them) and run-level ones (servesim extension)."""

    ttft_ms: float | None = None
    itl_ms: float | None = None
    e2e_ms: float | None = None
    run_targets: tuple[tuple[str, str, float], ...] = ()
    """(metric, statistic, threshold): a statistic (p50/p90/p95/p99/mean) of the run's
    distribution of `metric` must be at most the threshold (servesim extension)."""

    def per_request(self) -> dict[str, float]:
        """The per-request thresholds that are set, by metric (ttft_ms, itl_ms, e2e_ms)."""
        bounds = {"ttft_ms": self.ttft_ms, "itl_ms": self.itl_ms, "e2e_ms": self.e2e_ms}
        return {metric: bound for metric, bound in bounds.items() if bound is not None}


def verdicts(sla: Sla, summary: Mapping[str, Any], within: Mapping[str, int], worst: Mapping[str, float],
             samples: Mapping[str, int]) -> dict[str, Any]:
    """The report's `sla` block. `within`: per per-request metric, the requests within its
    threshold; `worst`: the largest value a request had; `samples`: per metric, the size of the
    distribution its run-level targets read."""
    arrived = int(summary["num_requests"])
    targets = []
    for metric, bound in sla.per_request().items():
        count = int(within.get(metric, 0))
        entry = _target(metric, PER_REQUEST, bound, worst.get(metric), arrived > 0 and count == arrived)
        entry.update(requests_within=count, share_within=count / arrived if arrived else 0.0)
        targets.append(entry)
    for metric, statistic, bound in sla.run_targets:
        key = f"{SUMMARY_STATISTIC[statistic]}_{SUMMARY_METRIC[metric]}"
        achieved = float(summary[key]) if samples.get(metric) else None
        targets.append(_target(metric, statistic, bound, achieved, achieved is not None and achieved <= bound))
    block: dict[str, Any] = {
        "met": all(t["met"] for t in targets),
        "targets_met": sum(t["met"] for t in targets),
        "num_requests": arrived,
        "completed_requests": int(summary["completed_requests"]),
        "targets": targets,
    }
    if "goodput_completed_requests" in summary:
        block["requests_within_all"] = int(summary["goodput_completed_requests"])
    return block


def _target(metric: str, statistic: str, bound: float, achieved: float | None, met: bool) -> dict[str, Any]:
    margin = None if achieved is None else bound - achieved
    return {"metric": metric, "statistic": statistic, "target": float(bound), "achieved": achieved, "met": met,
            "margin_ms": margin, "margin_pct": None if margin is None or not bound else 100.0 * margin / bound}


def status(met: bool) -> str:
    return "MET" if met else "MISSED"


def overall_line(block: Mapping[str, Any]) -> str:
    """'SLA: 0 of 400 requests met all per-request targets; 1 of 3 targets met — MISSED'."""
    parts = []
    if "requests_within_all" in block:
        parts.append(f"{block['requests_within_all']:,} of {block['num_requests']:,} requests met all "
                     "per-request targets")
    parts.append(f"{block['targets_met']} of {len(block['targets'])} targets met")
    return f"SLA: {'; '.join(parts)} — {status(block['met'])}"


def target_label(target: Mapping[str, Any]) -> str:
    """'TTFT ≤ 60 ms per request', 'ITL p99 ≤ 50 ms'."""
    name = LABELS.get(target["metric"], target["metric"])
    if target["statistic"] == PER_REQUEST:
        return f"{name} ≤ {target['target']:g} ms per request"
    return f"{name} {target['statistic']} ≤ {target['target']:g} ms"


def achieved_text(target: Mapping[str, Any]) -> str:
    """'812.30 ms (worst request)', '43.20 ms', or 'no samples'."""
    achieved = target["achieved"]
    if achieved is None:
        return "no samples"
    return f"{achieved:,.2f} ms" + (" (worst request)" if target["statistic"] == PER_REQUEST else "")


def margin_text(target: Mapping[str, Any]) -> str:
    """'+6.80 ms (+13.6%)' (headroom) or '−752.30 ms (−1,253.8%)' (overshoot); '—' without a value."""
    margin, pct = target["margin_ms"], target["margin_pct"]
    if margin is None:
        return "—"
    return f"{margin:+,.2f} ms ({pct:+,.1f}%)".replace("-", "−")


def within_text(target: Mapping[str, Any]) -> str:
    """'48 of 400 requests (12.0 %)' for a per-request target, '' for a run-level one."""
    if "requests_within" not in target:
        return ""
    return f"{target['requests_within']:,} requests within ({target['share_within']:.1%})"


def verdict_lines(block: Mapping[str, Any]) -> list[str]:
    """The text table's SLA block: the overall line, then one line per target."""
    rows = [(target_label(t), status(t["met"]), achieved_text(t), margin_text(t), within_text(t))
            for t in block["targets"]]
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    lines = [overall_line(block)]
    for row in rows:
        cells = [cell.ljust(width) for cell, width in zip(row[:4], widths, strict=True)]
        if row[4]:
            cells.append(row[4])
        lines.append(("  " + "  ".join(cells)).rstrip())
    completed, arrived = block["completed_requests"], block["num_requests"]
    if completed < arrived:
        lines.append(f"  ({arrived - completed:,} of {arrived:,} requests did not complete: within no per-request "
                     "target; the run-level statistics cover completed requests)")
    return lines
