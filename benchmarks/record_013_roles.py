"""Record AISimulate 0.13's KV block counts per role when disaggregated roles name their own
hardware (`workers.prefill.hardware`, `workers.decode.hardware`, issue 34).

Runs the upstream 0.13 build (``../shared/reference/install-dynamo.sh``) as a black box:
``aisimulate predict --detail memory`` on one-request disaggregated configs, reading each role's
``estimated_num_gpu_blocks``, and records which per-role hardware configs 0.13 refuses. Writes
``tests/cases/upstream013/roles.json`` for ``tests/upstream013/test_role_hardware.py``. Not run
by tests.

    python benchmarks/record_013_roles.py
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
OUT = ROOT / "tests" / "cases" / "upstream013" / "roles.json"
TRACE = [{"timestamp": 0, "input_length": 300, "output_length": 4, "hash_ids": [1]}]

# (model, engine hardware, backend, prefill hardware, decode hardware, prefill tensor)
MATRIX = [
    ("Qwen/Qwen3-8B", "h200_sxm", "vllm", "h100_sxm", None, 1),
    ("Qwen/Qwen3-8B", "h100_sxm", "vllm", None, "h200_sxm", 1),
    ("Qwen/Qwen3-8B", "h200_sxm", "vllm", "h100_sxm", "h100_sxm", 2),
    ("Qwen/Qwen3-8B", "h100_sxm", "sglang", "h200_sxm", None, 1),
]


def config(model: str, hardware: str, backend: str, prefill: str | None, decode: str | None,
           tensor: int, mode: str = "disaggregated") -> dict[str, Any]:
    roles: dict[str, dict[str, Any]] = {"prefill": {"parallelism": {"tensor": tensor}}, "decode": {}}
    for role, hw in (("prefill", prefill), ("decode", decode)):
        if hw is not None:
            roles[role]["hardware"] = hw
    workers: dict[str, Any] = roles if mode == "disaggregated" else {"aggregated": {"hardware": prefill}}
    return {"engine": {"mode": mode, "model": model, "hardware": hardware, "backend": backend, "workers": workers},
            "traffic": {"source": {"type": "trace", "paths": ["trace.jsonl"], "format": "mooncake", "block_size": 512},
                        "load": {"type": "trace_timestamps"}}}


VERDICTS = {
    "aggregated-with-hardware": config("Qwen/Qwen3-8B", "h200_sxm", "vllm", "h100_sxm", None, 1, mode="aggregated"),
    "auto-hardware": config("Qwen/Qwen3-8B", "h200_sxm", "vllm", "auto", None, 1),
    "empty-hardware": config("Qwen/Qwen3-8B", "h200_sxm", "vllm", "", None, 1),
}


def predict(cfg: dict[str, Any], *args: str) -> subprocess.CompletedProcess:
    venv = Path(subprocess.run([str(REF / "install-dynamo.sh")], check=True, capture_output=True,
                               text=True).stdout.strip())
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "trace.jsonl").write_text("".join(json.dumps(r) + "\n" for r in TRACE))
        (work / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
        return subprocess.run([str(venv / "bin" / "aisimulate"), "predict", "-c", "config.yaml", "--overwrite",
                               "--format", "json", "--output-dir", "out", *args], cwd=work, capture_output=True,
                              text=True)


def main() -> int:
    rows = []
    for entry in MATRIX:
        cfg = config(*entry)
        done = predict(cfg, "--detail", "memory")
        if done.returncode:
            print(done.stderr, file=sys.stderr)
            return 1
        roles = json.loads(done.stdout)["details"]["sections"]["memory"]["roles"]
        blocks = {role: roles[role]["estimated_num_gpu_blocks"] for role in ("prefill", "decode")}
        rows.append({"config": cfg["engine"], "estimated_num_gpu_blocks": blocks})
        print(entry, blocks, file=sys.stderr)
    verdicts = {name: {"config": cfg["engine"], "exit_code": predict(cfg).returncode} for name, cfg in VERDICTS.items()}
    print(verdicts, file=sys.stderr)
    OUT.write_text(json.dumps({
        "producer": "aisimulate==0.13.0.dev202610270000000085 predict --detail memory (benchmarks/record_013_roles.py)",
        "cases": rows, "verdicts": verdicts}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
