"""Record AISimulate 0.13's KV block counts for byte-sized capacity keys (issue 34).

Runs the upstream 0.13 build (``../shared/reference/install-dynamo.sh``) as a black box:
``aisimulate predict --detail memory`` on small configs with default capacity and a
``cuda_graph_reserved_bytes`` reservation, and reads its ``estimated_num_gpu_blocks``; then
fixed-capacity configs given in ``bytes`` next to the equivalent ``blocks``, whose reports must
agree. Writes ``tests/cases/upstream013/capacity.json`` (and the two reports). Not run by tests.

    python benchmarks/record_013_capacity.py
"""

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
REF = ROOT.parent / "shared" / "reference"
OUT = ROOT / "tests" / "cases" / "upstream013"

TRACE = [{"timestamp": 0, "input_length": 300, "output_length": 4, "hash_ids": [1]}]

# (model, hardware, backend, tensor, memory_fraction, reserved bytes, max_batched_tokens)
MATRIX = [
    ("Qwen/Qwen3-8B", "h200_sxm", "vllm", 1, None, 0, None),
    ("Qwen/Qwen3-8B", "h200_sxm", "vllm", 1, None, 2 << 30, None),
    ("Qwen/Qwen3-8B", "h200_sxm", "vllm", 1, 0.5, 7_000_000_001, 4096),
    ("Qwen/Qwen3-8B", "h100_sxm", "sglang", 2, None, 0, None),
    ("Qwen/Qwen3-8B", "h100_sxm", "sglang", 2, None, 1 << 30, None),
    ("Qwen/Qwen3-8B", "h100_sxm", "sglang", 1, 0.8, 0, None),
    ("Qwen/Qwen3-8B", "h100_sxm", "sglang", 1, 0.8, 3_000_000_000, None),
    ("Qwen/Qwen3-32B-FP8", "h200_sxm", "trtllm", 1, None, 0, None),
    ("Qwen/Qwen3-32B-FP8", "h200_sxm", "trtllm", 1, None, 4 << 30, None),
    ("Qwen/Qwen3-32B-FP8", "h200_sxm", "trtllm", 2, 0.7, 1_500_000_000, 2048),
    ("meta-llama/Meta-Llama-3.1-8B", "h100_sxm", "trtllm", 1, None, 10_000_000_000, None),
]


def venv() -> Path:
    return Path(subprocess.run([str(REF / "install-dynamo.sh")], check=True, capture_output=True,
                               text=True).stdout.strip())


