"""Roofline efficiencies of a GPU, measured by vLLM's own per-layer profiles of it.

LLMServingSim's ``profiler/perf/<hw>/meta-llama/Llama-3.1-8B/bf16/tp1`` (vLLM 0.19.0, one layer,
eager) times each operation of a Llama-3.1-8B layer on the GPU. Against the GPU's datasheet
peaks (servesim's GPU constants) they give the three efficiencies of the roofline
(`servesim.perf.roofline`), each the median over a set of points:

* **memory** — weight bytes ÷ time ÷ peak bandwidth of the weight-streaming GEMMs (qkv, o,
  gate-up, down at 1, 2, 4 and 8 tokens; the LM head at 1, 2, 4 and 8 sequences);
* **gemm** — 2·M·N·K ÷ time ÷ dense BF16 peak of the same four GEMMs at 1,024–2,048 tokens;
* **attention** — causal FLOPs 4·H·d·(c·p + c²/2) ÷ time ÷ BF16 peak of prefill-only attention
  calls with a chunk c ≥ 1,024 tokens after p cached ones.

`servesim.perf.gpus.yaml` carries the results for the profiled GPUs (``efficiency:``), which the
roofline uses instead of its generic 0.7 / 0.5 / 0.8; `servesim validate --components` prints
both, and a test keeps them equal.

The same profiles time vLLM's decode attention (the paged FlashAttention-2 kernel) alone, for
1–256 sequences of 16–16,384 tokens. Once a layer's KV outgrows the GPU's L2 — as it does in
every real forward pass, where each layer's weights and KV stream through the cache in turn —
a call costs ``latency + bytes / (efficiency × bandwidth)``: `decode_attention_fit` fits the
two by least squares in relative error over those points (``decode_attention:`` in the table,
used by fused mode's roofline; docs/timing.md). Below the L2 size the profiles' repeated calls
find the KV cached and are no guide.
"""

from __future__ import annotations

import csv
import statistics
from collections import defaultdict
from pathlib import Path

PROFILED = {"rtx_4090": "RTX4090", "rtx_pro_6000_server": "RTXPRO6000"}
"""servesim's GPU names → LLMServingSim's hardware folders."""
MODEL = ("meta-llama/Meta-Llama-3.1-8B", "meta-llama/Llama-3.1-8B")
"""(servesim's model id, the profile folder) of the profiled model."""


def folder(perf: Path, gpu: str) -> Path:
    """The TP1 bf16 profile folder of `gpu` below ``profiler/perf``."""
    return perf / PROFILED[gpu] / MODEL[1] / "bf16" / "tp1"


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open() as f:
        return list(csv.DictReader(f))


def measured_efficiencies(perf: Path, gpu: str, systems: Path | None = None) -> dict[str, float]:
    """The three efficiencies of `gpu` (a key of `PROFILED`) from its profiles under `perf`."""
    from servesim.perf.hardware import resolve_gpu
    from servesim.perf.models import resolve_model

    spec, m = resolve_gpu(gpu, systems), resolve_model(MODEL[0])
    h, q, kv = m.hidden_size, m.num_heads * m.head_dim, m.num_kv_heads * m.head_dim
    shapes = {"qkv_proj": (q + 2 * kv, h), "o_proj": (h, q), "gate_up_proj": (2 * m.intermediate_size, h),
              "down_proj": (h, m.intermediate_size)}
    base = folder(perf, gpu)
    seconds: dict[str, dict[int, float]] = defaultdict(dict)
    for r in _rows(base / "dense.csv"):
        seconds[r["layer"]][int(r["tokens"])] = float(r["time_us"]) * 1e-6
    memory = [n * k * 2 / seconds[op][t] / spec.mem_bw for op, (n, k) in shapes.items() for t in (1, 2, 4, 8)]
    memory += [m.vocab_size * h * 2 / (float(r["time_us"]) * 1e-6) / spec.mem_bw
               for r in _rows(base / "per_sequence.csv") if r["layer"] == "lm_head" and int(r["sequences"]) in (1, 2, 4, 8)]
    gemm = [2 * t * n * k / s / spec.bf16_flops for op, (n, k) in shapes.items()
            for t, s in seconds[op].items() if t >= 1024]
    attention = []
    for r in _rows(base / "attention.csv"):
        chunk, cached = int(r["prefill_chunk"]), int(r["kv_prefill"])
        if int(r["n_decode"]) == 0 and chunk >= 1024:
            flops = 4.0 * q * (chunk * cached + chunk * chunk / 2)
            attention.append(flops / (float(r["time_us"]) * 1e-6) / spec.bf16_flops)
    return {"gemm": statistics.median(gemm), "attention": statistics.median(attention),
            "memory": statistics.median(memory)}


