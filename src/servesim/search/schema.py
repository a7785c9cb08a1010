"""The `recommend` configuration: the reference's recommend schema, read unchanged.

A recommend config is a `predict` config whose knobs may be *domains* instead of values, plus
two sections of its own::

    engine.mode / engine.backend           value or {choices: [...]}
    engine.hardware                        value, or 'auto' with optimization.hardware
    engine.workers.<role>.parallelism      preset: default | false | [shapes], or (preset: false)
                                           replicas/tensor/pipeline/attention_data/moe_* domains
    engine.workers.<role>.scheduler        max_batched_tokens, max_sequences: int domains
    engine.workers.<role>.kv_cache         block_size: int domain; capacity.memory_fraction: float domain
    traffic.load                           concurrency / requests_per_second / sessions_per_second /
                                           speedup / fraction (type kv_capacity_fraction): domains
    optimization                           target, hardware, strict_sla, constraints.{min,max}_candidate_gpus,
                                           constraints.min_goodput_rps (+ servesim: sla_attainment,
                                           gpu_hour_price)
    optimizer                              algorithm, max_trials, parallelism,
                                           candidate_timeout_seconds, seed
    router                                 policy: value or {choices}; for kv_router overlap_score_credit,
                                           prefill_load_scale, temperature, prefill_load_model.type
                                           (omitted: upstream AISimulate 0.13's default domains)
    planner                                policy: value or {choices}; the preset groups scaling_policy,
                                           fpm_sampling, load_sensitivity, load_predictor; min_workers
                                           (servesim.search.planner_domains)

A domain is a value, ``{choices: [v, ...]}`` or ``{range: {min, max, step, scale}}`` (integer
ranges need a step unless ``scale: log``; log ranges take no step and need min > 0).

Everything that is not searchable (timing, startup_seconds, speculative, the SGLang knobs,
evaluation, the router's and the planner's other keys, ...) is passed to every candidate as written and validated by the
`predict` schema itself (see `servesim.search.space.SearchSpace.probe`).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from annotated_types import Ge, Gt, Le
from pydantic import AllowInfNan, BaseModel, ConfigDict, Field, Strict, field_validator, model_validator

from servesim.limits import MAX_CANDIDATE_GPUS, MAX_MS
from servesim.search.planner_domains import PlannerDomains, planner_target
from servesim.search.domains import (
    Choices,
    FloatDomain,
    IntDomain,
    Range,
    RangeSpec,
    domain_validator,
    check_fraction,
    check_non_negative_number,
    check_positive_number,
    check_positive_int,
    domain_parser,
)

PositiveInt = Annotated[int, Strict(), Gt(0)]
NonNegativeInt = Annotated[int, Strict(), Ge(0)]
PositiveNumber = Annotated[float, Strict(), AllowInfNan(False), Gt(0)]
NonNegativeNumber = Annotated[float, Strict(), AllowInfNan(False), Ge(0)]
OpenFraction = Annotated[float, Strict(), AllowInfNan(False), Gt(0), Le(1)]

EngineMode = Literal["aggregated", "disaggregated"]
Backend = Literal["vllm", "sglang", "trtllm"]
Target = Literal["throughput", "throughput_per_gpu", "throughput_per_user", "goodput", "goodput_per_gpu",
                 "ttft", "e2e_latency", "pareto", "min_gpus"]
PARALLEL_KEYS = ("replicas", "tensor", "pipeline", "attention_data", "moe_tensor", "moe_expert")


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ParallelismDomains(_Model):
    """`preset: default` (every legal shape within the budget), a list of exact shapes, or
    `preset: false` with a domain per knob (an omitted knob ranges over the default pool's values)."""

    preset: Literal["default", False] | list[dict[str, Any]] | dict[str, Any] = "default"
    replicas: IntDomain = None
    tensor: IntDomain = None
    pipeline: IntDomain = None
    attention_data: IntDomain = None
    moe_tensor: IntDomain = None
    moe_expert: IntDomain = None

    _int_domains = domain_validator(*PARALLEL_KEYS, kind=int, check=check_positive_int)

    @field_validator("preset")
    @classmethod
    def _preset(cls, value: Any) -> Any:
        if isinstance(value, dict):
            if value:
                raise ValueError("a preset mapping must be empty ({} disables the preset)")
            return False
        if isinstance(value, list):
            if not value:
                raise ValueError("a preset list must not be empty")
            for index, entry in enumerate(value):
                missing = set(PARALLEL_KEYS) - set(entry)
                unknown = set(entry) - set(PARALLEL_KEYS)
                if missing or unknown:
                    raise ValueError(f"preset entry {index} must give exactly {', '.join(PARALLEL_KEYS)}"
                                     f" (missing {sorted(missing)}, unknown {sorted(unknown)})")
                for key in PARALLEL_KEYS:
                    check_positive_int(entry[key])
        return value

    @model_validator(mode="after")
    def _preset_or_knobs(self) -> ParallelismDomains:
        knobs = self.independent_knobs
        if self.preset is not False and knobs:
            raise ValueError(f"parallelism cannot combine preset with independent knobs {knobs} (set preset: false)")
        return self

    @property
    def independent_knobs(self) -> list[str]:
        return [key for key in PARALLEL_KEYS if getattr(self, key) is not None]


class SchedulerDomains(_Model):
    max_batched_tokens: IntDomain = None
    max_sequences: IntDomain = None
    sglang: dict[str, Any] | None = None
    preemption_mode: str | None = None

    _int_domains = domain_validator("max_batched_tokens", "max_sequences", kind=int, check=check_positive_int)


class CapacityDomains(_Model):
    type: Literal["default", "fixed"] = "default"
    memory_fraction: FloatDomain = None
    blocks: PositiveInt | None = None

    _fraction = domain_validator("memory_fraction", kind=float, check=check_fraction)

    @model_validator(mode="after")
    def _kind_fields(self) -> CapacityDomains:
        if self.type == "fixed" and (self.blocks is None or self.memory_fraction is not None):
            raise ValueError("fixed KV capacity requires blocks and rejects memory_fraction")
        if self.type == "default" and self.blocks is not None:
            raise ValueError("default KV capacity rejects blocks (set type: fixed)")
        return self


class KvCacheDomains(_Model):
    block_size: IntDomain = None
    prefix_caching: bool = True
    capacity: CapacityDomains = CapacityDomains()

    _int_domains = domain_validator("block_size", kind=int, check=check_positive_int)


class WorkerDomains(_Model):
    """One role's workers. Keys without domains are passed through to the candidates."""

    parallelism: ParallelismDomains = ParallelismDomains()
    scheduler: SchedulerDomains = SchedulerDomains()
    kv_cache: KvCacheDomains = KvCacheDomains()
    timing: dict[str, Any] | None = None
    startup_seconds: Any = 0.0
    speculative: dict[str, Any] | None = None


class WorkersDomains(_Model):
    aggregated: WorkerDomains | None = None
    prefill: WorkerDomains | None = None
    decode: WorkerDomains | None = None


def _mode_or_backend(allowed: tuple[str, ...]) -> Any:
    def check(value: Any) -> None:
        if value not in allowed:
            raise ValueError(f"must be one of {', '.join(allowed)} (got {value!r})")

    return domain_parser(str, check)


class EngineDomains(_Model):
    mode: Any = Field(default_factory=lambda: Choices(choices=["aggregated", "disaggregated"]))
    model: str
    hardware: str
    backend: Any = Field(default_factory=lambda: Choices(choices=["vllm", "sglang"]))
    backend_version: str | None = None
    aic_systems_path: str | None = None
    context_length: PositiveInt | Literal["max"] = "max"
    workers: WorkersDomains
    kv_transfer: dict[str, Any] | None = None

    _mode = field_validator("mode")(classmethod(lambda cls, v: _mode_or_backend(("aggregated", "disaggregated"))(v)))
    _backend = field_validator("backend")(classmethod(lambda cls, v: _mode_or_backend(("vllm", "sglang", "trtllm"))(v)))

    @field_validator("model", "hardware")
    @classmethod
    def _non_empty(cls, value: str) -> str:
        if not value:
            raise ValueError("must be a non-empty string")
        return value

    @property
    def modes(self) -> list[str]:
        return list(self.mode.choices) if isinstance(self.mode, Choices) else [self.mode]

    @property
    def backends(self) -> list[str]:
        return list(self.backend.choices) if isinstance(self.backend, Choices) else [self.backend]

    @model_validator(mode="after")
    def _roles_for_modes(self) -> EngineDomains:
        w, modes = self.workers, set(self.modes)
        if "aggregated" in modes and w.aggregated is None:
            raise ValueError("workers.aggregated is required when mode may be 'aggregated'")
        if "disaggregated" in modes and (w.prefill is None or w.decode is None):
            raise ValueError("workers.prefill and workers.decode are required when mode may be 'disaggregated'")
        if modes == {"aggregated"} and (w.prefill is not None or w.decode is not None or self.kv_transfer):
            raise ValueError("mode 'aggregated' rejects prefill/decode workers and kv_transfer")
        if modes == {"disaggregated"} and w.aggregated is not None:
            raise ValueError("mode 'disaggregated' rejects workers.aggregated")
        return self


class LoadDomains(_Model):
    type: Literal["concurrency", "poisson", "constant_rate", "kv_capacity_fraction", "trace_timestamps"] = "concurrency"
    concurrency: IntDomain = None
    requests_per_second: FloatDomain = None
    sessions_per_second: FloatDomain = None
    seed: NonNegativeInt | None = None
    fraction: FloatDomain = None
    speedup: FloatDomain = None

    _int_domains = domain_validator("concurrency", kind=int, check=check_positive_int)
    _float_domains = domain_validator("requests_per_second", "sessions_per_second", "fraction", "speedup",
                                       kind=float, check=check_positive_number)

    @model_validator(mode="before")
    @classmethod
    def _default_concurrency(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("type", "concurrency") == "concurrency":
            data = {"concurrency": 10, **data}
        return data

    @model_validator(mode="after")
    def _fields_for_type(self) -> LoadDomains:
        allowed = {"concurrency": {"concurrency"}, "poisson": {"requests_per_second", "sessions_per_second", "seed"},
                   "constant_rate": {"requests_per_second", "sessions_per_second"},
                   "kv_capacity_fraction": {"fraction"}, "trace_timestamps": {"speedup"}}[self.type]
        used = {k for k in ("concurrency", "requests_per_second", "sessions_per_second", "seed", "fraction", "speedup")
                if getattr(self, k) is not None}
        if used - allowed:
            raise ValueError(f"load type '{self.type}' does not accept {sorted(used - allowed)}")
        if self.type == "kv_capacity_fraction" and self.fraction is None:
            raise ValueError("load type 'kv_capacity_fraction' requires fraction")
        return self

    @property
    def searched_key(self) -> str | None:
        """The load key that carries the load value (and maybe a domain)."""
        for key in ("concurrency", "requests_per_second", "sessions_per_second", "fraction", "speedup"):
            if getattr(self, key) is not None:
                return key
        return None


class TrafficDomains(_Model):
    source: dict[str, Any]
    load: LoadDomains
    stop: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _source_fits_load(self) -> TrafficDomains:
        kind = self.source.get("type")
        if kind not in ("synthetic", "synthetic-session", "trace"):
            raise ValueError(f"source.type must be synthetic, synthetic-session or trace (got {kind!r})")
        if kind == "trace" and self.load.type not in ("trace_timestamps", "concurrency"):
            raise ValueError("trace traffic requires trace_timestamps or concurrency load")
        return self


class Constraints(_Model):
    min_candidate_gpus: PositiveInt | None = None
    max_candidate_gpus: Annotated[int, Strict(), Ge(1), Le(MAX_CANDIDATE_GPUS)] = 32
    """At most `servesim.limits.MAX_CANDIDATE_GPUS` (the default pools list every replica count)."""
    min_goodput_rps: PositiveNumber | None = None
    """Target min_gpus: the SLA-meeting request rate a candidate must sustain (upstream's key)."""

    @model_validator(mode="after")
    def _order(self) -> Constraints:
        if self.min_candidate_gpus is not None and self.min_candidate_gpus > self.max_candidate_gpus:
            raise ValueError("min_candidate_gpus cannot exceed max_candidate_gpus")
        return self


class Optimization(_Model):
    target: Target = "throughput"
    """What 'best' means; `min_gpus` (servesim extension) needs min_goodput_rps and an SLA."""
    hardware: str | None = None
    """The GPU when engine.hardware is 'auto'."""
    constraints: Constraints = Constraints()
    min_goodput_rps: PositiveNumber | None = None
    """servesim extension, the same as constraints.min_goodput_rps (give one of them)."""
    strict_sla: Annotated[bool, Strict()] = False
    """Upstream's key: a candidate must also keep the SLA's bounds on the *means* (TTFT, TPOT,
    E2E) to be recommended; needs an evaluation.sla bound."""
    sla_attainment: OpenFraction | None = 0.9
    """servesim extension: with evaluation.sla, a candidate is recommended only if at least this
    share of its requests meets the SLA (the per-request test goodput counts; an unfinished request
    misses); null = no attainment gate (the reference's behaviour)."""
    gpu_hour_price: NonNegativeNumber | None = None
    """servesim extension: price of one GPU-hour; adds cost per million output tokens to every candidate."""

    @property
    def goodput_floor(self) -> float | None:
        """min_goodput_rps, wherever it was given."""
        return self.constraints.min_goodput_rps if self.constraints.min_goodput_rps is not None \
            else self.min_goodput_rps

    @model_validator(mode="after")
    def _one_floor(self) -> Optimization:
        if self.min_goodput_rps is not None and self.constraints.min_goodput_rps is not None:
            raise ValueError("give min_goodput_rps once: constraints.min_goodput_rps (upstream) or "
                             "optimization.min_goodput_rps, not both")
        return self

    @field_validator("hardware")
    @classmethod
    def _concrete(cls, value: str | None) -> str | None:
        if value is not None and (not value.strip() or value.strip() == "auto"):
            raise ValueError("must name one concrete GPU")
        return value.strip() if value is not None else None


class Optimizer(_Model):
    algorithm: Literal["auto", "grid", "random", "bayesian"] = "auto"
    """auto (servesim's default): grid when the space fits max_trials, else bayesian."""
    max_trials: PositiveInt = 320
    parallelism: PositiveInt = 16
    candidate_timeout_seconds: Annotated[float, Strict(), AllowInfNan(False), Gt(0), Le(MAX_MS / 1000)] = 600.0
    """At most `servesim.limits.MAX_MS` (10⁹ s)."""
    seed: Annotated[int, Strict(), Ge(0), Le(2**32 - 1)] = 42
    """A 32-bit seed (what the samplers take)."""
    worker_memory_mb: PositiveNumber | None = 4096.0
    """servesim extension: a local worker whose resident memory exceeds this after a candidate is
    replaced by a fresh one (null: never); bounds a search's memory whatever its length."""
    screen: bool = True
    """servesim: rank the candidates by an analytic estimate before any replay and start the
    model-guided search from the best (no trial spent); false = a spread-out random start."""


ROUTER_POLICIES = ("round_robin", "kv_router", "random", "least_loaded")
ROUTER_KV_KNOBS = ("overlap_score_credit", "prefill_load_scale", "temperature")
ROUTER_KV_DEFAULTS = {"overlap_score_credit": (0.0, 0.5, 1.0),
                      "prefill_load_scale": (0.0, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0),
                      "temperature": (0.0, 0.2, 0.5, 1.0)}
"""The values upstream AISimulate 0.13 searches for a KV-router knob a recommend config leaves out."""


class PrefillLoadModelDomain(_Model):
    type: Any = None
    """'none' | 'ais' or {choices: [...]}; omitted: both (only 'none' when the policy is round_robin only)."""

    _type = field_validator("type")(classmethod(
        lambda cls, v: None if v is None else _mode_or_backend(("none", "ais"))(v)))


class RouterDomains(_Model):
    """The `router:` section of a recommend config, as upstream AISimulate 0.13 reads it: the policy
    and the KV router's knobs are domains. An omitted policy searches round_robin and kv_router; an
    omitted KV-router knob searches upstream's default values (`ROUTER_KV_DEFAULTS`) and its
    prefill load model both types, whenever kv_router is among the policies. A candidate whose
    policy is not kv_router carries none of those knobs. Other keys (servesim extensions) are
    passed to every candidate as written."""

    model_config = ConfigDict(frozen=True, extra="allow")

    policy: Any = Field(default_factory=lambda: Choices(choices=["round_robin", "kv_router"]))
    prefill_load_model: PrefillLoadModelDomain = PrefillLoadModelDomain()
    overlap_score_credit: FloatDomain = None
    prefill_load_scale: FloatDomain = None
    temperature: FloatDomain = None

    _policy = field_validator("policy")(classmethod(lambda cls, v: _mode_or_backend(ROUTER_POLICIES)(v)))
    _kv_knobs = domain_validator(*ROUTER_KV_KNOBS, kind=float, check=check_non_negative_number)

    @property
    def policies(self) -> list[str]:
        return list(self.policy.choices) if isinstance(self.policy, Choices) else [self.policy]

    @property
    def load_models(self) -> list[str]:
        kind = self.prefill_load_model.type
        if kind is None:
            return ["none", "ais"] if "kv_router" in self.policies else ["none"]
        return list(kind.choices) if isinstance(kind, Choices) else [kind]

    @model_validator(mode="after")
    def _upstream_rules(self) -> RouterDomains:
        kv_knobs = [k for k in ROUTER_KV_KNOBS if getattr(self, k) is not None]
        if "kv_router" not in self.policies:
            if self.load_models != ["none"]:
                raise ValueError(f"router.policy {'/'.join(self.policies)} rejects prefill_load_model.type "
                                 f"{self.load_models}; only 'none' is allowed (it is a kv_router knob)")
            if kv_knobs:
                raise ValueError(f"router.policy {'/'.join(self.policies)} rejects the KV-router knobs {kv_knobs}")
        elif len(self.policies) > 1 and "none" not in self.load_models:
            raise ValueError("a router.policy domain with policies other than kv_router requires "
                             "prefill_load_model.type to include 'none'")
        return self


class RecommendConfig(_Model):
    """A whole `recommend` document."""

    traffic: TrafficDomains | None = None
    engine: EngineDomains
    evaluation: dict[str, Any] = Field(default_factory=dict)
    optimization: Optimization = Optimization()
    optimizer: Optimizer = Optimizer()
    router: RouterDomains | None = None
    planner: PlannerDomains | None = None
    compat: Literal["reference"] | None = None
    """servesim extension: 'reference' = as the reference — every candidate replayed with the
    reference's timing model and the database's newest backend version; omitted = servesim's
    best estimate and the backend version predict resolves (the same as `--compat`)."""

    @model_validator(mode="after")
    def _cross_rules(self) -> RecommendConfig:
        opt = self.optimization
        if self.engine.hardware == "auto" and opt.hardware is None:
            raise ValueError("engine.hardware 'auto' requires optimization.hardware")
        sla = self.evaluation.get("sla") or {}
        if not isinstance(sla, dict):
            raise ValueError(f"evaluation.sla: must be a mapping of targets (ttft_ms, itl_ms, e2e_ms, ...), "
                             f"got {type(sla).__name__}")
        _check_sla(sla)
        given = {key for key, value in sla.items() if isinstance(value, (int, float))}  # per-request ones
        complete = "e2e_ms" in given or {"ttft_ms", "itl_ms"} <= given
        if opt.target in ("goodput", "goodput_per_gpu", "min_gpus") and not complete:
            raise ValueError(f"optimization.target '{opt.target}' requires a complete evaluation.sla "
                             "(ttft_ms + itl_ms, or e2e_ms)")
        if opt.strict_sla and not complete:
            raise ValueError("optimization.strict_sla requires an evaluation.sla bound")
        floor = opt.goodput_floor
        if opt.target != "min_gpus" and floor is not None:
            raise ValueError("optimization.constraints.min_goodput_rps is only used with target 'min_gpus'")
        load = self.traffic.load if self.traffic is not None else None
        if opt.target == "min_gpus" and floor is None and (load is None or load.type != "concurrency"):
            raise ValueError("optimization.target 'min_gpus' with request-rate traffic requires "
                             "optimization.constraints.min_goodput_rps")
        offered = load.requests_per_second if load is not None and load.type in ("poisson", "constant_rate") else None
        if floor is not None and isinstance(offered, int | float) and floor > offered:
            raise ValueError(f"optimization.constraints.min_goodput_rps ({floor:g}) cannot exceed the offered "
                             f"request rate ({offered:g} req/s)")
        if self.planner is not None:
            self.planner.scaling_policies(sla_target=self.planner_sla_target)
        if self.traffic is not None and self.traffic.load.type == "kv_capacity_fraction" \
                and self.traffic.source.get("type") == "trace":
            raise ValueError("load type 'kv_capacity_fraction' needs a synthetic source")
        return self

    @property
    def planner_target(self) -> str:
        """The planner's target for every candidate: `planner.target`, else the optimization
        target's (goodput targets: sla; ttft/e2e_latency: latency; others: throughput)."""
        given = self.planner.target if self.planner is not None else None
        return given or planner_target(self.optimization.target)

    @property
    def planner_sla_target(self) -> bool:
        """Whether throughput-scaling planner policies may be searched: a goodput target and an
        evaluation.sla with ttft_ms and itl_ms (upstream AISimulate 0.13's rule)."""
        sla = self.evaluation.get("sla") or {}
        return planner_target(self.optimization.target) == "sla" and all(
            isinstance(sla.get(k), (int, float)) for k in ("ttft_ms", "itl_ms"))

    @property
    def hardware(self) -> str:
        return self.optimization.hardware if self.engine.hardware == "auto" else self.engine.hardware  # type: ignore[return-value]


__all__ = ["Choices", "PARALLEL_KEYS", "Range", "RangeSpec", "RecommendConfig", "Target"]


def _check_sla(sla: dict[str, Any]) -> None:
    """`evaluation.sla` as predict validates it (`SlaConfig`), before any candidate runs: its
    first problem as a ValueError naming the key."""
    from pydantic import ValidationError

    from servesim.config.evaluation import SlaConfig

    try:
        SlaConfig.model_validate(sla)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"])
        message = str(error["msg"]).removeprefix("Value error, ")
        raise ValueError(f"evaluation.sla.{where}: {message}") from None
