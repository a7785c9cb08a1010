"""A role's `timing:` section: how long a pass takes — the reference's kinds (default, fixed,
polynomial) and servesim's roofline, with the keys by which the data-backed kinds estimate a real
server (`RealServerTiming`: fused mixed passes, front-end latency, DP step synchronisation,
calibration files).
"""


from collections.abc import Mapping
from typing import Annotated, Any, Literal, Union

from pydantic import Discriminator, Tag, model_validator

from servesim.config.fields import (
    DurationMs,
    LaxDurationMs,
    NonNegativeNumber,
    OpenFraction,
    PositiveInt,
    PositiveNumber,
    RuleViolation,
    SchemaModel,
    raise_if,
    type_tag,
    without_nulls,
)

FIXED_TIMING_KEYS = ("prefill_ms", "decode_ms")


def _reject_fixed_timing_values(data: Any, kind: str) -> Any:
    """Non-fixed timing kinds accept no prefill_ms/decode_ms (null counts as absent)."""
    data = without_nulls(data, FIXED_TIMING_KEYS)
    if isinstance(data, Mapping):
        raise_if([(k, f"only allowed when type is 'fixed' (type is '{kind}')") for k in FIXED_TIMING_KEYS if k in data])
    return data


class RealServerTiming(SchemaModel):
    """The keys by which a data-backed timing model estimates a real server (servesim extensions)."""

    mixed_pass: Literal["sum", "fused"] | None = None
    """servesim extension: how a vLLM/TRT-LLM pass holding both prompt chunks and decode tokens is timed: 'sum' = a prefill pass plus a decode pass (the reference), 'fused' = one forward pass over all its tokens, and with it the async-scheduling and front-end latency defaults; omitted = 'sum' under compat: reference, else 'fused', servesim's best estimate (docs/timing.md, *Which model runs where*)."""
    frontend_ms: DurationMs | None = None
    """servesim extension: latency from a client sending a request to the engine seeing it (API server, multi-process executor); omitted = the calibration file's, else 0 with mixed_pass 'sum' (and under compat: reference) and the default for one engine's GPU count (tensor x pipeline) with 'fused' (docs/timing.md)."""
    dp_sync_ms: DurationMs | None = None
    """servesim extension: per-pass cost of keeping a worker's attention-DP ranks in step (vLLM's per-step all-reduce of the ranks' batch sizes between its engine processes); no effect without attention_data > 1; omitted = 0 with mixed_pass 'sum' and, with 'fused', 3 ms for a vLLM MoE model, else 0 (docs/timing.md)."""
    calibration: str | None = None
    """servesim extension: a calibration file written by `servesim calibrate` (prefill/decode scale factors, front-end latency and, where measured, the KV capacity of a default-capacity role); relative to the config's folder."""


class DefaultTiming(RealServerTiming):
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


class PolynomialTiming(SchemaModel):
    """Pass durations from the built-in polynomial formulas."""

    type: Literal["polynomial"] = "polynomial"
    """Timing kind: 'polynomial' = built-in formulas."""

    @model_validator(mode="before")
    @classmethod
    def _no_fixed_values(cls, data: Any) -> Any:
        """prefill_ms/decode_ms belong to the fixed kind."""
        return _reject_fixed_timing_values(data, "polynomial")


class GpuSpecConfig(SchemaModel):
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


class RooflineTiming(RealServerTiming):
    """servesim extension: analytic pass durations from the model's HF config and GPU peak numbers."""

    type: Literal["roofline"] = "roofline"
    """Timing kind: 'roofline' = analytic roofline (servesim extension)."""
    gpu: str | None = None
    """GPU whose constants are used; omitted = engine.hardware (AIC system file, servesim's table or $SERVESIM_GPU_SPECS)."""
    gpu_spec: GpuSpecConfig | None = None
    """Inline GPU constants; override the looked-up ones."""
    gemm_efficiency: OpenFraction = 0.7
    """Fraction of peak FLOP/s a GEMM reaches (unset: the GPU's measured value where servesim's GPU table has one, else 0.7)."""
    attention_efficiency: OpenFraction = 0.5
    """Fraction of peak FLOP/s attention reaches (unset: the GPU's measured value, else 0.5)."""
    memory_efficiency: OpenFraction = 0.8
    """Fraction of peak bandwidth memory-bound work reaches (unset: the GPU's measured value, else 0.8)."""
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


class FixedTiming(SchemaModel):
    """Constant pass durations."""

    type: Literal["fixed"] = "fixed"
    """Timing kind: 'fixed' = constant costs."""
    prefill_ms: LaxDurationMs
    """Cost (ms) added to a pass that contains prompt tokens."""
    decode_ms: LaxDurationMs
    """Cost (ms) of the decode phase of a pass (the engine floors it at 1 ms)."""

    @model_validator(mode="before")
    @classmethod
    def _both_required(cls, data: Any) -> Any:
        """prefill_ms and decode_ms are both required (null counts as absent)."""
        data = without_nulls(data, FIXED_TIMING_KEYS)
        if isinstance(data, Mapping):
            missing = [k for k in FIXED_TIMING_KEYS if k not in data]
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
    Discriminator(type_tag("default")),
]
