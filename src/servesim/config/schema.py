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

Cross-field rules raise :class:`RuleViolation`, which carries key paths relative to the model
that checks them; ``servesim.config.load`` turns them into ``dotted.key.path: rule`` lines.
This module does no I/O and imports nothing else from servesim.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Annotated, Any, Literal, Union

from annotated_types import Ge, Gt, Le
from pydantic import (
    AllowInfNan,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Strict,
    Tag,
    field_validator,
    model_validator,
)
from pydantic.functional_validators import PlainValidator

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
]

EngineMode = Literal["aggregated", "disaggregated"]
Backend = Literal["vllm", "sglang", "trtllm"]
Role = Literal["aggregated", "prefill", "decode"]
TraceFormat = Literal["mooncake", "mooncake-delta", "agentic_mooncake", "applied_compute_agentic", "dynamo"]

# --------------------------------------------------------------------------------------------
# Value types
# --------------------------------------------------------------------------------------------

PositiveInt = Annotated[int, Strict(), Gt(0)]
"""Strict integer > 0 (rejects strings, floats and bools)."""
NonNegativeInt = Annotated[int, Strict(), Ge(0)]
"""Strict integer >= 0."""
PositiveNumber = Annotated[float, Strict(), AllowInfNan(False), Gt(0)]
"""Strict finite number > 0 (integers accepted, strings and bools rejected)."""
NonNegativeNumber = Annotated[float, Strict(), AllowInfNan(False), Ge(0)]
"""Strict finite number >= 0."""
Fraction = Annotated[float, Strict(), AllowInfNan(False), Ge(0), Le(1)]
"""Strict finite number in [0, 1]."""
OpenFraction = Annotated[float, Strict(), AllowInfNan(False), Gt(0), Le(1)]
"""Strict finite number in (0, 1]."""
LaxNonNegativeNumber = Annotated[float, Ge(0)]
"""Number >= 0 in pydantic's lax mode (numeric strings and bools accepted, like the reference)."""

U64_MAX = 2**64 - 1


def _positive_int_or(word: str) -> Callable[[Any], int | str]:
    """Validator accepting a strict positive integer or exactly the string `word`."""

    def validate(value: Any) -> int | str:
        if value == word and isinstance(value, str):
            return word
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
        raise ValueError(f"must be a positive integer or '{word}' (got {show(value)})")

    return validate


def _non_empty_string(value: str) -> str:
    """Reject the empty string (whitespace-only strings are accepted, like the reference)."""
    if value == "":
        raise ValueError("must be a non-empty string")
    return value


def _string(value: Any) -> str:
    """Require a string (no number coercion)."""
    if not isinstance(value, str):
        raise ValueError(f"must be a string (got {show(value)})")
    return value


def _model_name(value: Any) -> str:
    """A non-empty model id or directory."""
    return _non_empty_string(_string(value))


def _hardware(value: Any) -> str:
    """A non-empty system name other than 'auto'."""
    name = _non_empty_string(_string(value))
    if name == "auto":
        raise ValueError("'auto' is recommendation-only; name a system such as h200_sxm")
    return name


ModelName = Annotated[str, PlainValidator(_model_name)]
"""Non-empty string."""
HardwareName = Annotated[str, PlainValidator(_hardware)]
"""Non-empty string other than 'auto'."""
ContextLength = Annotated[int | Literal["max"], PlainValidator(_positive_int_or("max"))]
"""Strict positive integer or 'max'."""
BytesPerToken = Annotated[int | Literal["auto"], PlainValidator(_positive_int_or("auto"))]
"""Strict positive integer or 'auto'."""


def show(value: Any) -> str:
    """Render a user value the way it was probably written in YAML (null, true, 'text', 5)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


# --------------------------------------------------------------------------------------------
# Rule plumbing
# --------------------------------------------------------------------------------------------


class RuleViolation(ValueError):
    """Cross-field rules broken inside one model.

    ``problems`` is a list of ``(relative_path, rule)``; the relative path is dotted and
    relative to the model whose validator raised (``""`` = the model itself).
    """

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        super().__init__("; ".join(f"{path}: {rule}" if path else rule for path, rule in problems))
        self.problems = problems


def _raise_if(problems: list[tuple[str, str]]) -> None:
    """Raise a RuleViolation when any problem was collected."""
    if problems:
        raise RuleViolation(problems)


def _without_nulls(data: Any, keys: tuple[str, ...]) -> Any:
    """Drop `keys` whose value is null: for these keys null means "not given"."""
    if not isinstance(data, Mapping):
        return data
    return {k: v for k, v in data.items() if not (k in keys and v is None)}


def _type_tag(default: str | None) -> Callable[[Any], str | None]:
    """Discriminator callable: the `type` key (or attribute), `default` when it is absent."""

    def tag(value: Any) -> str | None:
        found = value.get("type", default) if isinstance(value, Mapping) else getattr(value, "type", default)
        return found if isinstance(found, str) else None

    return tag


class _Model(BaseModel):
    """Base of every schema object: immutable, unknown keys rejected, docstrings as help."""

    model_config = ConfigDict(frozen=True, extra="forbid")


# --------------------------------------------------------------------------------------------
# engine.workers.<role>
# --------------------------------------------------------------------------------------------


class ParallelismConfig(_Model):
    """How many engine instances a role has and how each one is split across GPUs."""

    replicas: PositiveInt = 1
    """Number of logical workers (engine instances) in this role's pool."""
    tensor: PositiveInt = 1
    """Tensor-parallel size; used by AIC timing and for GPU accounting."""
    pipeline: PositiveInt = 1
    """Pipeline-parallel size; passed to AIC only, not counted in GPUs per worker."""
    attention_data: PositiveInt = 1
    """Attention data-parallel ranks per worker, each with its own scheduler and KV pool."""
    moe_tensor: PositiveInt = 1
    """MoE tensor-parallel size; passed to AIC only when moe_tensor x moe_expert > 1."""
    moe_expert: PositiveInt = 1
    """MoE expert-parallel size; passed to AIC only when moe_tensor x moe_expert > 1."""


_ROLES: tuple[Role, ...] = ("aggregated", "prefill", "decode")

