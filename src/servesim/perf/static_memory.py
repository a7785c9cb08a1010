"""SGLang's KV pool as SGLang sizes it (servesim's defaults; not under ``compat: reference``).

SGLang's ``mem_fraction_static`` is the share of GPU memory for the *static* allocations: the
model weights and the KV pool. Activations, CUDA graphs and the NCCL buffers live in the rest
(``1 − mem_fraction_static``). The database's memory model (and the reference) subtract them
from the static share as vLLM's ``gpu_memory_utilization`` would, which finds no room at all
where SGLang ran: DeepSeek-R1 FP8 at TP4 on B200 with 0.95 (166 GiB of weights per GPU).
servesim's defaults therefore size an SGLang pool as::

    blocks = floor((capacity × memory_fraction − weights) / kv_bytes_per_token) // block_size

with the weights and KV bytes per token of the database's model build when it has one (MLA's
compressed KV, FP8 weights), else servesim's formula.

Upstream AISimulate 0.13 (``compat: upstream-0.13``) applies the static fraction to the memory
left once the runtime and NCCL reserves are set aside (SGLang measures free memory after its
CUDA / distributed setup, before loading the weights), leaves the activations out, and takes the
CUDA-graph reservation off the result::

    budget = (capacity − others − nccl) × memory_fraction − weights − cuda_graph_reserved_bytes

For DeepSeek-V3-style checkpoints (``DeepseekV3ForCausalLM``, one pipeline stage) 0.13 also
counts the weights SGLang keeps resident rather than the timing graph's: the embedding sharded
over tp, the first ``first_k_dense_replace`` layers as dense MLPs (``sglang_deepseek_weights``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from servesim.errors import RunError
from servesim.perf.capacity import Capacity, Parallel
from servesim.perf.models import ModelSpec

_NO_LIMIT = 1 << 50
"""A memory size no model fills: the database's breakdown without a budget check."""


def aic_breakdown(aic_model: str, system: str, version: str, par: Parallel, *, max_batched_tokens: int,
                  max_sequences: int, systems_path: str | None) -> tuple[float, int]:
    """(weights bytes per rank, KV bytes per token) of the database's build of a model."""
    from aiconfigurator_core.sdk.memory import estimate_kv_cache  # lazy: imports pandas

    moe = par.moe_tp * par.moe_ep > 1
    estimate = estimate_kv_cache(
        aic_model, system, "sglang", backend_version=version, max_num_tokens=max_batched_tokens,
        max_batch_size=max_sequences, memory_fraction_kind="of_total", memory_fraction_value=1.0,
        tp_size=par.tp, pp_size=par.pp, attention_dp_size=par.attention_dp,
        moe_tp_size=par.moe_tp if moe else None, moe_ep_size=par.moe_ep if moe else None,
        systems_path=systems_path, gpu_memory_capacity_bytes_override=_NO_LIMIT)
    weights = float(estimate["memory_breakdown"]["weights_bytes"])
    return weights, int(estimate["kv_size_per_token_bytes"])


