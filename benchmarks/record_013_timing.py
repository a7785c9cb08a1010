"""Record how AISimulate 0.13 times a pass and when it emits tokens (`compat: upstream-0.13`).

Runs the upstream 0.13 build (``../shared/reference/install-dynamo.sh``) with ``aisimulate
predict`` as a black box on small mooncake traces of our own — fixed, polynomial and AIC timing;
vLLM, SGLang and TensorRT-LLM; aggregated and disaggregated; prompts in one pass or in chunks;
passes that only prefill, only decode, or both — and stores each config, its trace and 0.13's
report (per-request records included) in ``tests/cases/upstream013/timing.json`` for
``tests/upstream013/test_timing.py`` (which never runs the reference). AIC-timed cases are run by
0.13 on its own database; servesim runs them with ``engine.aic_systems_path`` pointed at it.

    python benchmarks/record_013_timing.py [--compare]
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
REF = ROOT.parent / "shared" / "reference"
OUT = ROOT / "tests" / "cases" / "upstream013" / "timing.json"
PRODUCER = "aisimulate==0.13.0.dev202610270000000085 predict (benchmarks/record_013_timing.py)"
VOLATILE = ("wall_time_ms", "processed_tokens_per_s", "processed_output_tokens_per_s")
FIXED = {"type": "fixed", "prefill_ms": 10, "decode_ms": 5}
POLY = {"type": "polynomial"}
POOL = {"block_size": 16, "prefix_caching": True, "capacity": {"type": "fixed", "blocks": 4000}}


def req(t: float, n: int, o: int, first_id: int) -> dict[str, Any]:
    """A request of `n` prompt tokens (own blocks from `first_id`) and `o` output tokens at `t` ms."""
    return {"timestamp": t, "input_length": n, "output_length": o, "hash_ids": list(range(first_id, first_id + -(-n // 16)))}


LONE = [req(0, 100, 4, 1)]
ONE_TOKEN = [req(0, 100, 1, 1)]
MIXED = [req(0, 100, 10, 1), req(12, 100, 3, 100)]
CHUNKED = [req(0, 100, 10, 1), req(12, 200, 3, 100)]
BURST = [req(0, 300, 12, 1), req(3, 300, 4, 100), req(14, 200, 6, 200), req(40, 500, 3, 300)]


def aggregated(timing: dict[str, Any], backend: str = "vllm", model: str = "Qwen/Qwen3-8B", **worker: Any) -> dict[str, Any]:
    workers = {"aggregated": {"kv_cache": copy.deepcopy(POOL), "timing": timing, **worker}}
    if not timing:
        del workers["aggregated"]["timing"]
    return {"traffic": {"source": {"type": "trace", "paths": ["trace.jsonl"], "format": "mooncake", "block_size": 16},
                        "load": {"type": "trace_timestamps"}},
            "engine": {"model": model, "hardware": "h200_sxm", "backend": backend, "context_length": 32768,
                       "workers": workers}}


def disaggregated(timing: dict[str, Any], backend: str = "vllm", prefill_hardware: str | None = None) -> dict[str, Any]:
    config = aggregated(timing, backend)
    role = config["engine"]["workers"].pop("aggregated")
    config["engine"]["mode"] = "disaggregated"
    config["engine"]["workers"] = {"prefill": role, "decode": copy.deepcopy(role)}
    if prefill_hardware is not None:
        role["hardware"] = prefill_hardware
    config["engine"]["kv_transfer"] = {"bytes_per_token": 100000, "bandwidth_gb_per_second": 10,
                                       "timing_mode": "full_prompt"}
    return config


CASES: dict[str, tuple[dict[str, Any], list[dict[str, Any]], str]] = {
    "vllm-fixed-one-token": (aggregated(FIXED), ONE_TOKEN, "a pass that only prefills: no decode time"),
    "vllm-fixed-lone": (aggregated(FIXED), LONE, "prefill-only pass, then decode-only passes"),
    "vllm-fixed-mixed": (aggregated(FIXED), MIXED, "a pass with a prompt and a decoder: both phases"),
    "vllm-fixed-chunked": (aggregated(FIXED, scheduler={"max_batched_tokens": 64}), CHUNKED, "prompts in chunks"),
    "vllm-fixed-burst": (aggregated(FIXED), BURST, "arrivals during prefills and decodes"),
    "sglang-fixed-mixed": (aggregated(FIXED, "sglang"), MIXED, "SGLang: an extend is a round of its own"),
    "sglang-fixed-burst": (aggregated(FIXED, "sglang"), BURST, "SGLang: extends back to back"),
    "trtllm-fixed-burst": (aggregated(FIXED, "trtllm"), BURST, "TensorRT-LLM's policy on the vLLM core"),
    "vllm-poly-burst": (aggregated(POLY), BURST, "polynomial: decode phase over the decoders only"),
    "sglang-poly-burst": (aggregated(POLY, "sglang"), BURST, "polynomial SGLang"),
    "vllm-fixed-pd": (disaggregated(FIXED), BURST, "disaggregated: the prefill worker emits the first token"),
    "sglang-poly-pd": (disaggregated(POLY, "sglang"), BURST, "disaggregated SGLang, polynomial"),
    "sglang-fixed-pd": (disaggregated(FIXED, "sglang"), MIXED, "disaggregated SGLang, fixed"),
    "vllm-aic-burst": (aggregated({}), BURST, "AIC (0.13's database): context - 1 and Q/K norms"),
    "sglang-aic-burst": (aggregated({}, "sglang"), BURST, "AIC SGLang"),
    "trtllm-aic-burst": (aggregated({}, "trtllm"), BURST, "AIC TensorRT-LLM"),
    "vllm-aic-32b-tp2": (aggregated({}, model="Qwen/Qwen3-32B", parallelism={"tensor": 2}), BURST,
                         "AIC, Q/K norms of the heads on each GPU"),
    "vllm-aic-chunked": (aggregated({}, scheduler={"max_batched_tokens": 128}), CHUNKED, "AIC, prompts in chunks"),
    "vllm-aic-pd": (disaggregated({}), BURST, "AIC disaggregated"),
    "vllm-aic-pd-h100-prefill": (disaggregated({}, prefill_hardware="h100_sxm"), MIXED,
                                 "AIC disaggregated, prefill workers on other hardware"),
}


def venv() -> Path:
    return Path(subprocess.run([str(REF / "install-dynamo.sh"), "--check"], check=True, capture_output=True,
                               text=True).stdout.strip())


def predict(command: list[str], config: dict[str, Any], trace: list[dict[str, Any]],
            env: dict[str, str] | None = None) -> dict[str, Any]:
    """prediction.json (volatile fields dropped, records ordered by arrival) of one run."""
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "trace.jsonl").write_text("".join(json.dumps(r) + "\n" for r in trace))
        (work / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
        done = subprocess.run([*command, "predict", "-c", "config.yaml", "--overwrite", "--capture-per-request",
                               "--format", "json", "--output-dir", "out"], cwd=work, capture_output=True, text=True,
                              env=env)
        if done.returncode:
            raise SystemExit(f"{command[0]} failed: {done.stderr[-2000:]}")
        report = json.loads((work / "out" / "prediction.json").read_text())
    for key in VOLATILE:
        report.pop(key, None)
    report["per_request"] = sorted(report.get("per_request", []), key=lambda r: (r["arrival_time_ms"], r["session_id"]))
    return report


def main() -> int:
    compare = "--compare" in sys.argv
    upstream = venv()
    systems = upstream / "lib" / "python3.11" / "site-packages" / "aisimulate_core" / "systems"
    cases = {}
    for name, (config, trace, what) in CASES.items():
        report = predict([str(upstream / "bin" / "aisimulate")], config, trace)
        cases[name] = {"what": what, "aic": "aic" in name, "config": config, "trace": trace, "report": report}
        line = f"{name}: {len(trace)} requests"
        if compare:
            mine = copy.deepcopy(config)
            mine["compat"] = "upstream-0.13"
            if cases[name]["aic"]:
                mine["engine"]["aic_systems_path"] = str(systems)
            ours = predict([sys.executable, "-m", "servesim"], mine, trace,
                           {**os.environ, "PYTHONPATH": str(ROOT / "src")})
            line += "; ttft " + " ".join(f"{a['ttft_ms']:.6f}/{b['ttft_ms']:.6f}"
                                         for a, b in zip(report["per_request"], ours["per_request"], strict=True))
        print(line, file=sys.stderr)
    OUT.write_text(json.dumps({"producer": PRODUCER, "cases": cases}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
