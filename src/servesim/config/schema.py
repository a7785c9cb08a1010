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
`timing` (a role's timing section), `traffic`, `evaluation`, `dynamo` (router and planner),
`rules` (rules across sections) — and this module, the document, re-exports every public
name. Cross-field rules raise `RuleViolation`, which carries key paths relative to the model
that checks them; ``servesim.config.load`` turns them into ``dotted.key.path: rule`` lines.
The schema does no I/O and imports nothing else from servesim but
`servesim.limits`.
"""


from typing import Literal

from pydantic import Field, model_validator

from servesim.config.dynamo import PlannerConfig, PrefillLoadModelConfig, RouterConfig
from servesim.config.engine import (
    Backend,
    DefaultCapacity,
    EngineConfig,
    EngineMode,
    FixedCapacity,
    KvCacheConfig,
    KvCapacityConfig,
    KvTransferConfig,
    ParallelismConfig,
    Role,
    SchedulerConfig,
    SglangSchedulerConfig,
    SpeculativeConfig,
    WorkerConfig,
    WorkersConfig,
)
from servesim.config.evaluation import EvaluationConfig, SlaConfig
from servesim.config.fields import U64_MAX, RuleViolation, SchemaModel, raise_if, show
from servesim.config.rules import aggregated_only_format_rules, client_timeout_rules, planner_rules, request_count
from servesim.config.timing import (
    DefaultTiming,
    FixedTiming,
    GpuSpecConfig,
    PolynomialTiming,
    RealServerTiming,
    RooflineTiming,
    TimingConfig,
)
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
    "RealServerTiming",
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
# The document
# --------------------------------------------------------------------------------------------


class SimConfig(SchemaModel):
    """A whole `predict` configuration document."""

    engine: EngineConfig
    """The serving engine."""
    traffic: TrafficConfig = Field(default_factory=default_traffic)
    """The workload; omitted = 1024/128 synthetic requests, concurrency 10, stop after 100."""
    evaluation: EvaluationConfig = EvaluationConfig.defaults()
    """Report options (SLA)."""
    router: RouterConfig = RouterConfig.defaults()
    """Placement of requests on workers; omitted = round robin."""
    planner: PlannerConfig = PlannerConfig.defaults()
    """Autoscaling (Dynamo's planner); omitted = a fixed fleet."""
    compat: Literal["reference", "upstream-0.13"] | None = None
    """servesim extension: 'reference' reproduces AISimulate 0.1.0.dev2 exactly — its timing model,
    its report fields and its handling of requests that can never fit the KV pool (the run stops
    where the reference stops); 'upstream-0.13' runs the newer upstream build's pass convention
    (a prompt's completion emits the first token, only decoding requests are timed in the decode
    phase, SGLang extends in rounds of their own, 0.13's AIC decode steps; docs/timing.md) with
    mixed passes summed as both upstream builds do; omitted = servesim's best estimate (the same
    as `--compat`)."""

    @model_validator(mode="after")
    def _compat_consistent(self) -> "SimConfig":
        """`compat: reference` and a fidelity key that asks for another timing model exclude each other."""
        raise_if(compat_conflicts(self))
        return self

    @model_validator(mode="after")
    def _format_needs_aggregated(self) -> "SimConfig":
        """Some trace formats replay only on aggregated engines."""
        raise_if(aggregated_only_format_rules(self.traffic.source, self.engine.mode))
        return self

    @model_validator(mode="after")
    def _timeouts_need_aggregated(self) -> "SimConfig":
        """Client timeouts abort requests on aggregated workers only."""
        raise_if(client_timeout_rules(self.traffic, self.engine.mode))
        return self

    @model_validator(mode="after")
    def _planner_fits_the_deployment(self) -> "SimConfig":
        """Planner keys that depend on the engine mode or the SLA."""
        raise_if(planner_rules(self.planner, self.engine, self.evaluation.sla))
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


def compat_conflicts(config: SimConfig) -> list[tuple[str, str]]:
    """The fidelity keys that contradict `compat: reference` or `compat: upstream-0.13` (the
    upstream builds' timing model: sum mixed passes, no front-end latency, no DP sync, no async
    scheduling, no calibration), each as (key path, rule naming `compat`)."""
    if config.compat not in ("reference", "upstream-0.13"):
        return []
    which = "the reference's" if config.compat == "reference" else "0.13's"
    found = []
    for role, worker in config.engine.roles.items():
        where = f"engine.workers.{role}"
        timing, scheduler = worker.timing, worker.scheduler
        offending = [
            ("timing.mixed_pass", getattr(timing, "mixed_pass", None), lambda v: v == "fused"),
            ("timing.frontend_ms", getattr(timing, "frontend_ms", None), lambda v: v is not None and v != 0),
            ("timing.dp_sync_ms", getattr(timing, "dp_sync_ms", None), lambda v: v is not None and v != 0),
            ("timing.calibration", getattr(timing, "calibration", None), lambda v: v is not None),
            ("scheduler.async_scheduling", scheduler.async_scheduling, lambda v: v is True),
        ]
        found += [(f"{where}.{key}", f"{value!r} contradicts compat: {config.compat!r} ({which} timing model); "
                                     "drop one of the two keys")
                  for key, value, bad in offending if bad(value)]
    return found


def runtime_rejections(config: SimConfig) -> list[str]:
    """Settings the schema accepts but the reference refuses once the run starts (exit code 1).

    Each entry is ``dotted.key.path: reason``; lowering should raise them as a RunError.
    """
    found = []
    engine = config.engine
    for role, worker in engine.roles.items():
        where = f"engine.workers.{role}"
        if engine.mode == "disaggregated" and worker.parallelism.attention_data > 1:
            found.append(f"{where}.parallelism.attention_data: disaggregated replay requires 1 (attention-DP handoff is not implemented)")
    load = config.traffic.load
    if isinstance(load, PoissonLoad) and load.seed > U64_MAX:
        found.append(f"traffic.load.seed: must fit in 64 bits (got {load.seed})")
    return found
