"""User configuration: the `predict` YAML schema and how it is loaded.

``load_config(path, overrides)`` reads a file, ``parse_config(mapping)`` validates an in-memory
document; both return a frozen :class:`SimConfig` or raise ``servesim.errors.ConfigError``.
"""

from __future__ import annotations

from servesim.config.load import apply_overrides, load_config, parse_config
from servesim.config.schema import (
    ConcurrencyLoad,
    ConstantRateLoad,
    DefaultCapacity,
    DefaultTiming,
    EngineConfig,
    EvaluationConfig,
    FixedCapacity,
    FixedTiming,
    KvCacheConfig,
    KvTransferConfig,
    ParallelismConfig,
    PoissonLoad,
    PolynomialTiming,
    SchedulerConfig,
    SessionConfig,
    SimConfig,
    SlaConfig,
    StopConfig,
    SyntheticSessionSource,
    SyntheticSource,
    TraceSource,
    TraceTimestampsLoad,
    TrafficConfig,
    WorkerConfig,
    WorkersConfig,
    default_traffic,
    request_count,
    runtime_rejections,
)

__all__ = [
    "ConcurrencyLoad",
    "ConstantRateLoad",
    "DefaultCapacity",
    "DefaultTiming",
    "EngineConfig",
    "EvaluationConfig",
    "FixedCapacity",
    "FixedTiming",
    "KvCacheConfig",
    "KvTransferConfig",
    "ParallelismConfig",
    "PoissonLoad",
    "PolynomialTiming",
    "SchedulerConfig",
    "SessionConfig",
    "SimConfig",
    "SlaConfig",
    "StopConfig",
    "SyntheticSessionSource",
    "SyntheticSource",
    "TraceSource",
    "TraceTimestampsLoad",
    "TrafficConfig",
    "WorkerConfig",
    "WorkersConfig",
    "apply_overrides",
    "default_traffic",
    "load_config",
    "parse_config",
    "request_count",
    "runtime_rejections",
]
