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
    (`systems`: the AIConfigurator systems directory, None for the default one)."""
    from servesim.perf.hardware import resolve_gpu, systems_dir

    path = systems_dir(systems)[0]
    return [(gpu, measured_efficiencies(perf, gpu, path), resolve_gpu(gpu, path).efficiency)
            for gpu in PROFILED if folder(perf, gpu).is_dir()]


def render(rows: list[tuple[str, dict[str, float], dict[str, float]]]) -> str:
    """A Markdown table: measured efficiencies and the ones servesim's GPU table carries."""
    lines = ["Roofline efficiencies from vLLM's per-layer profiles (measured / servesim's GPU table; "
             "generic defaults 0.7 / 0.5 / 0.8):", "",
             "| GPU | GEMM | attention | memory |", "|---|---:|---:|---:|"]
    for gpu, measured, table in rows:
        cells = [f"{measured[k]:.3f} / {table.get(k, float('nan')):.2f}" for k in ("gemm", "attention", "memory")]
        lines.append(f"| {gpu} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
