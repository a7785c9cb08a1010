"""The `engine:` section: topology, backend, and each role's workers (parallelism, scheduler,
KV cache, timing — its own module, `config.timing` —, speculative decoding).
"""


from collections.abc import Mapping
from typing import Annotated, Any, Literal, Union

from annotated_types import Ge, Le
from pydantic import (
    Discriminator,
    SerializerFunctionWrapHandler,
    Strict,
    Tag,
    field_validator,
    model_serializer,
    model_validator,
)

from servesim.config.fields import (
    ByteCount,
    BytesPerToken,
    ContextLength,
    Fraction,
    HardwareName,
    LaxDurationSeconds,
    ModelName,
    NonNegativeInt,
    NonNegativeNumber,
    OpenFraction,
    PositiveInt,
    PositiveNumber,
    RuleViolation,
    SchemaModel,
    TokenCount,
    U64_MAX,
    WorkerCount,
    raise_if,
    type_tag,
    without_nulls,
)
from servesim.config.kv_tiers import G3OffloadConfig, HostOffloadConfig, KvcrConfig, StateCacheConfig, tier_problems
from servesim.config.timing import DefaultTiming, TimingConfig
from servesim.limits import MAX_WORKERS

EngineMode = Literal["aggregated", "disaggregated"]
Backend = Literal["vllm", "sglang", "trtllm"]
Role = Literal["aggregated", "prefill", "decode"]

class ParallelismConfig(SchemaModel):
    """How many engine instances a role has and how each one is split across GPUs."""

    replicas: WorkerCount = 1
    """Number of logical workers (engine instances) in this role's pool."""
    tensor: WorkerCount = 1
    """Tensor-parallel size; used by AIC timing and for GPU accounting."""
    pipeline: WorkerCount = 1
    """Pipeline-parallel size; passed to AIC only, not counted in GPUs per worker."""
    attention_data: WorkerCount = 1
    """Attention data-parallel ranks per worker, each with its own scheduler and KV pool."""
    moe_tensor: WorkerCount = 1
    """MoE tensor-parallel size; passed to AIC only when moe_tensor x moe_expert > 1."""
    moe_expert: WorkerCount = 1
    """MoE expert-parallel size; passed to AIC only when moe_tensor x moe_expert > 1."""

    @model_validator(mode="after")
    def _ranks_bound(self) -> "ParallelismConfig":
        """Every rank is simulated: replicas x attention_data is bounded like replicas."""
        if self.replicas * self.attention_data > MAX_WORKERS:
            raise RuleViolation([("replicas", f"x attention_data must be <= {MAX_WORKERS} scheduler ranks "
                                              f"(got {self.replicas} x {self.attention_data})")])
        return self

    @property
    def gpus_per_worker(self) -> int:
        """GPUs one worker occupies (tensor x attention_data; pipeline stages are not counted)."""
        return self.tensor * self.attention_data


_ROLES: tuple[Role, ...] = ("aggregated", "prefill", "decode")

DEFAULT_MAX_SEQUENCES: dict[str, int] = {"aggregated": 256, "prefill": 1, "decode": 256}


class SglangSchedulerConfig(SchemaModel):
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


