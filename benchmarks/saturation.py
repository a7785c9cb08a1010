#!/usr/bin/env python3
"""A synthetic stand-in for the held-out H100 runs: does `sum` or `fused` saturate?

Llama-2-7B (TP1), CodeLlama-34B (TP2) and Llama-2-70B (TP4) on h100_sxm with vLLM, 128
sequences per rank, ~600-token prompts of which 512 tokens are a shared prefix (one Mooncake
block) and 250 output tokens, sent at a constant 5-20 req/s for 60 s. Llama-2 and CodeLlama are
not among AIConfigurator's bundled models: their public HF geometry is written to a temporary
folder (AIConfigurator times it as a LLAMA-family model). A server keeps up when its TTFT does
not grow from the first half of the run to the second.

    python3 benchmarks/saturation.py [--aic-systems-path DIR]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from servesim.studies.components import model_folder  # noqa: E402
from servesim.studies.validate import simulated_latencies  # noqa: E402

MODELS = [("Llama-2-7B", "Llama-2-7b-hf", 1), ("CodeLlama-34B", "CodeLlama-34b-hf", 2), ("Llama-2-70B", "Llama-2-70b-hf", 4)]
RATES = (5, 10, 15, 20)


def trace(folder: Path, rate: float, seconds: float = 60.0) -> str:
    path = folder / f"prefix-shared-{rate:g}.jsonl"
    with path.open("w") as f:
        for i in range(int(rate * seconds)):
            f.write(json.dumps({"timestamp": round(i * 1000 / rate, 3), "input_length": 600, "output_length": 250,
                                "hash_ids": [0, 1 + i]}) + "\n")
    return str(path)


def config(model: str, tp: int, path: str, mode: str, systems: str | None) -> dict:
    engine = {"model": model, "hardware": "h100_sxm", "backend": "vllm",
              "workers": {"aggregated": {"parallelism": {"tensor": tp},
                                         "scheduler": {"max_batched_tokens": 8192, "max_sequences": 128},
                                         "kv_cache": {"block_size": 16},
                                         "timing": {"type": "default", "mixed_pass": mode}}}}
    if systems:
        engine["aic_systems_path"] = systems
    return {"engine": engine, "traffic": {"source": {"type": "trace", "format": "mooncake", "paths": [path]},
                                          "load": {"type": "trace_timestamps"}}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--aic-systems-path", default=None)
    args = parser.parse_args()
    print("| model | req/s | mode | TTFT mean | TTFT 1st half → 2nd half | TPOT mean | E2E mean | keeps up |")
    print("|---|---:|---|---:|---:|---:|---:|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for name, hf, tp in MODELS:
            for rate in RATES:
                path = trace(Path(tmp), rate)
                for mode in ("sum", "fused"):
                    lat = simulated_latencies(config(model_folder(hf), tp, path, mode, args.aic_systems_path))
                    ttft = lat["ttft"]
                    half = len(ttft) // 2
                    first, second = float(np.mean(ttft[:half])), float(np.mean(ttft[half:]))
                    ok = "yes" if second < 1.5 * first + 50 else "NO"
                    print(f"| {name} TP{tp} | {rate} | {mode} | {np.mean(ttft):,.1f} | {first:,.1f} → {second:,.1f} | "
                          f"{np.nanmean(lat['tpot']):.2f} | {np.mean(lat['e2e']):,.0f} | {ok} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