DEFAULT_MAX_SEQUENCES: dict[str, int] = {"aggregated": 256, "prefill": 1, "decode": 256}


class SglangSchedulerConfig(_Model):
    """SGLang scheduler knobs (a servesim extension: the reference's YAML has no such keys)."""

    schedule_policy: Literal["fifo", "lpm"] = "fifo"
    """Waiting-queue order: 'fifo' (arrival order) or 'lpm' (longest cached prefix first)."""
    max_prefill_tokens: PositiveInt = 16384
    """Prompt tokens (cached ones included, in whole pages) one pass may prefill."""
    chunked_prefill_size: PositiveInt = 8192
    """Longer prompts are prefilled in chunks of the pass's remaining chunk budget."""
    clip_max_new_tokens: NonNegativeInt = 4096
    """Cap on the output tokens admission reserves per request."""
    schedule_conservativeness: NonNegativeNumber = 1.0
    """Scales the new-token ratio (initial 0.7 x this) that reserves running requests' outputs."""


class SchedulerConfig(_Model):
    """Per-rank batching limits."""

    max_batched_tokens: PositiveInt = 8192
    """Token budget of one scheduling pass (vLLM max_num_batched_tokens; ignored by SGLang)."""
    max_sequences: PositiveInt | None = None
    """Max running requests per rank (max_num_seqs); omitted = 256, or 1 for the prefill role."""
    sglang: SglangSchedulerConfig | None = None
    """SGLang knobs (servesim extension, backend 'sglang' only); omitted = the reference's defaults."""
    preemption_mode: Literal["lifo", "fifo"] | None = None
    """vLLM preemption victim (servesim extension, backend 'vllm' only): 'lifo' = the last running request (omitted), 'fifo' = the first."""
    async_scheduling: bool | None = None
    """servesim extension: a request reaching a worker while it runs a pass joins the pass after next, as with vLLM's async scheduling (SGLang's and TensorRT-LLM's overlap schedulers work alike: the next pass is planned before the running one ends); omitted = on when the role's timing.mixed_pass is 'fused', else off (the reference)."""

    @field_validator("max_sequences", mode="before")
    @classmethod
    def _explicit_null(cls, value: Any) -> Any:
        """An explicit null is an error: omit the key to get the role default."""
        if value is None:
            raise ValueError("must be a positive integer (omit the key for the role default), not null")
        return value

    def max_sequences_for(self, role: Role) -> int:
        """The effective max_num_seqs for a worker of `role`."""
        return self.max_sequences if self.max_sequences is not None else DEFAULT_MAX_SEQUENCES[role]


DEFAULT_BLOCK_SIZE: dict[str, int] = {"vllm": 64, "sglang": 1, "trtllm": 32}
DEFAULT_MEMORY_FRACTION: dict[str, float] = {"vllm": 0.9, "sglang": 0.88, "trtllm": 0.9}


class DefaultCapacity(_Model):
    """KV capacity estimated by AIC from the GPU memory left after weights."""

    type: Literal["default"] = "default"
    """Capacity kind: 'default' = AIC memory estimate."""
    memory_fraction: OpenFraction | None = None
    """Fraction of GPU memory usable for KV in (0, 1]; omitted = 0.9 (vLLM, TRT-LLM) or 0.88 (SGLang)."""

    @model_validator(mode="before")
    @classmethod
    def _reject_blocks(cls, data: Any) -> Any:
        """'blocks' belongs to the fixed capacity kind."""
        data = _without_nulls(data, ("blocks",))
        if isinstance(data, Mapping) and "blocks" in data:
            raise RuleViolation([("blocks", "not allowed when type is 'default' (set type: fixed)")])
        return data

    def memory_fraction_for(self, backend: Backend) -> float:
        """The effective memory fraction for `backend`."""
        if self.memory_fraction is not None:
            return self.memory_fraction
        return DEFAULT_MEMORY_FRACTION[backend]


class FixedCapacity(_Model):
    """A fixed number of KV blocks per scheduler rank."""

    type: Literal["fixed"] = "fixed"
    """Capacity kind: 'fixed' = explicit block count."""
    blocks: PositiveInt
    """Number of KV blocks per scheduler (attention-DP) rank."""

    @model_validator(mode="before")
    @classmethod
    def _fixed_fields(cls, data: Any) -> Any:
        """'blocks' is required; 'memory_fraction' belongs to the default kind."""
        data = _without_nulls(data, ("blocks", "memory_fraction"))
        if not isinstance(data, Mapping):
            return data
        problems = []
        if "blocks" not in data:
            problems.append(("", "'blocks' is required when type is 'fixed'"))
        if "memory_fraction" in data:
            problems.append(("memory_fraction", "not allowed when type is 'fixed'"))
        _raise_if(problems)
        return data


KvCapacityConfig = Annotated[
    Union[Annotated[DefaultCapacity, Tag("default")], Annotated[FixedCapacity, Tag("fixed")]],
    Discriminator(_type_tag("default")),
]


class KvCacheConfig(_Model):
    """KV cache block size, prefix caching and capacity."""

    block_size: PositiveInt | None = None
    """Engine KV block size in tokens; omitted = backend default (vLLM 64, SGLang 1, TRT-LLM 32)."""
    prefix_caching: bool = True
    """Reuse cached prompt-prefix blocks across requests."""
    capacity: KvCapacityConfig = DefaultCapacity()
    """How many KV blocks each rank has: {type: default, memory_fraction} or {type: fixed, blocks}."""

    def block_size_for(self, backend: Backend) -> int:
        """The effective block size for `backend`."""
        return self.block_size if self.block_size is not None else DEFAULT_BLOCK_SIZE[backend]


_FIXED_TIMING_KEYS = ("prefill_ms", "decode_ms")


def _reject_fixed_timing_values(data: Any, kind: str) -> Any:
    """Non-fixed timing kinds accept no prefill_ms/decode_ms (null counts as absent)."""
    data = _without_nulls(data, _FIXED_TIMING_KEYS)
    if isinstance(data, Mapping):
        _raise_if([(k, f"only allowed when type is 'fixed' (type is '{kind}')") for k in _FIXED_TIMING_KEYS if k in data])
    return data