class SchedulerConfig(SchemaModel):
    """Per-rank batching limits."""

    max_batched_tokens: TokenCount = 8192
    """Token budget of one scheduling pass (vLLM max_num_batched_tokens; ignored by SGLang)."""
    max_sequences: PositiveInt | None = None
    """Max running requests per rank (max_num_seqs); omitted = 256, or 1 for the prefill role."""
    sglang: SglangSchedulerConfig | None = None
    """SGLang knobs (servesim extension, backend 'sglang' only); omitted = the reference's defaults."""
    preemption_mode: Literal["lifo", "fifo"] | None = None
    """vLLM preemption victim (servesim extension, backend 'vllm' only): 'lifo' = the last running request (omitted), 'fifo' = the first."""
    prefill_schedule_interval: PositiveInt = 1
    """Upstream 0.13 key (backend 'vllm' only): with attention DP, a rank that is decoding admits new requests only on every N-th pass of its worker since the worker was last idle (chunks of admitted prompts continue); no effect without attention_data > 1 (as in 0.13)."""
    prefill_decode_interval: NonNegativeInt = 0
    """Upstream 0.13 key (backend 'sglang' only): after each pass that extends (prefills), N passes neither admit nor continue a chunked prompt while requests are decoding (passes with nothing to decode take no time); 0 = off."""
    async_scheduling: bool | None = None
    """servesim extension: a request reaching a worker while it runs a pass joins the pass after next, as with vLLM's async scheduling (SGLang's and TensorRT-LLM's overlap schedulers work alike: the next pass is planned before the running one ends); omitted = on when the role's timing.mixed_pass is 'fused', else off (the reference)."""

    @field_validator("max_sequences", mode="before")
    @classmethod
    def _explicit_null(cls, value: Any) -> Any:
        """An explicit null is an error: omit the key to get the role default."""
        if value is None:
            raise ValueError("must be a positive integer (omit the key for the role default), not null")
        return value

    @model_serializer(mode="wrap")
    def _omit_default_max_sequences(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """`max_sequences` left to the role default is omitted from a dump (as it was from the
        config), so a dumped config validates again."""
        data: dict[str, Any] = handler(self)
        if data.get("max_sequences", 0) is None:
            del data["max_sequences"]
        return data

    def max_sequences_for(self, role: Role) -> int:
        """The effective max_num_seqs for a worker of `role`."""
        return self.max_sequences if self.max_sequences is not None else DEFAULT_MAX_SEQUENCES[role]


DEFAULT_BLOCK_SIZE: dict[str, int] = {"vllm": 64, "sglang": 1, "trtllm": 32}
DEFAULT_MEMORY_FRACTION: dict[str, float] = {"vllm": 0.9, "sglang": 0.88, "trtllm": 0.9}


MAX_EXACT_BYTES = 1 << 53
"""Largest byte count a float holds exactly (the upstream bound of cuda_graph_reserved_bytes)."""
ReservedBytes = Annotated[int, Strict(), Ge(0), Le(MAX_EXACT_BYTES)]
"""Strict integer in [0, 2**53]."""


class DefaultCapacity(SchemaModel):
    """KV capacity estimated by AIC from the GPU memory left after weights."""

    type: Literal["default"] = "default"
    """Capacity kind: 'default' = AIC memory estimate."""
    memory_fraction: OpenFraction | None = None
    """Fraction of GPU memory usable for KV in (0, 1]; omitted = 0.9 (vLLM, TRT-LLM) or 0.88 (SGLang)."""
    cuda_graph_reserved_bytes: ReservedBytes = 0
    """Upstream 0.13 key: bytes per rank held by CUDA graphs, added to the non-KV memory before the KV budget is taken (0..2**53)."""

    @model_validator(mode="before")
    @classmethod
    def _reject_blocks(cls, data: Any) -> Any:
        """'blocks' and 'bytes' belong to the fixed capacity kind."""
        data = without_nulls(data, ("blocks", "bytes"))
        if isinstance(data, Mapping):
            raise_if([(key, "not allowed when type is 'default' (set type: fixed)")
                      for key in ("blocks", "bytes") if key in data])
        return data

    def memory_fraction_for(self, backend: Backend) -> float:
        """The effective memory fraction for `backend`."""
        if self.memory_fraction is not None:
            return self.memory_fraction
        return DEFAULT_MEMORY_FRACTION[backend]


class FixedCapacity(SchemaModel):
    """A fixed KV pool per scheduler rank, in blocks or (upstream 0.13) in bytes."""

    type: Literal["fixed"] = "fixed"
    """Capacity kind: 'fixed' = explicit block count or byte size."""
    blocks: PositiveInt | None = None
    """Number of KV blocks per scheduler (attention-DP) rank; exactly one of blocks and bytes."""
    bytes: ByteCount | None = None
    """Upstream 0.13 key: KV pool bytes per rank; blocks = bytes // (block_size x kv_cache.bytes_per_token), both of which must then be given explicitly."""
    cuda_graph_reserved_bytes: Literal[0] = 0
    """Upstream 0.13 key: only 0 here (a fixed pool reserves nothing; 0.13 accepts 0 and refuses any other value)."""

    @model_validator(mode="before")
    @classmethod
    def _fixed_fields(cls, data: Any) -> Any:
        """One of 'blocks' and 'bytes'; 'memory_fraction' and a non-zero 'cuda_graph_reserved_bytes' belong to the default kind."""
        data = without_nulls(data, ("blocks", "bytes", "memory_fraction"))
        if not isinstance(data, Mapping):
            return data
        problems = []
        given = [key for key in ("blocks", "bytes") if key in data]
        if not given:
            problems.append(("", "'blocks' (or 'bytes') is required when type is 'fixed'"))
        elif len(given) == 2:
            problems.append(("bytes", "not allowed together with 'blocks' (give one of them)"))
        if "memory_fraction" in data:
            problems.append(("memory_fraction", "not allowed when type is 'fixed'"))
        reserved = data.get("cuda_graph_reserved_bytes", 0)
        if not (type(reserved) is int and reserved == 0):
            problems.append(("cuda_graph_reserved_bytes", "must be 0 (or omitted) when type is 'fixed'"))
        raise_if(problems)
        return data

    def blocks_for(self, block_size: int, bytes_per_token: int | str) -> int:
        """Blocks per rank: `blocks`, or `bytes` // (block_size x bytes_per_token)."""
        if self.blocks is not None:
            return self.blocks
        assert self.bytes is not None and isinstance(bytes_per_token, int)
        return self.bytes // (block_size * bytes_per_token)


KvCapacityConfig = Annotated[
    Union[Annotated[DefaultCapacity, Tag("default")], Annotated[FixedCapacity, Tag("fixed")]],
    Discriminator(type_tag("default")),
]


def _state_prerequisites(kv: "KvCacheConfig") -> list[tuple[str, str]]:
    """What state_cache (upstream 0.13) needs before its blocks can be counted: a fixed pool, a
    given size and an explicit block geometry of blocks of >= 2 tokens within u64."""
    if not isinstance(kv.capacity, FixedCapacity):
        return [("state_cache", "requires a fixed capacity (capacity.type 'fixed' with blocks or bytes)")]
    assert kv.state_cache is not None
    if kv.state_cache.bytes_per_request is None:
        return [("state_cache.bytes_per_request", "must be given: servesim does not estimate a hybrid "
                                                  "model's state size (upstream 0.13 does)")]
    problems = [(key, "must be given explicitly (a positive integer) when state_cache is set")
                for key, value in (("block_size", kv.block_size), ("bytes_per_token", kv.bytes_per_token))
                if not isinstance(value, int)]
    if problems:
        return problems
    assert isinstance(kv.block_size, int) and isinstance(kv.bytes_per_token, int)
    if kv.block_size * kv.bytes_per_token > U64_MAX:
        return [("", "block_size x bytes_per_token overflows an unsigned 64-bit integer")]
    if kv.block_size < 2:
        return [("block_size", f"must be >= 2 with state_cache (got {kv.block_size})")]
    return []


class KvCacheConfig(SchemaModel):
    """KV cache block size, prefix caching and capacity."""

    block_size: PositiveInt | None = None
    """Engine KV block size in tokens; omitted = backend default (vLLM 64, SGLang 1, TRT-LLM 32)."""
    prefix_caching: bool = True
    """Reuse cached prompt-prefix blocks across requests."""
    capacity: KvCapacityConfig = DefaultCapacity.defaults()
    """How many KV blocks each rank has: {type: default, memory_fraction, cuda_graph_reserved_bytes} or {type: fixed, blocks or bytes}."""
    bytes_per_token: BytesPerToken = "auto"
    """Upstream 0.13 key: KV bytes per token per rank; needed (explicit, with block_size) by capacity.bytes and state_cache; sizes the host blocks of host_offload ('auto' = from the model's HF config there); like 0.13, not the P/D transfer (that uses kv_transfer.bytes_per_token)."""
    host_offload: HostOffloadConfig | None = None
    """Upstream 0.13 key: G2 host-memory tier (vLLM, aggregated mode, prefix caching on); omitted = none."""
    g3_offload: G3OffloadConfig | None = None
    """Upstream 0.13 key: G3 disk tier behind host_offload (aggregated workers, attention_data 1); omitted = none."""
    kvcr: KvcrConfig | None = None
    """Upstream 0.13 key: peer G2 fetch {latency_to_first_byte_ms, bandwidth_gbps} (needs host_offload, not with g3_offload, parallelism.pipeline 1); accepted, no pull ever happens in predict (as in 0.13, whose pulls need the Dynamo router's KV hints); adds the all-zero `kvcr` summary section; omitted = none."""
    state_cache: StateCacheConfig | None = None
    """Upstream 0.13 key: hybrid-model state cache {bytes_per_request} (backend 'vllm', aggregated mode, fixed capacity, explicit block_size >= 2 and bytes_per_token); omitted = none."""

    @model_validator(mode="after")
    def _host_offload_needs_caching(self) -> "KvCacheConfig":
        """A host tier only holds shareable prefix blocks; a disk tier sits behind a host tier."""
        if self.host_offload is not None and not self.prefix_caching:
            raise_if([("host_offload", "requires prefix_caching: true")])
        raise_if(tier_problems(self.host_offload, self.g3_offload, self.kvcr)[:1])
        return self

    @model_validator(mode="after")
    def _byte_geometry(self) -> "KvCacheConfig":
        """capacity.bytes needs explicit block_size and bytes_per_token and must hold a block."""
        cap = self.capacity
        if not isinstance(cap, FixedCapacity) or cap.bytes is None:
            return self
        problems = [(key, "must be given explicitly (a positive integer) when capacity.bytes is set")
                    for key, value in (("block_size", self.block_size), ("bytes_per_token", self.bytes_per_token))
                    if not isinstance(value, int)]
        raise_if(problems)
        assert isinstance(self.block_size, int) and isinstance(self.bytes_per_token, int)
        block_bytes = self.block_size * self.bytes_per_token
        if block_bytes > U64_MAX:
            problems.append(("", "block_size x bytes_per_token overflows an unsigned 64-bit integer"))
        elif cap.bytes < block_bytes:
            problems.append(("capacity.bytes", f"must hold at least one block of block_size x bytes_per_token = "
                                               f"{block_bytes} bytes (got {cap.bytes})"))
        raise_if(problems)
        return self

    @model_validator(mode="after")
    def _state_geometry(self) -> "KvCacheConfig":
        """state_cache needs a fixed pool, explicit byte geometry and room for a block and a state."""
        state, cap = self.state_cache, self.capacity
        if state is None:
            return self
        raise_if(_state_prerequisites(self))
        assert isinstance(cap, FixedCapacity) and isinstance(self.block_size, int)
        assert isinstance(self.bytes_per_token, int)
        block_bytes = self.block_size * self.bytes_per_token
        blocks = cap.blocks_for(self.block_size, self.bytes_per_token)
        need = state.state_blocks(block_bytes) + 1
        if blocks < need:
            raise_if([("capacity", f"must fit one token block and one request state: {need} blocks of "
                                   f"{block_bytes} bytes (got {blocks})")])
        return self

    def state_blocks(self) -> int:
        """Pool blocks each running request's state takes (0 without a state cache)."""
        if self.state_cache is None:
            return 0
        assert isinstance(self.block_size, int) and isinstance(self.bytes_per_token, int)
        return self.state_cache.state_blocks(self.block_size * self.bytes_per_token)

    def block_size_for(self, backend: Backend) -> int:
        """The effective block size for `backend`."""
        return self.block_size if self.block_size is not None else DEFAULT_BLOCK_SIZE[backend]


class SpeculativeConfig(SchemaModel):
    """Speculative (MTP / EAGLE) decoding: several tokens per decode step when drafts are accepted
    (servesim extension; the reference's engine has it but its YAML does not expose it)."""

    num_speculative_tokens: Annotated[int, Strict(), Ge(1), Le(5)]
    """Draft tokens per step (nextn), 1..5."""
    acceptance_rates: list[Fraction] | None = None
    """Conditional acceptance probability of each draft given the previous ones were accepted;
    missing entries are 0. Omitted: 0.85, 0.3, 0, 0, 0 (truncated to nextn)."""
    seed: NonNegativeInt = 42
    """Seed of the acceptance sampler (rank r of worker w uses seed + w × DP size + r)."""


class WorkerConfig(SchemaModel):
    """Settings shared by every worker of one role."""

    hardware: HardwareName | None = None
    """Upstream 0.13 key (disaggregated prefill and decode workers only): this role's AIC system (its GPU memory, KV capacity and default timing); omitted = engine.hardware."""
    parallelism: ParallelismConfig = ParallelismConfig.defaults()
    """Replicas and GPU split of each worker."""
    scheduler: SchedulerConfig = SchedulerConfig.defaults()
    """Per-rank batching limits."""
    kv_cache: KvCacheConfig = KvCacheConfig.defaults()
    """KV cache block size, prefix caching and capacity."""
    timing: TimingConfig = DefaultTiming.defaults()
    """Pass-duration model: {type: default} (AIC), {type: polynomial}, {type: fixed, prefill_ms, decode_ms} or {type: roofline} (servesim extension)."""
    startup_seconds: LaxDurationSeconds = 0.0
    """Delay before a newly added worker becomes ready (initial workers are ready at t=0)."""
    speculative: SpeculativeConfig | None = None
    """Speculative decoding (servesim extension); omitted = off."""


class WorkersConfig(SchemaModel):
    """Worker pools per role: `aggregated` alone, or `prefill` and `decode` together."""

    aggregated: WorkerConfig | None = None
    """Workers that prefill and decode (aggregated mode)."""
    prefill: WorkerConfig | None = None
    """Prefill-only workers (disaggregated mode)."""
    decode: WorkerConfig | None = None
    """Decode-only workers (disaggregated mode)."""


class KvTransferConfig(SchemaModel):
    """Prefill-to-decode KV transfer (disaggregated mode only)."""

    bytes_per_token: BytesPerToken = "auto"
    """KV bytes per token per rank, or 'auto' to derive it from the model's HF config."""
    bandwidth_gb_per_second: PositiveNumber | None = None
    """Transfer bandwidth in decimal GB/s; omitted = transfers take no time."""
    timing_mode: Literal["full_prompt", "destination_missing"] = "destination_missing"
    """Bytes moved: the full prompt, or only the blocks missing on the decode worker."""


def _interval_backends(engine: "EngineConfig") -> list[tuple[str, str]]:
    """The two prefill intervals (upstream 0.13) away from their defaults only on their backend."""
    return [(f"workers.{role}.scheduler.{key}", f"is supported only for backend '{backend}' (backend is "
                                                f"'{engine.backend}'; got {getattr(worker.scheduler, key)})")
            for role, worker in engine.roles.items()
            for key, backend, default in (("prefill_schedule_interval", "vllm", 1), ("prefill_decode_interval", "sglang", 0))
            if engine.backend != backend and getattr(worker.scheduler, key) != default]


def _state_cache_support(engine: "EngineConfig") -> list[tuple[str, str]]:
    """state_cache (upstream 0.13) runs on the vLLM backend, in aggregated mode, without drafts."""
    problems = []
    for role, worker in engine.roles.items():
        if worker.kv_cache.state_cache is None:
            continue
        key = f"workers.{role}.kv_cache.state_cache"
        if engine.backend != "vllm":
            problems.append((key, f"requires backend 'vllm' (backend is '{engine.backend}')"))
        elif engine.mode != "aggregated":
            problems.append((key, "is supported by servesim in aggregated mode only (upstream 0.13 also "
                                  "runs it disaggregated, set on both roles)"))
        if worker.speculative is not None:
            problems.append((key, "cannot be combined with speculative decoding in servesim"))
    return problems


class EngineConfig(SchemaModel):
    """The serving engine: topology, model, hardware, backend and per-role workers."""

    mode: EngineMode = "aggregated"
    """Topology: 'aggregated' or 'disaggregated' (separate prefill and decode pools)."""
    model: ModelName
    """Model id (HF-style, e.g. Qwen/Qwen3-8B; config.json from the AIC bundle, else the Hugging Face Hub) or a local directory holding config.json (relative: the current directory's, else the config folder's)."""
    hardware: HardwareName
    """AIC system name, e.g. h200_sxm ('auto' is recommendation-only)."""
    backend: Backend = "vllm"
    """Scheduler family: vllm, sglang or trtllm."""
    backend_version: str | None = None
    """AIC database version; omitted = AIC default for the backend (vLLM 0.19.0, SGLang 0.5.10, TRT-LLM 1.3.0rc10); a version the database has no data for is an error naming those it has; 'current' (servesim extension) = the database's newest."""
    aic_systems_path: str | None = None
    """servesim extension: AIConfigurator systems directory (perf database) for default timing and capacity, relative to the config's folder; omitted = $SERVESIM_AIC_SYSTEMS_PATH, else the reference's own database (fetched into servesim's cache on first use)."""
    context_length: ContextLength = "max"
    """Max model length (vLLM only); 'max' = from the model's HF config."""
    workers: WorkersConfig
    """Worker pools per role."""
    kv_transfer: KvTransferConfig | None = None
    """KV transfer between prefill and decode (disaggregated mode only)."""

    @model_validator(mode="after")
    def _topology_rules(self) -> "EngineConfig":
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
        problems += _interval_backends(self)
        problems += self._host_offload_rules()
        problems += [(f"workers.{role}.hardware", "only allowed for prefill and decode workers in disaggregated mode")
                     for role, worker in self.roles.items() if worker.hardware is not None and role == "aggregated"]
        problems += _state_cache_support(self)
        if self.backend in ("vllm", "trtllm"):
            for role, worker in self.roles.items():
                size = worker.kv_cache.block_size_for(self.backend)
                if size < 2:
                    problems.append((f"workers.{role}.kv_cache.block_size", f"must be >= 2 for backend '{self.backend}' (got {size})"))
        raise_if(problems)
        return self

    def _host_offload_rules(self) -> list[tuple[str, str]]:
        """host_offload: vLLM, aggregated mode, no speculative decoding (as in 0.13, which also
        offers it to disaggregated roles: not built in servesim)."""
        problems = []
        for role, worker in self.roles.items():
            if worker.kv_cache.host_offload is None:
                continue
            key = f"workers.{role}.kv_cache.host_offload"
            if self.backend != "vllm":
                problems.append((key, f"only allowed when backend is 'vllm' (backend is '{self.backend}')"))
            elif self.mode != "aggregated":
                problems.append((key, "is not built in servesim for disaggregated roles (aggregated mode only)"))
            elif worker.speculative is not None:
                problems.append((key, "not allowed together with speculative decoding"))
            elif worker.kv_cache.g3_offload is not None and worker.parallelism.attention_data != 1:
                problems.append((f"workers.{role}.kv_cache.g3_offload", "requires parallelism.attention_data: 1"))
            elif worker.kv_cache.kvcr is not None and worker.parallelism.pipeline != 1:
                problems.append((f"workers.{role}.kv_cache.kvcr", "requires parallelism.pipeline: 1"))
        return problems

    def for_role(self, worker: WorkerConfig) -> "EngineConfig":
        """The engine as `worker`'s role sees it: its own hardware, if it names one."""
        if worker.hardware is None or worker.hardware == self.hardware:
            return self
        return self.model_copy(update={"hardware": worker.hardware})

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