def predict(config: dict, work: Path, *args: str) -> subprocess.CompletedProcess:
    if not (work / "trace.jsonl").exists():
        (work / "trace.jsonl").write_text("".join(json.dumps(r) + "\n" for r in TRACE))
    (work / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    return subprocess.run([str(venv() / "bin" / "aisimulate"), "predict", "-c", "config.yaml", "--overwrite",
                           "--format", "json", "--output-dir", "out", *args],
                          cwd=work, capture_output=True, text=True)


def default_config(model, hardware, backend, tensor, fraction, reserved, mbt) -> dict:
    capacity = {"type": "default", "cuda_graph_reserved_bytes": reserved}
    if fraction is not None:
        capacity["memory_fraction"] = fraction
    worker = {"parallelism": {"tensor": tensor}, "kv_cache": {"capacity": capacity}}
    if mbt is not None:
        worker["scheduler"] = {"max_batched_tokens": mbt}
    return {"engine": {"model": model, "hardware": hardware, "backend": backend,
                       "workers": {"aggregated": worker}},
            "traffic": {"source": {"type": "trace", "paths": ["trace.jsonl"], "format": "mooncake",
                                   "block_size": 512},
                        "load": {"type": "trace_timestamps"}}}


CASE02 = ROOT / "tests" / "cases" / "engine" / "02-vllm-preemption"


def fixed_config(capacity: dict, **cache) -> dict:
    """Case engine/02 (vLLM preemption under a tiny pool) with another capacity."""
    config = yaml.safe_load((CASE02 / "config.yaml").read_text())
    kv_cache = config["engine"]["workers"]["aggregated"]["kv_cache"]
    kv_cache.update(cache, capacity=capacity)
    for key in [key for key, value in kv_cache.items() if value is None]:
        del kv_cache[key]  # None = the key left out
    return config


# Byte-sized pools next to the block pools they must equal (and the next larger one, which must differ).
PAIRS = {
    "bytes-9-blocks": (fixed_config({"type": "fixed", "bytes": 159_999}, bytes_per_token=1000),
                       fixed_config({"type": "fixed", "blocks": 9}),
                       fixed_config({"type": "fixed", "blocks": 10})),
}

# Configs 0.13 refuses (exit 2) or accepts (exit 0), keyed by what they test.
VERDICTS = {
    "blocks-and-bytes": fixed_config({"type": "fixed", "blocks": 9, "bytes": 160_000}, bytes_per_token=1000),
    "bytes-without-bytes-per-token": fixed_config({"type": "fixed", "bytes": 160_000}),
    "bytes-without-block-size": fixed_config({"type": "fixed", "bytes": 160_000}, bytes_per_token=1000,
                                             block_size=None),
    "bytes-below-one-block": fixed_config({"type": "fixed", "bytes": 15_999}, bytes_per_token=1000),
    "bytes-zero": fixed_config({"type": "fixed", "bytes": 0}, bytes_per_token=1000),
    "bytes-over-u64": fixed_config({"type": "fixed", "bytes": 1 << 64}, bytes_per_token=1000),
    "bytes-float": fixed_config({"type": "fixed", "bytes": 160000.0}, bytes_per_token=1000),
    "bytes-per-token-zero": fixed_config({"type": "fixed", "blocks": 9}, bytes_per_token=0),
    "bytes-per-token-float": fixed_config({"type": "fixed", "blocks": 9}, bytes_per_token=1.5),
    "bytes-per-token-with-blocks": fixed_config({"type": "fixed", "blocks": 9}, bytes_per_token=1000),
    "bytes-per-token-auto": fixed_config({"type": "fixed", "blocks": 9}, bytes_per_token="auto"),
    "block-bytes-over-u64": fixed_config({"type": "fixed", "bytes": 1 << 63}, bytes_per_token=1 << 62),
    "default-with-bytes": fixed_config({"type": "default", "bytes": 160_000}, bytes_per_token=1000),
    "fixed-with-reserved": fixed_config({"type": "fixed", "blocks": 9, "cuda_graph_reserved_bytes": 1}),
    "fixed-with-reserved-zero": fixed_config({"type": "fixed", "blocks": 9, "cuda_graph_reserved_bytes": 0}),
    "reserved-over-2-53": default_config("Qwen/Qwen3-8B", "h200_sxm", "vllm", 1, None, (1 << 53) + 1, None),
    "reserved-negative": default_config("Qwen/Qwen3-8B", "h200_sxm", "vllm", 1, None, -1, None),
    "reserved-float": default_config("Qwen/Qwen3-8B", "h200_sxm", "vllm", 1, None, 1.0, None),
}


def record_pairs() -> dict:
    pairs = {}
    for name, configs in PAIRS.items():
        reports = []
        for config in configs:
            with tempfile.TemporaryDirectory() as tmp:
                work = Path(tmp)
                (work / "trace.jsonl").write_text((CASE02 / "trace.jsonl").read_text())
                (work / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
                done = subprocess.run([str(venv() / "bin" / "aisimulate"), "predict", "-c", "config.yaml",
                                       "--overwrite", "--capture-per-request", "--format", "json",
                                       "--output-dir", "out"], cwd=work, capture_output=True, text=True)
                assert done.returncode == 0, done.stderr
                report = json.loads((work / "out" / "prediction.json").read_text())
            for key in ("wall_time_ms", "processed_tokens_per_s", "processed_output_tokens_per_s"):
                report.pop(key, None)
            for record in report.get("per_request", []):
                record.pop("uuid", None)
            # records tied on arrival are ordered by their random uuid: match by session and turn
            report["per_request"] = sorted(report.get("per_request", []),
                                           key=lambda r: (r["session_id"], r.get("turn_index", 0)))
            reports.append(report)
        pairs[name] = {"configs": [c["engine"]["workers"]["aggregated"]["kv_cache"] for c in configs],
                       "same_as_first": [reports[0] == r for r in reports]}
        print(name, pairs[name]["same_as_first"], file=sys.stderr)
    return pairs


def record_verdicts() -> dict:
    verdicts = {}
    for name, config in VERDICTS.items():
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            (work / "trace.jsonl").write_text((CASE02 / "trace.jsonl").read_text())
            done = predict(config, work)
        lines = [line.strip() for line in done.stderr.splitlines()
                 if line.strip() and "errors.pydantic.dev" not in line]
        verdicts[name] = {"config": config, "exit_code": done.returncode,
                          "stderr_tail": lines[-3:] if done.returncode else []}
        print(name, done.returncode, lines[-1:] if done.returncode else "", file=sys.stderr)
    return verdicts


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "capacity-verdicts.json").write_text(json.dumps({
        "producer": "aisimulate==0.13.0.dev202610270000000085 predict (benchmarks/record_013_capacity.py)",
        "pairs": record_pairs(), "verdicts": record_verdicts()}, indent=1) + "\n")
    if "--verdicts-only" in sys.argv:
        return 0
    rows = []
    for entry in MATRIX:
        with tempfile.TemporaryDirectory() as tmp:
            config = default_config(*entry)
            done = predict(config, Path(tmp), "--detail", "memory")
            if done.returncode:
                print(done.stderr, file=sys.stderr)
                return 1
            memory = json.loads(done.stdout)["details"]["sections"]["memory"]["roles"]["aggregated"]
        rows.append({"config": config["engine"], "estimated_num_gpu_blocks": memory["estimated_num_gpu_blocks"],
                     "memory_breakdown": memory["memory_breakdown"]})
        print(entry, memory["estimated_num_gpu_blocks"], file=sys.stderr)
    (OUT / "capacity.json").write_text(json.dumps({
        "producer": "aisimulate==0.13.0.dev202610270000000085 predict --detail memory "
                    "(benchmarks/record_013_capacity.py)",
        "cases": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