class _RealServerTiming(_Model):
    """The keys by which a data-backed timing model estimates a real server (servesim extensions)."""

    mixed_pass: Literal["sum", "fused"] = "sum"
    """servesim extension: how a vLLM/TRT-LLM pass holding both prompt chunks and decode tokens is timed: 'sum' = a prefill pass plus a decode pass (the reference), 'fused' = one forward pass over all its tokens, and with it the async-scheduling and front-end latency defaults (docs/timing.md)."""
    frontend_ms: NonNegativeNumber | None = None
    """servesim extension: latency from a client sending a request to the engine seeing it (API server, multi-process executor); omitted = the calibration file's, else 0 with mixed_pass 'sum' and the default for the worker's GPU count with 'fused' (docs/timing.md)."""
    calibration: str | None = None
    """servesim extension: a calibration file written by `servesim calibrate` (prefill/decode scale factors, front-end latency and, where measured, the KV capacity of a default-capacity role); relative to the config's folder."""


class DefaultTiming(_RealServerTiming):
    """Pass durations from the AIConfigurator performance database."""

    type: Literal["default"] = "default"
    """Timing kind: 'default' = AIC external provider."""
    interpolate_context: PositiveInt | None = None
    """servesim extension: interpolate decode latency linearly between exact AIC values at multiples of this many context tokens (e.g. 256: faster, <= 0.21 % error); omitted = every call exact."""

    @model_validator(mode="before")
    @classmethod
    def _no_fixed_values(cls, data: Any) -> Any:
        """prefill_ms/decode_ms belong to the fixed kind."""
        return _reject_fixed_timing_values(data, "default")


class PolynomialTiming(_Model):
    """Pass durations from the built-in polynomial formulas."""

    type: Literal["polynomial"] = "polynomial"
    """Timing kind: 'polynomial' = built-in formulas."""

    @model_validator(mode="before")
    @classmethod
    def _no_fixed_values(cls, data: Any) -> Any:
        """prefill_ms/decode_ms belong to the fixed kind."""
        return _reject_fixed_timing_values(data, "polynomial")


class GpuSpecConfig(_Model):
    """Constants of a GPU for the roofline (and for the default KV capacity of an unknown GPU)."""

    memory_gib: PositiveNumber
    """Device memory, GiB."""
    memory_bandwidth_gb_s: PositiveNumber
    """Peak memory bandwidth, GB/s."""
    bf16_tflops: PositiveNumber
    """Dense BF16 tensor-core peak, TFLOP/s."""
    fp8_tflops: PositiveNumber | None = None
    """Dense FP8 tensor-core peak, TFLOP/s (omitted = no FP8 units)."""
    fp4_tflops: PositiveNumber | None = None
    """Dense FP4 tensor-core peak, TFLOP/s (omitted = no FP4 units)."""
    interconnect_gb_s: PositiveNumber = 32.0
    """GPU-to-GPU bandwidth per GPU and direction, GB/s."""


class RooflineTiming(_RealServerTiming):
    """servesim extension: analytic pass durations from the model's HF config and GPU peak numbers."""

    type: Literal["roofline"] = "roofline"
    """Timing kind: 'roofline' = analytic roofline (servesim extension)."""
    gpu: str | None = None
    """GPU whose constants are used; omitted = engine.hardware (AIC system file, servesim's table or $SERVESIM_GPU_SPECS)."""
    gpu_spec: GpuSpecConfig | None = None
    """Inline GPU constants; override the looked-up ones."""
    gemm_efficiency: OpenFraction = 0.7
    """Fraction of peak FLOP/s a GEMM reaches."""
    attention_efficiency: OpenFraction = 0.5
    """Fraction of peak FLOP/s attention reaches."""
    memory_efficiency: OpenFraction = 0.8
    """Fraction of peak bandwidth memory-bound work reaches."""
    launch_us: NonNegativeNumber = 3.0
    """Fixed cost per kernel, microseconds."""
    gemm_floor_us: NonNegativeNumber = 0.0
    """Minimum time of one GEMM, microseconds (models small-M kernel floors, e.g. ~60 for block FP8)."""
    pass_overhead_ms: NonNegativeNumber = 0.0
    """Fixed cost added to each prefill and decode phase, milliseconds."""

    @model_validator(mode="before")
    @classmethod
    def _no_fixed_values(cls, data: Any) -> Any:
        """prefill_ms/decode_ms belong to the fixed kind."""
        return _reject_fixed_timing_values(data, "roofline")


class FixedTiming(_Model):
    """Constant pass durations."""

    type: Literal["fixed"] = "fixed"
    """Timing kind: 'fixed' = constant costs."""
    prefill_ms: LaxNonNegativeNumber
    """Cost (ms) added to a pass that contains prompt tokens."""
    decode_ms: LaxNonNegativeNumber
    """Cost (ms) of the decode phase of a pass (the engine floors it at 1 ms)."""

    @model_validator(mode="before")
    @classmethod
    def _both_required(cls, data: Any) -> Any:
        """prefill_ms and decode_ms are both required (null counts as absent)."""
        data = _without_nulls(data, _FIXED_TIMING_KEYS)
        if isinstance(data, Mapping):
            missing = [k for k in _FIXED_TIMING_KEYS if k not in data]
            if missing:
                raise RuleViolation([("", "fixed timing requires 'prefill_ms' and 'decode_ms' (missing: " + ", ".join(missing) + ")")])
        return data


TimingConfig = Annotated[
    Union[
        Annotated[DefaultTiming, Tag("default")],
        Annotated[FixedTiming, Tag("fixed")],
        Annotated[PolynomialTiming, Tag("polynomial")],
        Annotated[RooflineTiming, Tag("roofline")],
    ],
    Discriminator(_type_tag("default")),
]


