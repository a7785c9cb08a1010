"""Record AISimulate 0.13's default KV pool per rank (issue 34; `compat: upstream-0.13`).

Runs the upstream 0.13 build (``../shared/reference/install-dynamo.sh``) as a black box:
``aisimulate predict --detail memory`` on one-request configs with ``capacity: default`` — SGLang
on dense, MoE and MLA models, several GPUs, tensor sizes, memory fractions and CUDA-graph
reservations, and vLLM and TensorRT-LLM on the same models — and reads its
``estimated_num_gpu_blocks`` and ``memory_breakdown`` (or, where 0.13 finds no KV budget, its
error line). Writes
``tests/cases/upstream013/pool.json`` for ``tests/upstream013/test_pool.py`` (which never runs
the reference).

    python benchmarks/record_013_pool.py
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
REF = ROOT.parent / "shared" / "reference"
OUT = ROOT / "tests" / "cases" / "upstream013" / "pool.json"
TRACE = [{"timestamp": 0, "input_length": 300, "output_length": 4, "hash_ids": [1]}]

# (model, hardware, backend, parallelism, capacity extras, other worker keys)
MATRIX: list[tuple[str, str, str, dict[str, int], dict[str, Any], dict[str, Any]]] = [
    ("Qwen/Qwen3-8B", "h200_sxm", "sglang", {"tensor": 1}, {}, {}),
    ("Qwen/Qwen3-8B", "h200_sxm", "sglang", {"tensor": 1}, {"memory_fraction": 0.7},
     {"scheduler": {"max_batched_tokens": 4096}}),
    ("Qwen/Qwen3-8B", "h100_sxm", "sglang", {"tensor": 2}, {"cuda_graph_reserved_bytes": 1 << 30}, {}),
    ("Qwen/Qwen3-32B", "h200_sxm", "sglang", {"tensor": 2}, {"memory_fraction": 0.85}, {}),
    ("Qwen/Qwen3-32B", "b200_sxm", "sglang", {"tensor": 4}, {}, {}),
    ("meta-llama/Meta-Llama-3.1-8B", "h100_sxm", "sglang", {"tensor": 1}, {"memory_fraction": 0.9}, {}),
    ("Qwen/Qwen3-32B-FP8", "h200_sxm", "sglang", {"tensor": 1}, {}, {}),
    ("Qwen/Qwen3-30B-A3B", "h200_sxm", "sglang", {"tensor": 2, "moe_expert": 2}, {}, {}),
    ("Qwen/Qwen3-30B-A3B", "h100_sxm", "sglang", {"tensor": 4, "moe_tensor": 4},
     {"cuda_graph_reserved_bytes": 3_000_000_000}, {}),
    ("deepseek-ai/DeepSeek-V3", "h200_sxm", "sglang", {"tensor": 8, "moe_expert": 8}, {}, {}),
    ("deepseek-ai/DeepSeek-R1", "h200_sxm", "sglang", {"tensor": 8, "moe_tensor": 8}, {"memory_fraction": 0.92}, {}),
    ("deepseek-ai/DeepSeek-V3", "b200_sxm", "sglang", {"tensor": 4, "moe_expert": 4},
     {"cuda_graph_reserved_bytes": 2 << 30}, {}),
    ("deepseek-ai/DeepSeek-V3", "h200_sxm", "sglang", {"tensor": 8, "pipeline": 2, "moe_expert": 8}, {}, {}),
    ("Qwen/Qwen3-235B-A22B", "h200_sxm", "sglang", {"tensor": 8, "moe_expert": 8}, {"memory_fraction": 0.9}, {}),
    ("openai/gpt-oss-120b", "h200_sxm", "sglang", {"tensor": 1}, {}, {}),
    ("openai/gpt-oss-20b", "h100_sxm", "sglang", {"tensor": 2, "moe_expert": 2}, {"memory_fraction": 0.8}, {}),
    ("Qwen/Qwen3-30B-A3B", "h200_sxm", "vllm", {"tensor": 2, "moe_expert": 2}, {}, {}),
    ("Qwen/Qwen3-32B", "b200_sxm", "vllm", {"tensor": 4}, {"memory_fraction": 0.8}, {}),
    ("deepseek-ai/DeepSeek-V3", "h200_sxm", "vllm", {"tensor": 8, "moe_expert": 8}, {}, {}),
    ("Qwen/Qwen3-30B-A3B", "h200_sxm", "trtllm", {"tensor": 2, "moe_expert": 2}, {}, {}),
    ("Qwen/Qwen3-8B", "b200_sxm", "trtllm", {"tensor": 2}, {"memory_fraction": 0.8}, {}),
    ("deepseek-ai/DeepSeek-V3", "h200_sxm", "trtllm", {"tensor": 8, "moe_expert": 8}, {}, {}),
]


def venv() -> Path:
    return Path(subprocess.run([str(REF / "install-dynamo.sh"), "--check"], check=True, capture_output=True,
                               text=True).stdout.strip())


def config_for(model: str, hardware: str, backend: str, parallelism: dict[str, int], capacity: dict[str, Any],
               keys: dict[str, Any]) -> dict[str, Any]:
    """A one-request aggregated config with `capacity: default` (and the given extras)."""
    worker: dict[str, Any] = {"parallelism": parallelism, "kv_cache": {"capacity": {"type": "default", **capacity}},
                              **keys}
    return {"engine": {"model": model, "hardware": hardware, "backend": backend, "workers": {"aggregated": worker}},
            "traffic": {"source": {"type": "trace", "paths": ["trace.jsonl"], "format": "mooncake", "block_size": 512},
                        "load": {"type": "trace_timestamps"}}}


def memory_detail(bin_dir: Path, config: dict[str, Any]) -> dict[str, Any]:
    """0.13's memory detail of the aggregated role, or {'error': last stderr line}."""
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "trace.jsonl").write_text("".join(json.dumps(r) + "\n" for r in TRACE))
        (work / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
        done = subprocess.run([str(bin_dir / "aisimulate"), "predict", "-c", "config.yaml", "--overwrite",
                               "--format", "json", "--output-dir", "out", "--detail", "memory"],
                              cwd=work, capture_output=True, text=True)
    if done.returncode:
        lines = [line.strip() for line in done.stderr.splitlines() if line.strip()]
        failed = [line for line in lines if "rror:" in line] or lines
        return {"error": failed[-1] if failed else f"exit {done.returncode}"}
    memory = json.loads(done.stdout)["details"]["sections"]["memory"]["roles"]["aggregated"]
    return {"estimated_num_gpu_blocks": memory["estimated_num_gpu_blocks"],
            "memory_breakdown": memory.get("memory_breakdown")}


def main() -> int:
    bin_dir = venv() / "bin"
    rows = []
    for entry in MATRIX:
        config = config_for(*entry)
        found = memory_detail(bin_dir, config)
        rows.append({"config": config["engine"], **found})
        print(entry[:4], found.get("estimated_num_gpu_blocks", found.get("error")), file=sys.stderr, flush=True)
    OUT.write_text(json.dumps({
        "producer": "aisimulate==0.13.0.dev202610270000000085 predict --detail memory "
                    "(benchmarks/record_013_pool.py)", "cases": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