def decode_attention_points(perf: Path, gpu: str, l2_bytes: float) -> list[tuple[float, float]]:
    """(KV bytes, seconds) of the profiled decode-only attention calls of `gpu` whose layer KV
    exceeds `l2_bytes`."""
    from servesim.perf.models import resolve_model

    m = resolve_model(MODEL[0])
    token_bytes = 2 * m.num_kv_heads * m.head_dim * 2  # one layer, K and V, 16-bit
    points = []
    for r in _rows(folder(perf, gpu) / "attention.csv"):
        n, kv = int(r["n_decode"]), int(r["kv_decode"])
        if int(r["prefill_chunk"]) == 0 and int(r["kv_prefill"]) == 0 and n > 0 and n * kv * token_bytes > l2_bytes:
            points.append((float(n * kv * token_bytes), float(r["time_us"]) * 1e-6))
    return points


def decode_attention_fit(perf: Path, gpu: str, systems: Path | None = None) -> dict[str, float]:
    """`latency_us` and `efficiency` of ``seconds = launch + latency + bytes / (efficiency ×
    bandwidth)`` over the GPU's profiled decode attention beyond its L2 (the table's ``l2_mib``),
    least squares in relative error; the roofline's launch (3 µs) is its own term."""
    import numpy as np

    from servesim.perf.hardware import MIB, resolve_gpu
    from servesim.perf.roofline import RooflineParams

    spec = resolve_gpu(gpu, systems)
    points = decode_attention_points(perf, gpu, spec.decode_attention["l2_mib"] * MIB)
    nbytes = np.array([b for b, _ in points])
    seconds = np.array([t for _, t in points]) - RooflineParams().launch_us * 1e-6
    design = np.column_stack([np.ones_like(nbytes), nbytes / spec.mem_bw]) / seconds[:, None]
    (latency, inverse), *_ = np.linalg.lstsq(design, np.ones_like(seconds), rcond=None)
    return {"latency_us": float(latency) * 1e6, "efficiency": 1.0 / float(inverse)}


_PER_LAYER = ("qkv_proj", "o_proj", "gate_up_proj", "down_proj", "act_fn", "rotary_emb", "layernorm", "layernorm")
_ONCE = ("final_layernorm", "embedding")


def profiled_prefill_ms(perf: Path, gpu: str, chunk: int) -> float:
    """A pass over one `chunk`-token prompt as the profiles time it: every layer's operations
    (two norms) and its attention, the final norm and the embedding, and the LM head and sampler
    of one row."""
    from servesim.perf.models import resolve_model

    base = folder(perf, gpu)
    dense = {(r["layer"], int(r["tokens"])): float(r["time_us"]) for r in _rows(base / "dense.csv")}
    once = {(r["layer"], int(r["sequences"])): float(r["time_us"]) for r in _rows(base / "per_sequence.csv")}
    attention = next(float(r["time_us"]) for r in _rows(base / "attention.csv")
                     if (int(r["prefill_chunk"]), int(r["kv_prefill"]), int(r["n_decode"])) == (chunk, 0, 0))
    layer = sum(dense[(op, chunk)] for op in _PER_LAYER) + attention
    total = resolve_model(MODEL[0]).num_layers * layer + sum(dense[(op, chunk)] for op in _ONCE)
    return (total + once[("lm_head", 1)] + once[("sampler", 1)]) / 1000


def check(perf: Path, systems: str | None = None) -> list[tuple[str, dict[str, float], dict[str, float]]]:
    """(GPU, measured, servesim's table) for every profiled GPU whose profiles are under `perf`
    (`systems`: the AIConfigurator systems directory, None for the default one): the three
    efficiencies, then the decode attention's latency_us and efficiency as ``decode_latency_us``
    and ``decode_efficiency``."""
    from servesim.perf.hardware import resolve_gpu, systems_dir

    path = systems_dir(systems)[0]
    rows = []
    for gpu in PROFILED:
        if not folder(perf, gpu).is_dir():
            continue
        spec = resolve_gpu(gpu, path)
        fit = decode_attention_fit(perf, gpu, path)
        measured = {**measured_efficiencies(perf, gpu, path),
                    "decode_latency_us": fit["latency_us"], "decode_efficiency": fit["efficiency"]}
        table = {**spec.efficiency, "decode_latency_us": spec.decode_attention["latency_us"],
                 "decode_efficiency": spec.decode_attention["efficiency"]}
        rows.append((gpu, measured, table))
    return rows


def render(rows: list[tuple[str, dict[str, float], dict[str, float]]]) -> str:
    """A Markdown table: measured efficiencies and the ones servesim's GPU table carries."""
    lines = ["Roofline efficiencies from vLLM's per-layer profiles (measured / servesim's GPU table; "
             "generic defaults 0.7 / 0.5 / 0.8), and vLLM's decode attention beyond the L2 "
             "(latency per layer call, KV-read efficiency; fused mode):", "",
             "| GPU | GEMM | attention | memory | decode attention latency (µs) | decode attention KV-read efficiency |",
             "|---|---:|---:|---:|---:|---:|"]
    for gpu, measured, table in rows:
        cells = [f"{measured[k]:.3f} / {table.get(k, float('nan')):.2f}" for k in ("gemm", "attention", "memory")]
        cells.append(f"{measured['decode_latency_us']:.1f} / {table['decode_latency_us']:.0f}")
        cells.append(f"{measured['decode_efficiency']:.3f} / {table['decode_efficiency']:.2f}")
        lines.append(f"| {gpu} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