class SpeculativeConfig(_Model):
    """Speculative (MTP / EAGLE) decoding: several tokens per decode step when drafts are accepted
    (servesim extension; the reference's engine has it but its YAML does not expose it)."""

    num_speculative_tokens: Annotated[int, Strict(), Ge(1), Le(5)]
    """Draft tokens per step (nextn), 1..5."""
    acceptance_rates: list[Fraction] | None = None
    """Conditional acceptance probability of each draft given the previous ones were accepted;
    missing entries are 0. Omitted: 0.85, 0.3, 0, 0, 0 (truncated to nextn)."""
    seed: NonNegativeInt = 42
    """Seed of the acceptance sampler (rank r of worker w uses seed + w × DP size + r)."""


class WorkerConfig(_Model):
    """Settings shared by every worker of one role."""

    parallelism: ParallelismConfig = ParallelismConfig()
    """Replicas and GPU split of each worker."""
    scheduler: SchedulerConfig = SchedulerConfig()
    """Per-rank batching limits."""
    kv_cache: KvCacheConfig = KvCacheConfig()
    """KV cache block size, prefix caching and capacity."""
    timing: TimingConfig = DefaultTiming()
    """Pass-duration model: {type: default} (AIC), {type: polynomial}, {type: fixed, prefill_ms, decode_ms} or {type: roofline} (servesim extension)."""
    startup_seconds: LaxNonNegativeNumber = 0.0
    """Delay before a newly added worker becomes ready (initial workers are ready at t=0)."""
    speculative: SpeculativeConfig | None = None
    """Speculative decoding (servesim extension); omitted = off."""


class WorkersConfig(_Model):
    """Worker pools per role: `aggregated` alone, or `prefill` and `decode` together."""

    aggregated: WorkerConfig | None = None
    """Workers that prefill and decode (aggregated mode)."""
    prefill: WorkerConfig | None = None
    """Prefill-only workers (disaggregated mode)."""
    decode: WorkerConfig | None = None
    """Decode-only workers (disaggregated mode)."""


class KvTransferConfig(_Model):
    """Prefill-to-decode KV transfer (disaggregated mode only)."""

    bytes_per_token: BytesPerToken = "auto"
    """KV bytes per token per rank, or 'auto' to derive it from the model's HF config."""
    bandwidth_gb_per_second: PositiveNumber | None = None
    """Transfer bandwidth in decimal GB/s; omitted = transfers take no time."""
    timing_mode: Literal["full_prompt", "destination_missing"] = "destination_missing"
    """Bytes moved: the full prompt, or only the blocks missing on the decode worker."""


class EngineConfig(_Model):
    """The serving engine: topology, model, hardware, backend and per-role workers."""

    mode: EngineMode = "aggregated"
    """Topology: 'aggregated' or 'disaggregated' (separate prefill and decode pools)."""
    model: ModelName
    """Model id (HF-style, e.g. Qwen/Qwen3-8B) or a local directory holding config.json."""
    hardware: HardwareName
    """AIC system name, e.g. h200_sxm ('auto' is recommendation-only)."""
    backend: Backend = "vllm"
    """Scheduler family: vllm, sglang or trtllm."""
    backend_version: str | None = None
    """AIC database version; omitted = AIC default for the backend (vLLM 0.19.0, SGLang 0.5.10, TRT-LLM 1.3.0rc10; a database without it uses its current version, with a warning)."""
    aic_systems_path: str | None = None
    """servesim extension: AIConfigurator systems directory (perf database) for default timing and capacity; omitted = $SERVESIM_AIC_SYSTEMS_PATH, else the aiconfigurator-core package's own."""
    context_length: ContextLength = "max"
    """Max model length (vLLM only); 'max' = from the model's HF config."""
    workers: WorkersConfig
    """Worker pools per role."""
    kv_transfer: KvTransferConfig | None = None
    """KV transfer between prefill and decode (disaggregated mode only)."""

    @model_validator(mode="after")
    def _topology_rules(self) -> EngineConfig:
        """Mode vs. roles, backend support, kv_transfer placement, block sizes."""
        problems: list[tuple[str, str]] = []
        w = self.workers
        if self.mode == "aggregated":
            if w.aggregated is None:
                problems.append(("workers.aggregated", "is required when mode is 'aggregated'"))
            problems += [(f"workers.{r}", "not allowed when mode is 'aggregated'") for r in ("prefill", "decode") if getattr(w, r) is not None]
            if self.kv_transfer is not None:
                problems.append(("kv_transfer", "only allowed when mode is 'disaggregated'"))
        else:
            problems += [(f"workers.{r}", "is required when mode is 'disaggregated'") for r in ("prefill", "decode") if getattr(w, r) is None]
            if w.aggregated is not None:
                problems.append(("workers.aggregated", "not allowed when mode is 'disaggregated'"))
            if self.backend == "trtllm":
                problems.append(("backend", "'trtllm' does not support mode 'disaggregated'"))
        if self.backend != "sglang":
            problems += [(f"workers.{role}.scheduler.sglang", f"only allowed when backend is 'sglang' (backend is '{self.backend}')")
                         for role, worker in self.roles.items() if worker.scheduler.sglang is not None]
        if self.backend != "vllm":
            problems += [(f"workers.{role}.scheduler.preemption_mode", f"only allowed when backend is 'vllm' (backend is '{self.backend}')")
                         for role, worker in self.roles.items() if worker.scheduler.preemption_mode is not None]
        if self.backend in ("vllm", "trtllm"):
            for role, worker in self.roles.items():
                size = worker.kv_cache.block_size_for(self.backend)
                if size < 2:
                    problems.append((f"workers.{role}.kv_cache.block_size", f"must be >= 2 for backend '{self.backend}' (got {size})"))
        _raise_if(problems)
        return self

    @property
    def roles(self) -> dict[Role, WorkerConfig]:
        """The configured worker roles in a fixed order (aggregated, prefill, decode)."""
        found: dict[Role, WorkerConfig] = {}
        for role in _ROLES:
            worker = getattr(self.workers, role)
            if worker is not None:
                found[role] = worker
        return found

    def block_size(self, role: Role) -> int:
        """Effective KV block size of `role`."""
        return self.roles[role].kv_cache.block_size_for(self.backend)




# --------------------------------------------------------------------------------------------
# traffic.source
# --------------------------------------------------------------------------------------------


