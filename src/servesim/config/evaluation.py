"""The `evaluation:` section: the SLA the report judges requests against."""


from collections.abc import Mapping
from typing import Any

from pydantic import model_validator

from servesim.config.fields import PositiveNumber, RuleViolation, SchemaModel

_SLA_KEYS = ("ttft_ms", "itl_ms", "e2e_ms")


class SlaConfig(SchemaModel):
    """Per-request latency thresholds for goodput: ttft_ms + itl_ms together, or e2e_ms alone."""

    ttft_ms: PositiveNumber | None = None
    """Time-to-first-token threshold (requires itl_ms)."""
    itl_ms: PositiveNumber | None = None
    """Inter-token-latency threshold (requires ttft_ms)."""
    e2e_ms: PositiveNumber | None = None
    """End-to-end latency threshold (exclusive with ttft_ms/itl_ms)."""

    @model_validator(mode="after")
    def _combinations(self) -> "SlaConfig":
        """ttft_ms and itl_ms go together; e2e_ms excludes both."""
        if (self.ttft_ms is None) != (self.itl_ms is None):
            missing = "itl_ms" if self.itl_ms is None else "ttft_ms"
            raise RuleViolation([(missing, "is required: ttft_ms and itl_ms must be given together")])
        if self.e2e_ms is not None and self.ttft_ms is not None:
            raise RuleViolation([("e2e_ms", "is mutually exclusive with ttft_ms/itl_ms")])
        return self


class EvaluationConfig(SchemaModel):
    """How the report judges requests."""

    sla: SlaConfig | None = None
    """Latency thresholds; when set, the report gains goodput fields. An empty mapping means no SLA."""

    @model_validator(mode="before")
    @classmethod
    def _empty_sla_is_none(cls, data: Any) -> Any:
        """`sla: {}` (or only nulls) sets no threshold, exactly like omitting it."""
        if isinstance(data, Mapping):
            sla = data.get("sla")
            if isinstance(sla, Mapping) and set(sla) <= set(_SLA_KEYS) and all(v is None for v in sla.values()):
                return {**data, "sla": None}
        return data
