"""Rebuild the measurement pack shipped as package data (src/servesim/data/llmservingsim-vllm-validation).

    python3 tools/build_open_pack.py [../shared/data/llmservingsim-vllm-validation]

From LLMServingSim's vLLM bench (MIT) it keeps, per run, the measured per-request timestamps and
token counts (`requests.jsonl`), the per-second scheduler log (`timeseries.csv`) and the engine
settings of `meta.json` (vLLM version, engine kwargs, resolved KV blocks); and the Mooncake
traces of the three workloads (send times, token counts, one private hash id per 512-token
block). No token ids (the ShareGPT-derived workloads) and no profiler bundles are copied.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

SOURCE = Path(sys.argv[1] if len(sys.argv) > 1 else "../shared/data/llmservingsim-vllm-validation")
TARGET = Path(__file__).resolve().parents[1] / "src" / "servesim" / "data" / "llmservingsim-vllm-validation"
REQUEST_KEYS = ("request_id", "input_toks", "output_toks", "arrival_time", "queued_ts", "scheduled_ts",
                "first_token_ts", "last_token_ts")
META_KEYS = ("schema_version", "model", "vllm_version", "engine_kwargs", "num_requests", "started_at",
             "finished_at", "tick_seconds")
KV_KEYS = ("num_gpu_blocks", "block_size", "num_kv_tokens", "enable_prefix_caching", "gpu_memory_utilization")


def main() -> None:
    if TARGET.exists():
        shutil.rmtree(TARGET)
    for requests in sorted(SOURCE.glob("examples/*/*/vllm/requests.jsonl")):
        out = TARGET / requests.relative_to(SOURCE).parent
        out.mkdir(parents=True)
        rows = [json.loads(line) for line in requests.read_text().splitlines() if line.strip()]
        (out / "requests.jsonl").write_text("".join(
            json.dumps({k: r[k] for k in REQUEST_KEYS if k in r}) + "\n" for r in rows))
        shutil.copyfile(requests.parent / "timeseries.csv", out / "timeseries.csv")
        meta = json.loads((requests.parent / "meta.json").read_text())
        slim = {k: meta[k] for k in META_KEYS if k in meta}
        if meta.get("kv_cache"):
            slim["kv_cache"] = {k: meta["kv_cache"][k] for k in KV_KEYS if k in meta["kv_cache"]}
        (out / "meta.json").write_text(json.dumps(slim, indent=2) + "\n")
    (TARGET / "traces").mkdir()
    for trace in sorted(SOURCE.glob("traces/*.mooncake.jsonl")):
        shutil.copyfile(trace, TARGET / "traces" / trace.name)
    print(f"wrote {TARGET} ({sum(p.stat().st_size for p in TARGET.rglob('*') if p.is_file()) // 1024} KB)")


if __name__ == "__main__":
    main()
