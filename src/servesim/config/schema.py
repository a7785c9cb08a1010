"""The `predict` configuration schema: frozen pydantic models that mirror the YAML keys.

A configuration has three core sections::

    engine:      what serves the requests (topology, backend, per-role worker settings)
    traffic:     what arrives (source), when (load) and until when (stop)
    evaluation:  optional SLA thresholds (adds goodput to the report)

Every model forbids unknown keys. Counts and sizes are *strict* integers (YAML ``"5"``, ``5.0``
and ``true`` are rejected); most real-valued knobs are strict finite numbers (an integer is
accepted, a string or bool is not). A few fields are deliberately lax because the reference
accepts strings there: ``timing.prefill_ms``/``decode_ms``, ``startup_seconds`` and
``kv_cache.prefix_caching``.

The sections live in their own modules — `fields` (value types, rule plumbing), `engine`,
`traffic`, `dynamo` (router and planner), `rules` (rules across sections) — and this module,
the document, re-exports every public name. Cross-field rules raise `RuleViolation`, which
carries key paths relative to the model that checks them; ``servesim.config.load`` turns them
into ``dotted.key.path: rule`` lines. The schema does no I/O and imports nothing else from
servesim.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import Field, model_validator

from servesim.config.dynamo import PlannerConfig, PrefillLoadModelConfig, RouterConfig
from servesim.config.engine import (
    Backend,
    DefaultCapacity,
    DefaultTiming,
    EngineConfig,
    EngineMode,
    FixedCapacity,
    FixedTiming,
    GpuSpecConfig,
    KvCacheConfig,
    KvCapacityConfig,
    KvTransferConfig,
    ParallelismConfig,
    PolynomialTiming,
    Role,
    RooflineTiming,
    SchedulerConfig,
    SglangSchedulerConfig,
    SpeculativeConfig,
    TimingConfig,
    WorkerConfig,
    WorkersConfig,
)
from servesim.config.fields import PositiveNumber, RuleViolation, SchemaModel, raise_if, show
from servesim.config.rules import aggregated_only_format_rules, planner_rules, request_count, runtime_rejections
from servesim.config.traffic import (
    ConcurrencyLoad,
    ConstantRateLoad,
    LoadConfig,
    PoissonLoad,
    SessionConfig,
    SourceConfig,
    StopConfig,
    SyntheticSessionSource,
    SyntheticSource,
    TraceFormat,
    TraceSource,
    TraceTimestampsLoad,
    TrafficConfig,
    default_traffic,
)

__all__ = [
    "Backend",
    "ConcurrencyLoad",
    "ConstantRateLoad",
    "DefaultCapacity",
    "DefaultTiming",
    "DISCRIMINATED_FIELDS",
    "EngineConfig",
    "EngineMode",
    "EvaluationConfig",
    "FixedCapacity",
    "FixedTiming",
    "GpuSpecConfig",
    "KvCacheConfig",
    "KvCapacityConfig",
    "KvTransferConfig",
    "LoadConfig",
    "NOT_IN_SCHEMA",
    "ParallelismConfig",
    "PlannerConfig",
    "PoissonLoad",
    "PolynomialTiming",
    "PrefillLoadModelConfig",
    "RouterConfig",
    "Role",
    "RooflineTiming",
    "RuleViolation",
    "SchedulerConfig",
    "SECTIONS",
    "SessionConfig",
    "SglangSchedulerConfig",
    "SimConfig",
    "SlaConfig",
    "SpeculativeConfig",
    "SourceConfig",
    "StopConfig",
    "SyntheticSessionSource",
    "SyntheticSource",
    "TimingConfig",
    "TraceFormat",
    "TraceSource",
    "TraceTimestampsLoad",
    "TrafficConfig",
    "WorkerConfig",
    "WorkersConfig",
    "default_traffic",
    "request_count",
    "runtime_rejections",
    "show",
]

# --------------------------------------------------------------------------------------------
# evaluation
# --------------------------------------------------------------------------------------------

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
    def _combinations(self) -> SlaConfig:
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


# --------------------------------------------------------------------------------------------
# The document
# --------------------------------------------------------------------------------------------


class SimConfig(SchemaModel):
    """A whole `predict` configuration document."""

    engine: EngineConfig
    """The serving engine."""
    traffic: TrafficConfig = Field(default_factory=default_traffic)
    """The workload; omitted = 1024/128 synthetic requests, concurrency 10, stop after 100."""
    evaluation: EvaluationConfig = EvaluationConfig()
    """Report options (SLA)."""
    router: RouterConfig = RouterConfig()
    """Placement of requests on workers; omitted = round robin."""
    planner: PlannerConfig = PlannerConfig()
    """Autoscaling (Dynamo's planner); omitted = a fixed fleet."""

    @model_validator(mode="after")
    def _format_needs_aggregated(self) -> SimConfig:
        """Some trace formats replay only on aggregated engines."""
        raise_if(aggregated_only_format_rules(self))
        return self

    @model_validator(mode="after")
    def _planner_fits_the_deployment(self) -> SimConfig:
        """Planner keys that depend on the engine mode or the SLA."""
        raise_if(planner_rules(self))
        return self


SECTIONS: tuple[str, ...] = tuple(SimConfig.model_fields)
"""Top-level keys owned by the schema; every other key is an adapter section of the stack."""

NOT_IN_SCHEMA: tuple[str, ...] = ("optimization", "optimizer")
"""Top-level keys of other commands that `predict` rejects outright."""

DISCRIMINATED_FIELDS: dict[str, tuple[str, ...]] = {
    "source": ("synthetic", "synthetic-session", "trace"),
    "load": ("concurrency", "poisson", "constant_rate", "trace_timestamps"),
    "capacity": ("default", "fixed"),
    "timing": ("default", "fixed", "polynomial", "roofline"),
}
"""Field name -> the `type` tags of its discriminated union (used to tidy error paths)."""