class SyntheticSource(_Model):
    """Single-turn requests of constant length."""

    type: Literal["synthetic"] = "synthetic"
    """Source kind: 'synthetic'."""
    input_tokens: PositiveInt = 1024
    """Prompt length of every request."""
    output_tokens: PositiveInt = 128
    """Output length of every request."""


class SessionConfig(_Model):
    """Shape of each synthetic multi-turn session."""

    turns: Annotated[int, Strict(), Ge(2)] = 4
    """Turns per session (>= 2)."""
    shared_prefix_ratio: Fraction = 0.0
    """Fraction of each turn's blocks taken from the session's prefix group, in [0, 1]."""
    prefix_groups: NonNegativeInt = 0
    """Number of prefix groups sessions are spread over (> 0 when shared_prefix_ratio > 0)."""
    inter_turn_delay_ms: NonNegativeNumber = 0.0
    """Think time between a turn's completion and the next turn."""

    @model_validator(mode="after")
    def _groups_for_sharing(self) -> SessionConfig:
        """Prefix sharing needs at least one group."""
        if self.shared_prefix_ratio > 0 and self.prefix_groups <= 0:
            raise RuleViolation([("prefix_groups", "must be > 0 when shared_prefix_ratio > 0")])
        return self


class SyntheticSessionSource(_Model):
    """Multi-turn sessions whose prompts accumulate the conversation so far."""

    type: Literal["synthetic-session"] = "synthetic-session"
    """Source kind: 'synthetic-session'."""
    new_input_tokens_per_turn: PositiveInt = 1024
    """New prompt tokens added by each turn."""
    output_tokens_per_turn: PositiveInt = 128
    """Output length of each turn."""
    session: SessionConfig
    """Session shape (turns, prefix sharing, think time)."""


DEFAULT_TRACE_BLOCK_SIZE = 512


class TraceSource(_Model):
    """Requests replayed from JSONL trace files."""

    type: Literal["trace"] = "trace"
    """Source kind: 'trace'."""
    paths: list[str]
    """Trace files (relative paths are resolved against the config's folder); exactly one unless format is dynamo."""
    format: TraceFormat = "mooncake"
    """Trace format: mooncake, mooncake-delta, agentic_mooncake, applied_compute_agentic or dynamo."""
    block_size: PositiveInt | None = None
    """Tokens per trace hash id; omitted = 512 (dynamo: the block size embedded in the trace)."""

    @field_validator("paths")
    @classmethod
    def _non_empty_paths(cls, paths: list[str]) -> list[str]:
        """At least one path and no empty path."""
        if not paths or any(p == "" for p in paths):
            raise ValueError("must be a non-empty list of non-empty paths")
        return paths

    @model_validator(mode="after")
    def _one_path(self) -> TraceSource:
        """Only the dynamo format reads several files."""
        if self.format != "dynamo" and len(self.paths) != 1:
            raise RuleViolation([("paths", f"format '{self.format}' requires exactly one path (got {len(self.paths)})")])
        return self

    @property
    def trace_block_size(self) -> int | None:
        """Tokens per trace hash id: the configured value, else 512; None = taken from a dynamo trace."""
        if self.block_size is not None:
            return self.block_size
        return None if self.format == "dynamo" else DEFAULT_TRACE_BLOCK_SIZE


SourceConfig = Annotated[
    Union[
        Annotated[SyntheticSource, Tag("synthetic")],
        Annotated[SyntheticSessionSource, Tag("synthetic-session")],
        Annotated[TraceSource, Tag("trace")],
    ],
    Discriminator(_type_tag(None)),
]

# --------------------------------------------------------------------------------------------
# traffic.load
# --------------------------------------------------------------------------------------------

_LOAD_KEYS = ("concurrency", "requests_per_second", "sessions_per_second", "seed", "speedup")
_RATE_KEYS = ("requests_per_second", "sessions_per_second")


def _load_fields(data: Any, kind: str, own: tuple[str, ...], nullable: tuple[str, ...]) -> Any:
    """Reject load keys that belong to other load types; drop nulls that mean "not given"."""
    if not isinstance(data, Mapping):
        return data
    foreign = tuple(k for k in _LOAD_KEYS if k not in own)
    data = _without_nulls(data, foreign + nullable)
    _raise_if([(k, f"not allowed when load type is '{kind}'") for k in foreign if k in data])
    return data


class ConcurrencyLoad(_Model):
    """Closed loop: keep a fixed number of requests (sessions) in flight."""

    type: Literal["concurrency"] = "concurrency"
    """Load kind: 'concurrency' (the default)."""
    concurrency: PositiveInt = 10
    """Requests (or sessions) kept in flight."""

    @model_validator(mode="before")
    @classmethod
    def _fields(cls, data: Any) -> Any:
        """Only `concurrency` is accepted."""
        return _load_fields(data, "concurrency", ("concurrency",), ())


class PoissonLoad(_Model):
    """Open loop with exponential inter-arrival gaps."""

    type: Literal["poisson"] = "poisson"
    """Load kind: 'poisson'."""
    requests_per_second: PositiveNumber | None = None
    """Mean arrival rate of requests (synthetic sources)."""
    sessions_per_second: PositiveNumber | None = None
    """Mean arrival rate of sessions (synthetic-session sources)."""
    seed: NonNegativeInt = 42
    """Seed of the arrival-time generator."""

    @model_validator(mode="before")
    @classmethod
    def _fields(cls, data: Any) -> Any:
        """Only the rates and `seed` are accepted."""
        return _load_fields(data, "poisson", _RATE_KEYS + ("seed",), _RATE_KEYS + ("seed",))

    @property
    def rate(self) -> float | None:
        """Whichever rate is set (requests or sessions per second)."""
        return self.requests_per_second if self.requests_per_second is not None else self.sessions_per_second


