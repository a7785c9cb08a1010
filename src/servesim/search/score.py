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
    min_gpus             fewest avg_gpus among candidates that meet the target (the SLA, and
                         an SLA-meeting request rate of at least min_goodput_rps when given)

Scores are "higher is better"; candidates rank by score, then fewer GPUs, then their config.

**The target gate.** Only a candidate that *meets the target* is recommended. With an
`evaluation.sla`, at least `optimization.sla_attainment` of its requests (servesim: 0.9) must
meet the SLA — the same per-request test goodput counts (TTFT and the request's mean ITL, or
E2E, within bounds; a request that never finished misses) — null = no attainment gate, as the
reference; with `optimization.strict_sla` (the upstream key) the means must be within the
bounds too; with `min_goodput_rps` it must also sustain that SLA-meeting request rate. A candidate that misses is kept in the ledger with what
it missed and by how much (its *shortfall*, the largest relative miss), never as a pick; the
model-guided search is told a score below every qualifying one, lower the more it missed.
"""

from __future__ import annotations

import json
import math
from typing import Any

REPORT_KEYS = (
    "output_throughput_tok_s", "goodput_output_throughput_tok_s", "request_throughput_rps",
    "goodput_request_throughput_rps", "goodput_completed_requests", "mean_ttft_ms", "p90_ttft_ms", "mean_itl_ms", "p90_itl_ms",
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


def metrics(summary: dict[str, Any], gpu_hour_price: float | None, keep: tuple[str, ...] = ()) -> dict[str, Any]:
    """The ledger's metrics of one replay: selected report fields (REPORT_KEYS and `keep`)
    plus derived ones."""
    out = {key: summary[key] for key in (*REPORT_KEYS, *keep) if summary.get(key) is not None}
    gpus = avg_gpus(summary)
    out["avg_gpus"] = gpus
    out["throughput_per_gpu"] = out.get("output_throughput_tok_s", 0.0) / gpus if gpus > 0 else 0.0
    out["throughput_per_user"] = out.get("mean_output_token_throughput_per_user", 0.0)
    total = out.get("num_requests") or out.get("completed_requests")
    if "goodput_completed_requests" in out and total:
        out["sla_attainment"] = out["goodput_completed_requests"] / total
    if "goodput_output_throughput_tok_s" in out:
        out["goodput_per_gpu"] = out["goodput_output_throughput_tok_s"] / gpus if gpus > 0 else 0.0
    if gpu_hour_price is not None:
        tokens = float(out.get("total_output_tokens") or 0.0)
        cost = gpu_hour_price * float(out.get("gpu_hours") or 0.0)
        out["cost_per_million_output_tokens"] = cost / tokens * 1e6 if tokens > 0 else None
    return out


SLA_METRICS = (("ttft_ms", "ttft", "TTFT"), ("itl_ms", "itl", "ITL"), ("e2e_ms", "e2e_latency", "E2E"))
"""(SLA key, report metric stem, label) of every bound an SLA may set."""
MEAN_OF = {"ttft": "mean_ttft_ms", "itl": "mean_tpot_ms", "e2e_latency": "mean_e2e_latency_ms"}
"""The means upstream's strict_sla checks (ITL against the mean TPOT, as it does)."""
MISSED_FLOOR = -1e12
"""What the search is told for a candidate that misses the target, minus its shortfall."""


def percentile_key(stem: str, percentile: int) -> str:
    """The report field of a latency percentile: ``p90_ttft_ms``, ``median_itl_ms``."""
    return f"median_{stem}_ms" if percentile == 50 else f"p{percentile}_{stem}_ms"


def sla_keys(sla: dict[str, Any] | None, percentile: int = 90) -> list[str]:
    """The latency percentiles of the SLA's bounds (what the table shows beside attainment)."""
    if not sla:
        return []
    return [percentile_key(stem, percentile) for key, stem, _ in SLA_METRICS if sla.get(key) is not None]


class Objective:
    """What a target makes of a candidate's metrics, and whether the candidate meets it."""

    def __init__(self, target: str, *, min_goodput_rps: float | None = None, max_gpus: int = 1,
                 sla: dict[str, Any] | None = None, sla_attainment: float | None = 0.9,
                 strict_sla: bool = False) -> None:
        self.target = target
        self.min_goodput_rps = min_goodput_rps
        self.max_gpus = max_gpus
        self.sla = {key: float(sla[key]) for key, _, _ in SLA_METRICS  # per-request thresholds (numbers)
                    if sla and isinstance(sla.get(key), (int, float)) and not isinstance(sla.get(key), bool)}
        self.sla_attainment = sla_attainment
        self.strict_sla = strict_sla

    @property
    def is_pareto(self) -> bool:
        return self.target == "pareto"

    @property
    def names(self) -> tuple[str, ...]:
        """The objective values stored per candidate (one, or the Pareto pair)."""
        return PARETO_OBJECTIVES if self.is_pareto else (self.target,)

    @property
    def gated(self) -> bool:
        """Whether any candidate can miss the target."""
        return bool(self.sla and (self.sla_attainment is not None or self.strict_sla)) \
            or self.min_goodput_rps is not None

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
        return -values[name] if name in MINIMISED or name == "min_gpus" else values[name]

    def misses(self, m: dict[str, Any]) -> list[tuple[str, float]]:
        """What the candidate misses: (description, relative miss) per violated bound, empty
        when it meets the target. A missing metric is a miss (fail closed)."""
        out: list[tuple[str, float]] = []
        if self.sla and self.sla_attainment is not None:
            share = m.get("sla_attainment")
            if share is None:
                out.append(("the report has no goodput_completed_requests", math.inf))
            elif share < self.sla_attainment:
                out.append((f"{100 * share:.1f} % of requests meet the SLA < {100 * self.sla_attainment:g} % "
                            "(sla_attainment)", 1.0 - share / self.sla_attainment))
        if self.strict_sla:
            for key, stem, label in SLA_METRICS:
                bound, field = self.sla.get(key), MEAN_OF[stem]
                value = m.get(field)
                if bound is None:
                    continue
                if value is None or not math.isfinite(float(value)):
                    out.append((f"mean {label}: the report has no {field}", math.inf))
                elif value > bound:
                    out.append((f"mean {label} {_fmt(value)} ms > {_fmt(bound)} ms (strict_sla)", value / bound - 1.0))
        if self.min_goodput_rps is not None:
            rate = float(m.get("goodput_request_throughput_rps") or 0.0)
            if rate < self.min_goodput_rps:
                out.append((f"SLA-meeting rate {rate:.3g} req/s < min_goodput_rps {self.min_goodput_rps:g}",
                            1.0 - rate / self.min_goodput_rps))
        return out

    def qualifies(self, m: dict[str, Any]) -> bool:
        """Whether the candidate meets the target (SLA gate and min_goodput_rps)."""
        return not self.misses(m)

    def told(self, score: float, shortfall: float) -> float:
        """The score a search learns from: the score itself, or below every qualifying one."""
        return score if shortfall <= 0 else MISSED_FLOOR - min(shortfall, 1e6)


def _fmt(value: float) -> str:
    return f"{value:,.4g}" if abs(value) < 1e5 else f"{value:,.0f}"


def rank_key(entry: dict[str, Any], target: str) -> tuple:
    """Best first: higher score, then (min_gpus) higher SLA-meeting rate, fewer GPUs, then the config."""
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
