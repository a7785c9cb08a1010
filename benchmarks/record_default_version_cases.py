#!/usr/bin/env python3
"""Record the parity cases for an omitted `backend_version` (tests/cases/defaults/).

Each case is a small Mooncake trace (36 requests with prefix sharing, the same for every case)
replayed with default timing and default KV capacity on h100_sxm or h200_sxm, for vLLM, SGLang
and TRT-LLM, without `backend_version` — the reference then uses its defaults (vLLM 0.19.0,
SGLang 0.5.10, TRT-LLM 1.3.0rc10), data only its own AIConfigurator database holds. The
reference runs each config (`../shared/reference/run.sh`); its `prediction.json` (without the
`per_request` array, which `requests.jsonl` repeats) and `requests.jsonl` are stored next to it.

    python3 benchmarks/record_default_version_cases.py        # needs the reference installed
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "cases" / "defaults"
RUN = ROOT.parent / "shared" / "reference" / "run.sh"

CASES = {  # name: (model, hardware, backend, tensor parallel)
    "01-qwen8b-h200-vllm": ("Qwen/Qwen3-8B", "h200_sxm", "vllm", 1),
    "02-qwen32fp8-h100-vllm": ("Qwen/Qwen3-32B-FP8", "h100_sxm", "vllm", 1),
    "03-llama8b-h200-sglang": ("meta-llama/Meta-Llama-3.1-8B", "h200_sxm", "sglang", 1),
    "04-qwen8b-h100-sglang-tp2": ("Qwen/Qwen3-8B", "h100_sxm", "sglang", 2),
    "05-qwen32fp8-h200-trtllm": ("Qwen/Qwen3-32B-FP8", "h200_sxm", "trtllm", 1),
    "06-llama8b-h100-trtllm": ("meta-llama/Meta-Llama-3.1-8B", "h100_sxm", "trtllm", 1),
}

CONFIG = """\
# Omitted backend_version ({backend}: the reference's default), default timing and KV capacity,
# {model} on {hardware} (TP {tp}); a 36-request Mooncake trace with shared prefixes.
engine:
  model: {model}
  hardware: {hardware}
  backend: {backend}
  workers:
    aggregated:
      parallelism: {{tensor: {tp}}}
traffic:
  source: {{type: trace, paths: [trace.jsonl], format: mooncake, block_size: 512}}
  load: {{type: trace_timestamps}}
"""


def trace_rows(seed: int = 12, count: int = 36) -> list[dict]:
    """Arrivals ~8/s; prompts 300-6000 tokens, a third extending one of four shared prefixes."""
    rng = random.Random(seed)
    rows, now, next_hash = [], 0.0, 1000
    prefixes = [[4 * g + i for i in range(1, 5)] for g in range(4)]
    for _ in range(count):
        now += rng.expovariate(8.0) * 1000
        isl = rng.randint(300, 6000)
        blocks = -(-isl // 512)
        shared = prefixes[rng.randrange(4)][:blocks] if rng.random() < 0.35 else []
        own = list(range(next_hash, next_hash + blocks - len(shared)))
        next_hash += len(own)
        rows.append({"timestamp": int(now), "input_length": isl, "output_length": rng.randint(8, 300),
                     "hash_ids": shared + own})
    return rows


def record(name: str, model: str, hardware: str, backend: str, tp: int, trace: str) -> None:
    folder = OUT / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "trace.jsonl").write_text(trace)
    config = folder / "config.yaml"
    config.write_text(CONFIG.format(model=model, hardware=hardware, backend=backend, tp=tp))
    with tempfile.TemporaryDirectory() as out:
        subprocess.run([str(RUN), str(config), out], check=True, stdout=subprocess.DEVNULL)
        report = json.loads(Path(out, "prediction.json").read_text())
        report.pop("per_request", None)
        (folder / "report.json").write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
        (folder / "requests.jsonl").write_text(Path(out, "requests.jsonl").read_text())
    print(f"{name}: {report['completed_requests']} completed, mean TTFT {report['mean_ttft_ms']:.2f} ms",
          file=sys.stderr)


def main() -> None:
    trace = "".join(json.dumps(row) + "\n" for row in trace_rows())
    for name, (model, hardware, backend, tp) in CASES.items():
        record(name, model, hardware, backend, tp, trace)


if __name__ == "__main__":
    main()
