"""The `evaluation:` section: the SLA the report judges requests against."""


import math
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import model_validator
from pydantic.functional_validators import PlainValidator

from servesim.config.fields import RuleViolation, SchemaModel, show

SLA_KEYS = ("ttft_ms", "itl_ms", "e2e_ms")
"""The SLA's metrics, in report order."""
STATISTICS = ("p50", "p90", "p95", "p99", "mean")
"""The run-level statistics a percentile target may bound (servesim extension)."""
_SLA_KEYS = SLA_KEYS


def _positive(value: Any) -> float | None:
    """`value` as a float when it is a finite number > 0 (not a bool), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:  # an integer beyond the largest float (10**400)
        return None
    return number if math.isfinite(number) and number > 0 else None


def _threshold(value: Any) -> float | dict[str, float]:
    """A per-request threshold (a number > 0) or a mapping of statistic -> threshold."""
    if isinstance(value, Mapping):
        if not value:
            raise ValueError("a mapping of percentile targets must name at least one of " + ", ".join(STATISTICS))
        problems: list[tuple[str, str]] = []
        targets: dict[str, float] = {}
        for key, bound in value.items():
            if key not in STATISTICS:
                problems.append((str(key), f"unknown statistic; use one of {', '.join(STATISTICS)}"))
            elif (number := _positive(bound)) is None:
                problems.append((key, f"must be a finite number > 0 (got {show(bound)})"))
            else:
                targets[key] = number
        if problems:
            raise RuleViolation(problems)
        return {key: targets[key] for key in STATISTICS if key in targets}
    number = _positive(value)
    if number is None:
        raise ValueError("must be a finite number > 0 (a per-request threshold) or a mapping of "
                         f"{'/'.join(STATISTICS)} to such numbers (got {show(value)})")
    return number


SlaThreshold = Annotated[float | dict[str, float], PlainValidator(_threshold)]
"""A per-request threshold in ms, or (servesim extension) {statistic: threshold in ms}."""


class SlaConfig(SchemaModel):
    """Latency targets: a number per metric (the reference's per-request threshold), or {p90: ms} (servesim extension).

    A number is a per-request threshold: goodput counts the requests within every one (ttft_ms +
    itl_ms together, or e2e_ms alone). servesim extension: a mapping of p50/p90/p95/p99/mean to a
    threshold (e.g. {p90: 500}) is a run-level target, judged on that statistic of the run's
    distribution; it does not change goodput. With any such target, the per-request thresholds
    may be given in any combination. The report (servesim mode) says of every target whether
    the run met it and by how much (docs/metrics.md)."""

    ttft_ms: SlaThreshold | None = None
    """Time-to-first-token target: per-request threshold (requires itl_ms), or {statistic: ms}
    (servesim extension)."""
    itl_ms: SlaThreshold | None = None
    """Inter-token-latency target: per-request threshold on the request's mean token gap
    (requires ttft_ms), or {statistic: ms} of the pooled token gaps (servesim extension)."""
    e2e_ms: SlaThreshold | None = None
    """End-to-end latency target: per-request threshold (exclusive with ttft_ms/itl_ms), or
    {statistic: ms} (servesim extension)."""

    @model_validator(mode="after")
    def _combinations(self) -> "SlaConfig":
        """In the reference's form (numbers only) ttft_ms and itl_ms go together and e2e_ms
        excludes both."""
        if self.run_targets():
            return self
        if (self.ttft_ms is None) != (self.itl_ms is None):
            missing = "itl_ms" if self.itl_ms is None else "ttft_ms"
            raise RuleViolation([(missing, "is required: ttft_ms and itl_ms must be given together")])
        if self.e2e_ms is not None and self.ttft_ms is not None:
            raise RuleViolation([("e2e_ms", "is mutually exclusive with ttft_ms/itl_ms")])
        return self

    def per_request(self, metric: str) -> float | None:
        """The per-request threshold of `metric` (None: none, or only run-level targets)."""
        value = getattr(self, metric)
        return value if isinstance(value, float) else None

    def run_targets(self) -> list[tuple[str, str, float]]:
        """The run-level targets as (metric, statistic, threshold), in report order."""
        return [(metric, statistic, bound) for metric in SLA_KEYS
                if isinstance(value := getattr(self, metric), dict) for statistic, bound in value.items()]


class EvaluationConfig(SchemaModel):
    """How the report judges requests."""

    sla: SlaConfig | None = None
    """Latency targets; per-request ones add goodput fields to the report, and (servesim) the
    report says of every target whether the run met it. An empty mapping means no SLA."""

    @model_validator(mode="before")
    @classmethod
    def _empty_sla_is_none(cls, data: Any) -> Any:
        """`sla: {}` (or only nulls) sets no threshold, exactly like omitting it."""
        if isinstance(data, Mapping):
            sla = data.get("sla")
            if isinstance(sla, Mapping) and set(sla) <= set(_SLA_KEYS) and all(v is None for v in sla.values()):
                return {**data, "sla": None}
        return data
