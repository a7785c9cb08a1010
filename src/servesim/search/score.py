"""Scoring a replayed candidate, with the reference's definitions, and ranking them.

Per-GPU targets divide by the *time-averaged provisioned GPU count*, ``gpu_hours / duration``
(the fixed GPU count of a static deployment, the integral over the run with a planner)::

    throughput           output_throughput_tok_s                       maximise
    throughput_per_gpu   output_throughput_tok_s / avg_gpus            maximise
    throughput_per_user  mean_output_token_throughput_per_user         maximise
    goodput              goodput_output_throughput_tok_s               maximise
    goodput_per_gpu      goodput_output_throughput_tok_s / avg_gpus    maximise
    ttft                 mean_ttft_ms                                  minimise (score = -value)
    e2e_latency          mean_e2e_latency_ms                           minimise (score = -value)
    pareto               the non-dominated set over (throughput_per_gpu, throughput_per_user)
    min_gpus             (servesim) fewest avg_gpus among candidates whose SLA-meeting request
                         rate reaches optimization.min_goodput_rps

Scores are "higher is better"; candidates rank by score, then fewer GPUs, then their config.
"""

from __future__ import annotations

import json
import math
from typing import Any

REPORT_KEYS = (
    "output_throughput_tok_s", "goodput_output_throughput_tok_s", "request_throughput_rps",
    "goodput_request_throughput_rps", "mean_ttft_ms", "p90_ttft_ms", "mean_itl_ms", "p90_itl_ms",
    "mean_tpot_ms", "mean_e2e_latency_ms", "p90_e2e_latency_ms", "mean_output_token_throughput_per_user",
    "completed_requests", "num_requests", "total_output_tokens", "gpu_hours", "duration_ms",
)
"""Report fields every ledger entry keeps (the rest of a report is one `predict` away)."""

PARETO_OBJECTIVES = ("throughput_per_gpu", "throughput_per_user")
MINIMISED = ("ttft", "e2e_latency")


def avg_gpus(summary: dict[str, Any]) -> float:
    """Time-averaged provisioned GPUs: gpu_hours / duration (0 when either is missing)."""
    hours, duration = float(summary.get("gpu_hours") or 0.0), float(summary.get("duration_ms") or 0.0)
    return hours / (duration / 3_600_000.0) if hours > 0 and duration > 0 else 0.0


def metrics(summary: dict[str, Any], gpu_hour_price: float | None) -> dict[str, Any]:
    """The ledger's metrics of one replay: selected report fields plus derived ones."""
    out = {key: summary[key] for key in REPORT_KEYS if summary.get(key) is not None}
    gpus = avg_gpus(summary)
    out["avg_gpus"] = gpus
    out["throughput_per_gpu"] = out.get("output_throughput_tok_s", 0.0) / gpus if gpus > 0 else 0.0
    out["throughput_per_user"] = out.get("mean_output_token_throughput_per_user", 0.0)
    if "goodput_output_throughput_tok_s" in out:
        out["goodput_per_gpu"] = out["goodput_output_throughput_tok_s"] / gpus if gpus > 0 else 0.0
    if gpu_hour_price is not None:
        tokens = float(out.get("total_output_tokens") or 0.0)
        cost = gpu_hour_price * float(out.get("gpu_hours") or 0.0)
        out["cost_per_million_output_tokens"] = cost / tokens * 1e6 if tokens > 0 else None
    return out


class Objective:
    """What a target makes of a candidate's metrics."""

    def __init__(self, target: str, *, min_goodput_rps: float | None = None, max_gpus: int = 1) -> None:
        self.target = target
        self.min_goodput_rps = min_goodput_rps
        self.max_gpus = max_gpus

    @property
    def is_pareto(self) -> bool:
        return self.target == "pareto"

    @property
    def names(self) -> tuple[str, ...]:
        """The objective values stored per candidate (one, or the Pareto pair)."""
        return PARETO_OBJECTIVES if self.is_pareto else (self.target,)

    def values(self, m: dict[str, Any]) -> dict[str, float]:
        """Raw objective values (natural units); raises KeyError when the report lacks one."""
        return {name: self._raw(name, m) for name in self.names}

    def _raw(self, name: str, m: dict[str, Any]) -> float:
        if name == "min_gpus":
            return float(m["avg_gpus"])
        key = {"throughput": "output_throughput_tok_s", "goodput": "goodput_output_throughput_tok_s",
               "ttft": "mean_ttft_ms", "e2e_latency": "mean_e2e_latency_ms"}.get(name, name)
        value = m.get(key)
        if value is None or not math.isfinite(float(value)):
            raise KeyError(f"the report has no finite {key}")
        return float(value)

    def score(self, m: dict[str, Any], values: dict[str, float]) -> float:
        """Higher is better. Pareto: its first objective (a headline; ranking uses the front)."""
        name = self.names[0]
        if self.target == "min_gpus":
            rate = float(m.get("goodput_request_throughput_rps") or 0.0)
            assert self.min_goodput_rps is not None
            if rate >= self.min_goodput_rps:
                return -values[name]
            return -(self.max_gpus + 1.0) - (1.0 - rate / self.min_goodput_rps)
        return -values[name] if name in MINIMISED else values[name]

    def qualifies(self, m: dict[str, Any]) -> bool:
        """min_gpus: whether the candidate sustains the required SLA-meeting rate (else True)."""
        if self.target != "min_gpus":
            return True
        return float(m.get("goodput_request_throughput_rps") or 0.0) >= (self.min_goodput_rps or 0.0)


def rank_key(entry: dict[str, Any], target: str) -> tuple:
    """Best first: higher score, then (min_gpus) higher goodput, fewer GPUs, then the config."""
    secondary = entry["metrics"].get("goodput_request_throughput_rps", 0.0) if target == "min_gpus" else 0.0
    return (-entry["score"], -secondary, entry["used_gpus"], json.dumps(entry["knobs"], sort_keys=True))


def pareto_front(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The non-dominated entries over (throughput_per_gpu, throughput_per_user), both maximised,
    ordered by throughput per user (the frontier left to right)."""
    def dominates(a: dict[str, float], b: dict[str, float]) -> bool:
        return all(a[k] >= b[k] for k in PARETO_OBJECTIVES) and any(a[k] > b[k] for k in PARETO_OBJECTIVES)

    front = [e for e in entries if not any(dominates(o["objectives"], e["objectives"]) for o in entries if o is not e)]
    return sorted(front, key=lambda e: (e["objectives"]["throughput_per_user"], -e["objectives"]["throughput_per_gpu"],
                                        e["used_gpus"], json.dumps(e["knobs"], sort_keys=True)))
