"""Is decode at large batch × context under-costed by the AIConfigurator data? Three checks.

* **Splitwise shape** (Llama-2-70B on DGX-H100, static batches at 576 tokens of context): how
  much a decode step grows from batch 1 to 64, measured and in AIConfigurator (h100_sxm, vLLM
  data), next to what reading the batch's KV once more costs per GPU at 80 % of the H100's
  bandwidth. If the KV read were under-costed, the measured growth would track the KV bytes,
  which halve with each doubling of TP.
* **Decode attention against vLLM's own kernels** (LLMServingSim's per-layer profiles of vLLM
  0.19.0 on the RTX PRO 6000, Llama-3.1-8B TP1: one layer, cold cache between calls):
  AIConfigurator's per-layer decode attention on the same GPU ÷ the profile, by the layer's KV
  volume.
* **MoE routing**: AIConfigurator's vLLM fused-MoE rows at the Mixtral-8x7B shape on H100
  (hidden 4096, 8 experts of 14336, top-2, TP2), balanced vs the power-law routing servesim
  queries (α = 1.2), and the multinomial expectation of the busiest expert's load.
"""

from __future__ import annotations

import csv
import math
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

from servesim.studies.components import _aic_engine, model_folder

BATCHES = (1, 8, 16, 32, 64)


def splitwise_growth(perf_model: Path, systems: str | None = None) -> list[tuple[int, int, float, float, float]]:
    """(TP, batch, measured Δms, AIC Δms, KV-read ms per GPU) from batch 1 at prompt 512, 128 tokens."""
    times: dict[tuple[int, int], list[float]] = defaultdict(list)
    with perf_model.open() as f:
        for r in csv.DictReader(f):
            if (r["model"], r["hardware"], r["prompt_size"], r["token_size"]) == ("llama2-70b", "h100-80gb", "512", "128"):
                times[(int(r["tensor_parallel"]), int(r["batch_size"]))].append(float(r["token_time"]))
    kv_per_token = 80 * 2 * 8 * 128 * 2  # layers · K and V · KV heads · head dim · bf16 bytes
    ctx = 512 + 64
    out = []
    for tp in sorted({tp for tp, _ in times}):
        aic = _aic_engine(model_folder("Llama-2-70b-hf"), tp, systems)
        base_real, base_aic = statistics.mean(times[(tp, 1)]), aic.predict_decode_latency(1, ctx, 2)
        for b in BATCHES[1:]:
            kv_ms = (b - 1) * ctx * kv_per_token / tp / (0.8 * 3.35e12) * 1000
            out.append((tp, b, statistics.mean(times[(tp, b)]) - base_real,
                        aic.predict_decode_latency(b, ctx, 2) - base_aic, kv_ms))
    return out


def attention_ratios(profile: Path, systems: str | None = None) -> list[tuple[int, int, float, float]]:
    """(sequences, KV tokens each, KV MiB per layer, AIC ÷ profile) of pure decode attention."""
    from servesim.perf.models import resolve_model

    engine = _pro6000_engine(systems)
    names = [op[0] for op in engine.run_static_per_op(1, 1, 128, 2, 0, 1.0, 1.0, "static", 32)[1]]
    attention = [i for i, name in enumerate(names) if name.endswith("attention")]
    model = resolve_model("meta-llama/Meta-Llama-3.1-8B")
    per_token = 2 * model.num_kv_heads * model.head_dim * 2
    with (profile / "attention.csv").open() as f:
        measured = {(int(r["n_decode"]), int(r["kv_decode"])): float(r["time_us"])
                    for r in csv.DictReader(f) if r["prefill_chunk"] == "0"}
    out = []
    for n in (8, 32, 128, 256):
        for kv in (256, 1024, 4096):
            us = sum(op[1] for op in engine.evaluate_generation_ops(attention, n, kv)) * 1000 / model.num_layers
            out.append((n, kv, n * kv * per_token / 2**20, us / measured[(n, kv)]))
    return out


def _pro6000_engine(systems: str | None) -> Any:
    from servesim.perf import aic
    from servesim.perf.hardware import ready_systems_dir, systems_dir

    path, how = systems_dir(systems)
    ready_systems_dir(path, how, "rtx_pro_6000_server")
    key = aic.AicKey(model="meta-llama/Meta-Llama-3.1-8B", system="rtx_pro_6000_server",
                     backend="vllm", version="0.19.0", tp=1, pp=1, attention_dp=1, moe_tp=None, moe_ep=None,
                     block_size=16, systems_path=str(path))
    return aic.aic_engine(key)