def static_blocks(gpu_memory: int, weights: float, per_token: int, fraction: float, block_size: int,
                  method: str, reserved_bytes: int = 0) -> Capacity:
    """The KV pool of one rank with SGLang's static-fraction rule, less `reserved_bytes` (the
    CUDA-graph reservation, taken once, not scaled by the fraction)."""
    budget = gpu_memory * fraction - weights - reserved_bytes
    if budget <= 0.0:
        raise RunError(f"no KV budget: the weights ({int(weights)} bytes per GPU) and cuda_graph_reserved_bytes "
                       f"({reserved_bytes}) fill SGLang's static share "
                       f"({fraction} of {gpu_memory} bytes); use more GPUs per worker, a larger "
                       "memory_fraction or capacity: {type: fixed, blocks: N}")
    tokens = int(budget // float(per_token))
    return Capacity(weights, 0.0, 0.0, 0.0, gpu_memory, budget, per_token, tokens, tokens // block_size,
                    f"{method}, sglang static fraction")


@dataclass(frozen=True)
class StaticMemory:
    """What one rank holds outside its KV pool, in bytes, and how a KV budget becomes tokens."""

    weights: float
    others: float
    nccl: float
    per_token: float
    tokens_from: Callable[[float], int] | None = None
    """The model's budget → tokens inverse where the KV does not grow linearly (None: linear)."""


def aic_static_memory(aic_model: str, system: str, version: str, par: Parallel, *, max_batched_tokens: int,
                      max_sequences: int, systems_path: str | None) -> StaticMemory:
    """The database's non-KV breakdown of one SGLang rank (its model build's weights and reserves)."""
    from aiconfigurator_core.sdk.memory import KVCacheEstimator  # lazy: imports pandas

    moe = par.moe_tp * par.moe_ep > 1
    built = KVCacheEstimator.from_request(
        aic_model, system, "sglang", version, max_num_tokens=max_batched_tokens, max_batch_size=max_sequences,
        tp_size=par.tp, pp_size=par.pp, attention_dp_size=par.attention_dp,
        moe_tp_size=par.moe_tp if moe else None, moe_ep_size=par.moe_ep if moe else None,
        systems_path=systems_path).breakdown
    return StaticMemory(float(built["weights_bytes"]), float(built["runtime_overhead_bytes"]),
                        float(built["comm_overhead_bytes"]), float(built["kv_size_per_token_bytes"]),
                        built.get("tokens_from_kv_bytes"))


def _moe_layers(model: ModelSpec) -> int:
    """Layers with an MoE block: after ``first_k_dense_replace``, every ``moe_layer_freq``-th."""
    config = model.config
    first_dense = int(config.get("first_k_dense_replace") or 0)
    freq = config.get("moe_layer_freq", 1)
    if isinstance(freq, (list, tuple)):
        return sum(1 for is_moe in freq if is_moe)
    freq = int(freq or 1)
    return sum(1 for layer in range(first_dense, model.num_layers) if layer % freq == 0)


def _shared_experts_excluded(config: dict) -> bool:
    """Whether the checkpoint's quantization config keeps the shared experts in 16 bits."""
    quant = config.get("quantization_config") or {}
    hf_quant = (config.get("hf_quant_config") or {}).get("quantization") or {}
    patterns = [*(quant.get("modules_to_not_convert") or []), *(quant.get("exclude_modules") or []),
                *(quant.get("ignore") or []), *(hf_quant.get("exclude_modules") or []),
                *(hf_quant.get("ignore") or [])]
    return any("shared_expert" in str(pattern).lower() for pattern in patterns)


def sglang_deepseek_weights(weights: float, model: ModelSpec, par: Parallel) -> float:
    """The weights SGLang keeps resident for a DeepSeek-V3-style rank, from the database's timing-graph
    count `weights` (every layer MoE, the embedding whole): upstream 0.13's correction."""
    h, tp, width = model.hidden_size, par.tp, model.weight_bytes
    experts = model.num_experts
    shared_width = 2.0 if _shared_experts_excluded(model.config) else width
    routed = 3 * h * model.moe_intermediate_size * experts * width / (par.moe_tp * par.moe_ep)
    shared = 3 * h * model.moe_intermediate_size * shared_width / tp
    router = 2 * h * experts
    dense = 3 * h * model.intermediate_size * width / tp
    embedding = 2 * model.vocab_size * h
    moe_layers = _moe_layers(model)
    n_shared = int(model.config.get("n_shared_experts") or model.config.get("num_shared_experts") or 0)
    weights -= embedding * (1 - 1 / tp)
    weights -= model.num_layers * (routed + shared + router)
    weights += moe_layers * (routed + n_shared * shared + router)
    weights += (model.num_layers - moe_layers) * dense
    return weights


def corrects_deepseek(model: ModelSpec, par: Parallel) -> bool:
    """Whether 0.13 counts SGLang's resident DeepSeek-V3 weights for this rank (`sglang_deepseek_weights`;
    its analytical capacity path builds the model without speculative layers, so MTP does not matter)."""
    return model.architecture == "DeepseekV3ForCausalLM" and model.is_moe and par.pp == 1


def upstream013_blocks(gpu_memory: int, memory: StaticMemory, fraction: float, block_size: int, graphs: int,
                       method: str) -> Capacity:
    """The KV pool of one SGLang rank as upstream 0.13 sizes it (see the module docstring)."""
    reserves = memory.others + memory.nccl
    # 0.13's evaluation order: the reserves enter the non-KV sum, then leave it with the capacity.
    non_kv = memory.weights + memory.others + memory.nccl + 0.0 - reserves + float(graphs)
    budget = (float(gpu_memory) - reserves) * fraction - non_kv
    if budget <= 0.0:
        raise RunError(f"no KV budget: non-KV memory ({int(max(non_kv, 0.0))} bytes) meets/exceeds the "
                       f"KV-cache memory limit (capacity={gpu_memory} bytes); use more GPUs per worker, "
                       "a larger memory_fraction or capacity: {type: fixed, blocks: N}")
    if memory.tokens_from is not None:
        tokens = int(memory.tokens_from(budget))
    else:
        tokens = int(budget // memory.per_token)
    return Capacity(memory.weights, 0.0, memory.others, memory.nccl, gpu_memory, budget, int(memory.per_token),
                    tokens, tokens // block_size, f"{method}, upstream 0.13 sglang static fraction")