class ConstantRateLoad(_Model):
    """Open loop with evenly spaced arrivals."""

    type: Literal["constant_rate"] = "constant_rate"
    """Load kind: 'constant_rate'."""
    requests_per_second: PositiveNumber | None = None
    """Arrival rate of requests (synthetic sources)."""
    sessions_per_second: PositiveNumber | None = None
    """Arrival rate of sessions (synthetic-session sources)."""

    @model_validator(mode="before")
    @classmethod
    def _fields(cls, data: Any) -> Any:
        """Only the rates are accepted."""
        return _load_fields(data, "constant_rate", _RATE_KEYS, _RATE_KEYS)

    @property
    def rate(self) -> float | None:
        """Whichever rate is set (requests or sessions per second)."""
        return self.requests_per_second if self.requests_per_second is not None else self.sessions_per_second


class TraceTimestampsLoad(_Model):
    """Open loop on the trace's own timestamps (trace sources only)."""

    type: Literal["trace_timestamps"] = "trace_timestamps"
    """Load kind: 'trace_timestamps'."""
    speedup: PositiveNumber = 1.0
    """Divides every arrival time and inter-turn delay."""

    @model_validator(mode="before")
    @classmethod
    def _fields(cls, data: Any) -> Any:
        """Only `speedup` is accepted."""
        return _load_fields(data, "trace_timestamps", ("speedup",), ("speedup",))


LoadConfig = Annotated[
    Union[
        Annotated[ConcurrencyLoad, Tag("concurrency")],
        Annotated[PoissonLoad, Tag("poisson")],
        Annotated[ConstantRateLoad, Tag("constant_rate")],
        Annotated[TraceTimestampsLoad, Tag("trace_timestamps")],
    ],
    Discriminator(_type_tag("concurrency")),
]

# --------------------------------------------------------------------------------------------
# traffic.stop, traffic, evaluation
# --------------------------------------------------------------------------------------------

_REQUEST_STOPS = ("requests", "requests_per_load_unit")
_SESSION_STOPS = ("sessions", "sessions_per_load_unit")


class StopConfig(_Model):
    """When the workload ends: a request/session count (synthetic) or a time cap (trace)."""

    requests: PositiveInt | None = None
    """Number of requests (synthetic)."""
    requests_per_load_unit: PositiveNumber | None = None
    """Requests per unit of load (concurrency or rate): count = max(1, round(ratio x unit))."""
    sessions: PositiveInt | None = None
    """Number of sessions (synthetic-session)."""
    sessions_per_load_unit: PositiveNumber | None = None
    """Sessions per unit of load (concurrency or rate): count = max(1, round(ratio x unit))."""
    max_virtual_time_seconds: PositiveNumber | None = None
    """Simulated-time cap (trace sources only)."""

    def given(self, keys: tuple[str, ...]) -> list[str]:
        """Which of `keys` are set."""
        return [k for k in keys if getattr(self, k) is not None]


class TrafficConfig(_Model):
    """What arrives, when, and until when."""

    source: SourceConfig
    """Where requests come from: synthetic, synthetic-session or trace."""
    load: LoadConfig
    """When requests arrive: concurrency, poisson, constant_rate or trace_timestamps."""
    stop: StopConfig | None = None
    """When the workload ends (required for synthetic sources)."""
    client_timeout_seconds: PositiveNumber | None = None
    """servesim extension: clients abort a request still unfinished this long after sending it (as load generators do, e.g. inference-perf's 300 s); it is reported as 'timed_out', its KV freed at the worker's next pass boundary, and it is left out of the latency statistics. Aggregated deployments only; omitted = clients wait for ever (the reference)."""

    @model_validator(mode="after")
    def _combination_rules(self) -> TrafficConfig:
        """Source, load and stop must fit together."""
        if isinstance(self.source, TraceSource):
            problems = _trace_rules(self.source, self.load, self.stop)
        else:
            problems = _synthetic_rules(self.source, self.load, self.stop)
        _raise_if(problems)
        return self


def _trace_rules(source: TraceSource, load: Any, stop: StopConfig | None) -> list[tuple[str, str]]:
    """Loads and stops a trace source accepts."""
    problems = []
    if not isinstance(load, (TraceTimestampsLoad, ConcurrencyLoad)):
        problems.append(("load.type", f"trace sources need 'trace_timestamps' or 'concurrency' load (got '{load.type}')"))
    if stop is not None:
        problems += [(f"stop.{k}", "not allowed for trace sources (only max_virtual_time_seconds)") for k in stop.given(_REQUEST_STOPS + _SESSION_STOPS)]
    if source.format == "agentic_mooncake":
        if not isinstance(load, TraceTimestampsLoad):
            problems.append(("load.type", f"format 'agentic_mooncake' requires 'trace_timestamps' load (got '{load.type}')"))
        if stop is not None and stop.max_virtual_time_seconds is not None:
            problems.append(("stop.max_virtual_time_seconds", "not supported with format 'agentic_mooncake'"))
    if source.format == "applied_compute_agentic" and not isinstance(load, ConcurrencyLoad):
        problems.append(("load.type", f"format 'applied_compute_agentic' requires 'concurrency' load (got '{load.type}')"))
    return problems


def _synthetic_rules(source: SyntheticSource | SyntheticSessionSource, load: Any, stop: StopConfig | None) -> list[tuple[str, str]]:
    """Loads and stops synthetic sources accept."""
    sessions = isinstance(source, SyntheticSessionSource)
    problems = []
    if isinstance(load, TraceTimestampsLoad):
        problems.append(("load.type", f"'trace_timestamps' load needs a trace source (source is '{source.type}')"))
    if isinstance(load, (PoissonLoad, ConstantRateLoad)):
        problems += _rate_rules(load, "sessions_per_second" if sessions else "requests_per_second", source.type)
    if stop is None:
        problems.append(("stop", f"is required for '{source.type}' sources"))
        return problems
    if stop.max_virtual_time_seconds is not None:
        problems.append(("stop.max_virtual_time_seconds", "is trace-only"))
    wanted, unwanted = (_SESSION_STOPS, _REQUEST_STOPS) if sessions else (_REQUEST_STOPS, _SESSION_STOPS)
    problems += [(f"stop.{k}", f"not allowed for '{source.type}' sources (use {' or '.join(wanted)})") for k in stop.given(unwanted)]
    if len(stop.given(wanted)) != 1:
        problems.append(("stop", f"exactly one of {', '.join(wanted)} is required for '{source.type}' sources"))
    return problems