def mixtral_moe(systems: str | None = None) -> list[tuple[int, float, float, float]]:
    """(tokens, balanced ms, power-law 1.2 ms, expected busiest-expert load ÷ mean) per MoE layer."""
    import pyarrow.parquet as pq  # noqa: PLC0415 - only this check reads a table directly

    from servesim.perf.hardware import ready_systems_dir, systems_dir

    path, how = systems_dir(systems)
    ready_systems_dir(path, how, "h100_sxm")
    shape = {"hidden_size": 4096, "inter_size": 14336, "num_experts": 8, "topk": 2, "moe_dtype": "bfloat16",
             "moe_tp_size": 2, "moe_ep_size": 1}
    rows = pq.read_table(path / "data" / "h100_sxm" / "moe" / "vllm" / "0.19.0" / "moe_perf.parquet",
                         columns=[*shape, "num_tokens", "distribution", "latency"],
                         filters=[(k, "=", v) for k, v in shape.items()]).to_pylist()
    latency = {(r["num_tokens"], r["distribution"]): r["latency"] for r in rows}
    return [(t, latency[(t, "balanced")], latency[(t, "power_law_1.2")], busiest_expert_load(t * 2, 8) / (t * 2 / 8))
            for t in (16, 64, 128, 256)]


def busiest_expert_load(pairs: int, experts: int) -> float:
    """Expected busiest-expert load when `pairs` token-expert pairs are routed uniformly over
    `experts`, taking the loads as independent binomials (close once each expert expects a few
    pairs)."""
    p = 1.0 / experts
    expected = 0.0
    for k in range(pairs):  # E[max] = Σ_k P(max > k) = Σ_k 1 − P(every load ≤ k)
        cdf = sum(math.comb(pairs, j) * p**j * (1 - p) ** (pairs - j) for j in range(k + 1))
        below = cdf ** experts  # loads treated as independent (close for 8 experts)
        if below > 1 - 1e-12:
            break
        expected += 1 - below
    return expected


def check(shared_data: Path, systems: str | None = None) -> tuple[list, list, list]:
    """The three checks on the data under `shared_data` (../shared/data); an absent source (or
    pyarrow, for the MoE rows) gives an empty list."""
    perf_model = shared_data / "splitwise-perf-model" / "perf_model.csv"
    profile = (shared_data / "llmservingsim-vllm-validation" / "profiler" / "perf" / "RTXPRO6000" / "meta-llama"
               / "Llama-3.1-8B" / "bf16" / "tp1")
    try:
        moe = mixtral_moe(systems)
    except ImportError:
        moe = []
    return (splitwise_growth(perf_model, systems) if perf_model.is_file() else [],
            attention_ratios(profile, systems) if profile.is_dir() else [], moe)


def render(growth: list, attention: list, moe: list) -> str:
    """Markdown tables of the checks that have data."""
    sections = []
    if growth:
        sections.append(["Splitwise decode step growth from batch 1 (Llama-2-70B, DGX-H100, context 576):", "",
                         "| TP | batch | measured Δ (ms) | AIConfigurator Δ (ms) | extra KV read per GPU (ms) |",
                         "|---:|---:|---:|---:|---:|"]
                        + [f"| {tp} | {b} | {real:+.1f} | {aic:+.1f} | {kv:.2f} |" for tp, b, real, aic, kv in growth])
    if attention:
        sections.append(["Decode attention per layer, AIConfigurator ÷ vLLM's own profile (RTX PRO 6000, "
                         "Llama-3.1-8B):", "", "| sequences | KV tokens each | KV per layer (MiB) | ratio |",
                         "|---:|---:|---:|---:|"]
                        + [f"| {n} | {kv} | {mib:,.0f} | {r:.2f} |" for n, kv, mib, r in attention])
    if moe:
        sections.append(["Mixtral-8x7B MoE layer on H100 (TP2, AIConfigurator's vLLM rows):", "",
                         "| tokens | balanced (ms) | power law 1.2, used (ms) | busiest expert ÷ mean, multinomial |",
                         "|---:|---:|---:|---:|"]
                        + [f"| {t} | {b:.3f} | {p:.3f} | {x:.2f} |" for t, b, p, x in moe])
    return "\n\n".join("\n".join(lines) for lines in sections) + "\n"
