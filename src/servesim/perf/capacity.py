"""Default KV capacity (`kv_cache.capacity.type: default`): how many KV blocks fit on one rank.

The reference sizes the KV pool with AIConfigurator's memory model. servesim computes the same
quantity itself, per rank, in bytes::

    weights      = parameters held by one rank x bytes per parameter        (quant aware, / pp)
    activations  = max(2 x max_batched_tokens x (heads x head_dim) x c[min(tp, 8)], floor)
    others       = the GPU's runtime reserve            (system file misc.other_mem)
    nccl         = the GPU's NCCL reserve for min(tp,8) (system file misc.nccl_mem)
    graphs       = capacity.cuda_graph_reserved_bytes   (upstream 0.13 key; 0 by default)
    budget       = capacity x f - (weights + activations + others + nccl + graphs)     vLLM, SGLang
                 = (capacity - (weights + activations + others + nccl + graphs)) x f   TRT-LLM
    blocks       = floor(budget / kv_bytes_per_token) // block_size

Parameters per rank: each layer's q/k/v/o projections (heads split over tp, KV heads replicated
when tp exceeds them) and gated MLP (intermediate split over tp), plus the embedding and the LM
head (vocabulary split over tp), all in the checkpoint's weight format except the embedding and
LM head, which stay 16-bit. A mixture-of-experts layer holds ``experts / moe_ep`` experts of
``moe_intermediate / moe_tp`` width and an unsplit 16-bit router; there the database counts the
vocabulary matrix once. The activation coefficient c is 11 / 6.5 / 5 / 5 for dense models and
22 / 13 / 10 / 10 for MoE models at TP 1 / 2 / 4 / 8 (SGLang: 14 / 8.5 / 6.5 / 6.5 and
28 / 17 / 13 / 13, then +15 %, with a 90 MiB floor instead of 70 MiB and +20 % runtime reserve).
KV bytes per token are ``layers x ceil(kv_heads / tp) x head_dim x 2 x b`` with b = 1 byte for FP8
and NVFP4 checkpoints (the database assumes an fp8 KV cache there), else 2.

This reproduces the reference's block counts exactly for the dense (Llama, Qwen2/3) and MoE
(Qwen3-MoE, Mixtral) architectures in bf16, FP8 and NVFP4. Other architectures (MLA, hybrid
attention, sliding windows, MXFP4 ...) are sized by AIConfigurator's own estimator when it can
build the model, else by the same formula on a generic parameter count, with a warning.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

from servesim.perf.hardware import GpuSpec
from servesim.perf.models import ModelSpec
from servesim.errors import RunError

log = logging.getLogger("servesim")

_COEFFS: dict[str, dict[str, dict[int, float]]] = {
    "vllm": {"dense": {1: 11, 2: 6.5, 4: 5, 8: 5}, "moe": {1: 22, 2: 13, 4: 10, 8: 10},
             "other": {1: 10, 2: 6, 4: 5, 8: 5}},
    "sglang": {"dense": {1: 14, 2: 8.5, 4: 6.5, 8: 6.5}, "moe": {1: 28, 2: 17, 4: 13, 8: 13},
               "other": {1: 13, 2: 8, 4: 6.5, 8: 6.5}},
}
_COEFFS["trtllm"] = _COEFFS["vllm"]
_ACTIVATION_FLOOR = {"vllm": 70 << 20, "trtllm": 70 << 20, "sglang": 90 << 20}
_ACTIVATION_OVERHEAD = {"sglang": 0.15}
_OTHERS_OVERHEAD = {"sglang": 0.20}


@dataclass(frozen=True)
class Parallel:
    """How one worker is split: tensor, pipeline, attention-DP and MoE sizes."""

    tp: int = 1
    pp: int = 1
    attention_dp: int = 1
    moe_tp: int = 1
    moe_ep: int = 1


@dataclass(frozen=True)
class Capacity:
    """A KV-capacity estimate for one rank (bytes unless stated)."""

    weights: float
    activations: float
    others: float
    nccl: float
    gpu_memory: int
    budget: float
    kv_bytes_per_token: int
    tokens: int
    blocks: int
    method: str
    """'servesim' (exact formula), 'aiconfigurator' (its estimator) or 'generic' (parameter count)."""


def check_parallelism(model: ModelSpec, par: Parallel) -> None:
    """The database's model build refuses these splits; so does servesim (same messages)."""
    if model.num_heads % par.tp:
        raise RunError(f"unsupported model/backend/GPU for KV-cache estimation: model={model.name}: "
                       f"num_heads {model.num_heads} should be divisible by tp_size {par.tp}")
    if model.is_moe and par.tp * par.attention_dp != par.moe_tp * par.moe_ep:
        raise RunError(
            f"unsupported model/backend/GPU for KV-cache estimation: model={model.name}: "
            f"Parallelism width mismatch: tp_size({par.tp}) * attention_dp_size({par.attention_dp}) = "
            f"{par.tp * par.attention_dp}, but moe_tp_size({par.moe_tp}) * moe_ep_size({par.moe_ep}) = "
            f"{par.moe_tp * par.moe_ep}. These must be equal (set parallelism.moe_tensor or moe_expert)")
    if model.is_moe and model.quant == "fp8_block":
        block = ((model.config.get("quantization_config") or {}).get("weight_block_size") or [128])[0]
        if (model.moe_intermediate_size // par.moe_tp) % block:
            raise RunError(
                f"unsupported model/backend/GPU for KV-cache estimation: model={model.name}: Invalid "
                f"quantized MoE configuration: moe_intermediate_size {model.moe_intermediate_size} / "
                f"moe_tensor {par.moe_tp} is not a multiple of the fp8 block size {block}")


def weight_bytes(model: ModelSpec, par: Parallel) -> float:
    """Bytes of weights one rank holds."""
    tp, h, hd = par.tp, model.hidden_size, model.head_dim
    q = model.num_heads * hd // tp
    attention = h * (q + 2 * hd * model.kv_heads_per_rank(tp)) + q * h
    vocab = (model.vocab_size // tp) * h * 2
    layer_bytes = model.weight_bytes
    if model.is_moe:
        experts = (model.num_experts // par.moe_ep) * 3 * h * (model.moe_intermediate_size // par.moe_tp)
        router = h * model.num_experts * 2
        total = model.num_layers * ((attention + experts) * layer_bytes + router) + vocab
    else:
        mlp = 3 * h * (model.intermediate_size // tp)
        total = model.num_layers * (attention + mlp) * layer_bytes + 2 * vocab
    return total / par.pp


def activation_bytes(model: ModelSpec, backend: str, tp: int, max_batched_tokens: int, family: str) -> float:
    """Activation workspace for a pass of `max_batched_tokens` tokens."""
    table = _COEFFS[backend][family]
    key = min(tp, 8)
    coeff = table.get(key) or table[max(k for k in table if k <= key)]
    act = 2 * max_batched_tokens * (model.num_heads * model.head_dim) * coeff
    act = max(act, _ACTIVATION_FLOOR[backend])
    if backend in _ACTIVATION_OVERHEAD:
        act *= 1.0 + _ACTIVATION_OVERHEAD[backend]
    return float(act)


def runtime_reserves(gpu: GpuSpec, backend: str, tp: int) -> tuple[float, float]:
    """(runtime reserve, NCCL reserve) bytes of one rank: the GPU's ``misc.other_mem`` (+20 % for
    SGLang) and its ``misc.nccl_mem`` for ``min(tp, 8)``."""
    others = float(gpu.other_mem)
    if backend in _OTHERS_OVERHEAD:
        others *= 1.0 + _OTHERS_OVERHEAD[backend]
    return others, float(gpu.nccl_mem_for(tp))


def blocks_from_budget(gpu_memory: int, non_kv: float, fraction: float, of_free: bool,
                       kv_bytes_per_token: float, block_size: int) -> tuple[float, int, int]:
    """(budget bytes, tokens, blocks) with the database's float evaluation order."""
    budget = (gpu_memory - non_kv) * fraction if of_free else gpu_memory * fraction - non_kv
    if budget <= 0.0:
        raise RunError(f"no KV budget: non-KV memory ({int(max(non_kv, 0.0))} bytes) meets/exceeds the "
                       f"KV-cache memory limit (capacity={gpu_memory} bytes); use more GPUs per worker, "
                       "a larger memory_fraction or capacity: {type: fixed, blocks: N}")
    tokens = int(budget // float(kv_bytes_per_token))
    return budget, tokens, tokens // block_size


def estimate(model: ModelSpec, gpu: GpuSpec, backend: str, par: Parallel, *, block_size: int,
             max_batched_tokens: int, fraction: float, reserved_bytes: int = 0) -> Capacity:
    """servesim's own capacity formula (exact for `model.family` in dense/moe; generic otherwise)."""
    check_parallelism(model, par)
    family = model.family
    weights = weight_bytes(model, par)
    activations = activation_bytes(model, backend, par.tp, max_batched_tokens, family or ("moe" if model.is_moe else "other"))
    others, nccl = runtime_reserves(gpu, backend, par.tp)
    non_kv = weights + activations + others + nccl + float(reserved_bytes)
    per_token = model.kv_bytes_per_token(par.tp)
    budget, tokens, blocks = blocks_from_budget(gpu.mem_capacity, non_kv, fraction, backend == "trtllm",
                                                per_token, block_size)
    return Capacity(weights, activations, others, nccl, gpu.mem_capacity, budget, per_token, tokens,
                    blocks, "servesim" if family is not None else "generic")


def aic_estimate_blocks(model: str, system: str, backend: str, version: str, par: Parallel, *,
                        block_size: int, max_batched_tokens: int, max_sequences: int,
                        fraction: float, systems_path: str | None) -> int:
    """AIConfigurator's own estimator (for architectures servesim's formula does not cover)."""
    from aiconfigurator_core.sdk.memory import estimate_num_gpu_blocks  # lazy: imports pandas

    moe = par.moe_tp * par.moe_ep > 1
    return int(estimate_num_gpu_blocks(
        model, system, backend, backend_version=version, scheduler_block_size=block_size,
        max_num_tokens=max_batched_tokens, max_batch_size=max_sequences,
        memory_fraction_kind="of_free" if backend == "trtllm" else "of_total",
        memory_fraction_value=fraction, tp_size=par.tp, pp_size=par.pp,
        attention_dp_size=par.attention_dp, moe_tp_size=par.moe_tp if moe else None,
        moe_ep_size=par.moe_ep if moe else None, systems_path=systems_path))


def kv_blocks(model: ModelSpec, gpu: GpuSpec, backend: str, par: Parallel, *, block_size: int,
              max_batched_tokens: int, max_sequences: int, fraction: float,
              aic_model: str | None, version: str | None, systems_path: str | None,
              reserved_bytes: int = 0) -> Capacity:
    """Blocks per rank: servesim's formula, else AIConfigurator's estimator, else the generic count.

    `aic_model` is the name AIConfigurator resolves the model by (None when it cannot);
    `reserved_bytes` (CUDA graphs) count as non-KV memory.
    """
    if model.family is not None:
        return estimate(model, gpu, backend, par, block_size=block_size,
                        max_batched_tokens=max_batched_tokens, fraction=fraction, reserved_bytes=reserved_bytes)
    if aic_model is not None and gpu.has_aic_data and version is not None:
        try:
            blocks = aic_estimate_blocks(aic_model, gpu.name, backend, version, par, block_size=block_size,
                                         max_batched_tokens=max_batched_tokens, max_sequences=max_sequences,
                                         fraction=fraction, systems_path=systems_path)
        except Exception as exc:  # noqa: BLE001 - any failure of the foreign estimator
            log.warning("servesim: warning: AIConfigurator cannot size the KV cache of %s (%s); "
                        "using servesim's generic parameter count", model.name, str(exc).splitlines()[0][:200])
        else:
            per_token = model.kv_bytes_per_token(par.tp)
            blocks = _less_reserved(blocks, reserved_bytes, fraction if backend == "trtllm" else 1.0,
                                    per_token * block_size)
            return Capacity(math.nan, math.nan, math.nan, math.nan, gpu.mem_capacity, math.nan,
                            per_token, blocks * block_size, blocks, "aiconfigurator")
    else:
        log.warning("servesim: warning: KV capacity of %s (%s) uses a generic parameter count "
                    "(approximate); set kv_cache.capacity to {type: fixed, blocks: N} for an exact pool",
                    model.name, model.architecture)
    return estimate(model, gpu, backend, par, block_size=block_size,
                    max_batched_tokens=max_batched_tokens, fraction=fraction, reserved_bytes=reserved_bytes)


def _less_reserved(blocks: int, reserved_bytes: int, scale: float, block_bytes: float) -> int:
    """AIConfigurator's block count less the blocks `reserved_bytes` (x `scale`, the TRT-LLM
    fraction of free memory) would have taken (its estimator has no reservation argument; this is
    exact up to the floor of the budget's last partial block)."""
    if not reserved_bytes:
        return blocks
    left = blocks - math.ceil(reserved_bytes * scale / block_bytes)
    if left <= 0:
        raise RunError(f"no KV budget: cuda_graph_reserved_bytes ({reserved_bytes}) takes all {blocks} KV blocks")
    return left