def _rate_rules(load: PoissonLoad | ConstantRateLoad, wanted: str, source_type: str) -> list[tuple[str, str]]:
    """Open-loop loads need the rate whose unit matches the source."""
    other = "requests_per_second" if wanted == "sessions_per_second" else "sessions_per_second"
    problems = []
    if getattr(load, other) is not None:
        problems.append((f"load.{other}", f"rate unit does not match source '{source_type}' (use {wanted})"))
    elif getattr(load, wanted) is None:
        problems.append((f"load.{wanted}", f"is required for '{load.type}' load with source '{source_type}'"))
    return problems


def default_traffic() -> TrafficConfig:
    """The traffic used when the section is omitted: 1024/128 synthetic, concurrency 10, 100 requests."""
    return TrafficConfig(source=SyntheticSource(), load=ConcurrencyLoad(), stop=StopConfig(requests=100))


_SLA_KEYS = ("ttft_ms", "itl_ms", "e2e_ms")


class SlaConfig(_Model):
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


class EvaluationConfig(_Model):
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

_AGGREGATED_ONLY_FORMATS = ("mooncake-delta", "agentic_mooncake")


# --------------------------------------------------------------------------------------------
# router (the Dynamo reference stack's section, plus servesim extensions)
# --------------------------------------------------------------------------------------------


class PrefillLoadModelConfig(_Model):
    """How the KV router ages the prefill load it charges a worker."""

    type: Literal["none", "ais"] = "none"
    """'none': a request's prompt counts in full until its first token; 'ais': it decays
    linearly over the prefill time the worker's timing model predicts."""


class RouterConfig(_Model):
    """Where each request goes (Dynamo's `router:` section; servesim extensions marked)."""

    policy: Literal["round_robin", "kv_router", "random", "least_loaded"] = "round_robin"
    """round_robin (the reference's default), kv_router (Dynamo's KV-aware cost), random or
    least_loaded (fewest requests in flight) — the last two are servesim extensions."""
    overlap_score_credit: NonNegativeNumber = 1.0
    """kv_router: prefill blocks credited per cached prefix block (c)."""
    prefill_load_scale: NonNegativeNumber = 1.0
    """kv_router: weight of the worker's prefill load after the credit (s)."""
    temperature: NonNegativeNumber = 0.0
    """kv_router: 0 picks the cheapest worker; above 0, softmax over normalised costs."""
    prefill_load_model: PrefillLoadModelConfig = PrefillLoadModelConfig()
    """kv_router: how charged prefill load ages."""
    overlap_score_credit_decay: NonNegativeNumber = 0.0
    """kv_router (servesim extension): softens the credit on workers with excess prefill load."""
    decode_active_request_weight: NonNegativeNumber = 0.0
    """kv_router (servesim extension): cost in blocks per request in flight on the worker."""
    session_affinity: bool = False
    """servesim extension: later turns of a session go to the worker of its first turn (while
    that worker serves)."""
    seed: NonNegativeInt = 0
    """servesim extension: seed of the router's own random stream (ties, softmax, random policy),
    so a config always gives the same report."""


# --------------------------------------------------------------------------------------------
# planner (the Dynamo reference stack's autoscaler section, plus servesim extensions)
# --------------------------------------------------------------------------------------------

_INTERVAL_KEYS = ("throughput_adjustment_interval_seconds", "load_adjustment_interval_seconds")
IntervalSeconds = Annotated[int, Strict(), Gt(0)]
"""Strict whole seconds > 0 (Dynamo's intervals are integers)."""
GpuBudget = Annotated[int, Strict(), Ge(-1)]
"""Strict integer >= -1 (-1: no bound)."""
Percent = Annotated[int, Strict(), Ge(0), Le(100)]
"""Strict integer percentage in [0, 100]."""


