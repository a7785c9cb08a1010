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
"""

from __future__ import annotations

from servesim.errors import RunError
from servesim.perf.capacity import Capacity, Parallel

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
                  method: str) -> Capacity:
    """The KV pool of one rank with SGLang's static-fraction rule."""
    budget = gpu_memory * fraction - weights
    if budget <= 0.0:
        raise RunError(f"no KV budget: the weights ({int(weights)} bytes per GPU) fill SGLang's static share "
                       f"({fraction} of {gpu_memory} bytes); use more GPUs per worker, a larger "
                       "memory_fraction or capacity: {type: fixed, blocks: N}")
    tokens = int(budget // float(per_token))
    return Capacity(weights, 0.0, 0.0, 0.0, gpu_memory, budget, per_token, tokens, tokens // block_size,
                    f"{method}, sglang static fraction")