class PlannerConfig(_Model):
    """Dynamo's planner (autoscaler), as the reference stack's `planner:` section writes it."""

    policy: Literal["enabled", "disabled"] = "disabled"
    """'enabled' runs the planner; 'disabled' (also an omitted or empty section) keeps the fleet fixed."""
    target: Literal["throughput", "latency", "load", "sla"] = "throughput"
    """Dynamo's optimization_target. throughput/latency: fixed queue and KV-utilisation
    thresholds; load: queued prefill tokens 1/0 and KV utilisation 90 %/70 %; sla: predicted
    TTFT/ITL against evaluation.sla. Every target but sla forces load scaling on and
    throughput scaling off."""
    enable_throughput_scaling: bool = True
    """Predictive scaling from a traffic forecast (only with target sla)."""
    enable_load_scaling: bool = False
    """Reactive scaling from forward-pass metrics, one worker per decision (forced on by
    targets other than sla)."""
    throughput_adjustment_interval_seconds: IntervalSeconds | None = 180
    """Seconds between throughput decisions (null only while throughput scaling is off)."""
    load_adjustment_interval_seconds: IntervalSeconds | None = 5
    """Seconds between load decisions (null only while load scaling is off)."""
    max_throughput_scaling_replicas: PositiveInt = 8
    """Largest replica change per pool from one throughput decision."""
    max_num_fpm_samples: PositiveInt = 64
    """Forward-pass samples the planner averages request shapes over."""
    fpm_sample_bucket_size: PositiveInt = 16
    """Dynamo's regression bucket count (a perfect square); accepted, no effect (servesim
    predicts with the pool's own timing model)."""
    load_scaling_down_sensitivity: Percent = 80
    """sla target: a scale-down must keep the predicted latency under this % of the SLA."""
    load_min_observations: PositiveInt = 5
    """Dynamo's regression warm-up; accepted, no effect (the timing model needs none)."""
    load_predictor: Literal["constant", "arima", "kalman", "prophet", "moving_average"] = "arima"
    """Traffic forecaster: constant (last value), kalman (local linear trend), arima (servesim:
    the local-linear-trend filter, its state-space equivalent ARIMA(0,2,2)), prophet (servesim:
    least-squares trend over the last prophet_window_size points), moving_average (servesim
    extension: mean of the last moving_average_window points)."""
    load_predictor_log1p: bool = False
    """Forecast log1p of the series (spiky traffic)."""
    prophet_window_size: PositiveInt = 50
    """prophet: points the trend is fitted on."""
    kalman_q_level: PositiveNumber = 1.0
    """kalman/arima: process noise of the level."""
    kalman_q_trend: PositiveNumber = 0.1
    """kalman/arima: process noise of the trend."""
    kalman_r: PositiveNumber = 10.0
    """kalman/arima: measurement noise."""
    kalman_min_points: PositiveInt = 5
    """kalman/arima: observations before the filter forecasts (the last value until then)."""
    moving_average_window: PositiveInt = 5
    """servesim extension: points averaged by load_predictor moving_average."""
    max_num_gpus: GpuBudget = 8
    """GPU ceiling over all pools (Dynamo's max_gpu_budget); -1: none."""
    min_num_gpus: GpuBudget = -1
    """GPU floor over all pools (Dynamo's min_gpu_budget); -1: none."""
    min_workers: NonNegativeInt = 1
    """Fewest workers per pool (0 allows scaling to zero)."""
    prefill_min_workers: PositiveInt | None = None
    """Disaggregated: fewest prefill workers (default min_workers)."""
    decode_min_workers: PositiveInt | None = None
    """Disaggregated: fewest decode workers (default min_workers)."""

    @model_validator(mode="after")
    def _planner_rules(self) -> PlannerConfig:
        """Dynamo's checks on an enabled planner: a perfect-square bucket count, an enabled
        scaling mode, an interval for each enabled mode, load faster than throughput."""
        if self.policy != "enabled":
            return self
        problems = []
        root = math.isqrt(self.fpm_sample_bucket_size)
        if root * root != self.fpm_sample_bucket_size:
            problems.append(("fpm_sample_bucket_size", "must be a perfect square"))
        throughput_on, load_on = self.scaling_modes
        if not (throughput_on or load_on):
            problems.append(("", "at least one of enable_throughput_scaling and enable_load_scaling must be true"))
        for key, on in zip(_INTERVAL_KEYS, (throughput_on, load_on)):
            if on and getattr(self, key) is None:
                problems.append((key, "cannot be null while its scaling mode is enabled"))
        throughput, load = self.throughput_adjustment_interval_seconds, self.load_adjustment_interval_seconds
        if throughput_on and load_on and throughput is not None and load is not None and load >= throughput:
            problems.append(("load_adjustment_interval_seconds",
                             f"must be shorter than throughput_adjustment_interval_seconds ({throughput})"))
        _raise_if(problems)
        return self

    @property
    def scaling_modes(self) -> tuple[bool, bool]:
        """(throughput, load) scaling as Dynamo runs them: every target but sla forces load
        scaling on and throughput scaling off."""
        if self.target != "sla":
            return (False, True)
        return (self.enable_throughput_scaling, self.enable_load_scaling)


def _planner_cross_rules(config: SimConfig) -> list[tuple[str, str]]:
    """Planner rules that involve other sections (the reference adapter's checks)."""
    planner = config.planner
    if planner.policy != "enabled":
        return []
    problems = []
    if config.engine.mode == "aggregated":
        problems += [(f"planner.{k}", "is only for engine.mode 'disaggregated'; use min_workers")
                     for k in ("prefill_min_workers", "decode_min_workers") if getattr(planner, k) is not None]
    sla = config.evaluation.sla
    if planner.scaling_modes[0] and (sla is None or sla.ttft_ms is None):
        problems.append(("planner.enable_throughput_scaling", "needs evaluation.sla.ttft_ms and evaluation.sla.itl_ms"))
    return problems


class SimConfig(_Model):
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
        source = self.traffic.source
        if isinstance(source, TraceSource) and source.format in _AGGREGATED_ONLY_FORMATS and self.engine.mode != "aggregated":
            raise RuleViolation([("traffic.source.format", f"'{source.format}' requires engine.mode 'aggregated'")])
        return self

    @model_validator(mode="after")
    def _timeouts_need_aggregated(self) -> SimConfig:
        """Client timeouts abort requests on aggregated workers only."""
        if self.traffic.client_timeout_seconds is not None and self.engine.mode != "aggregated":
            raise RuleViolation([("traffic.client_timeout_seconds", "is supported with engine.mode 'aggregated' only")])
        return self

    @model_validator(mode="after")
    def _planner_fits_the_deployment(self) -> SimConfig:
        """Planner keys that depend on the engine mode or the SLA."""
        _raise_if(_planner_cross_rules(self))
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


def request_count(traffic: TrafficConfig) -> int | None:
    """Resolved request count (synthetic) or session count (synthetic-session); None for traces.

    A relative stop gives ``max(1, round(ratio x load_unit))`` where the load unit is the
    concurrency or the arrival rate; ``round`` is Python's (half to even).
    """
    if isinstance(traffic.source, TraceSource) or traffic.stop is None:
        return None
    keys = _SESSION_STOPS if isinstance(traffic.source, SyntheticSessionSource) else _REQUEST_STOPS
    count, ratio = (getattr(traffic.stop, k) for k in keys)
    if count is not None:
        return int(count)
    if ratio is None:
        return None
    return max(1, round(ratio * _load_unit(traffic.load)))


def _load_unit(load: Any) -> float:
    """What a relative stop multiplies: the concurrency or the arrival rate."""
    if isinstance(load, ConcurrencyLoad):
        return load.concurrency
    rate = load.rate if isinstance(load, (PoissonLoad, ConstantRateLoad)) else None
    if rate is None:
        raise ValueError(f"load type '{load.type}' has no load unit")
    return rate


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
        if not math.isfinite(worker.startup_seconds):
            found.append(f"{where}.startup_seconds: must be finite")
        if isinstance(worker.timing, FixedTiming):
            found += [f"{where}.timing.{k}: must be finite" for k in _FIXED_TIMING_KEYS if not math.isfinite(getattr(worker.timing, k))]
    load = config.traffic.load
    if isinstance(load, PoissonLoad) and load.seed > U64_MAX:
        found.append(f"traffic.load.seed: must fit in 64 bits (got {load.seed})")
    return found
