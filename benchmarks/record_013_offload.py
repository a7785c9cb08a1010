"""Record AISimulate 0.13's behaviour with a host-memory KV tier (`kv_cache.host_offload`, issue 34).

Runs the upstream 0.13 build (``../shared/reference/install-dynamo.sh``) as a black box on small
vLLM configs whose GPU pool overflows, so that evicted prefixes come back from host memory, and
stores each config, its trace and 0.13's per-request records in
``tests/cases/upstream013/offload.json`` for ``tests/upstream013/test_host_offload.py`` (which
never runs the reference). Also records which host-offload configs 0.13 refuses. With
``--compare``, servesim runs every scenario too and the differing fields are printed.

Every scenario starts with a *pacer*: one request with a long output that decodes through the
whole run. It was needed before `compat: upstream-0.13` (0.13's pass convention, under which
servesim runs the scenarios now): 0.13's fixed timing charges `decode_ms` only to passes with a
decoding request, while 0.1.0.dev2's also charges it to a pass that only completes prompts; with a
decoder in every pass the two agree. The pacer is not compared; its prompt and output fit one
128-token block, so it never takes another block.

    python benchmarks/record_013_offload.py [--compare]
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
OUT = ROOT / "tests" / "cases" / "upstream013" / "offload.json"

FIELDS = ("arrival_time_ms", "input_length", "first_admit_ms", "ttft_ms", "e2e_latency_ms", "reused_input_tokens",
          "first_admission_g1_reused_input_tokens", "first_admission_host_reused_input_tokens", "admission_count",
          "admission_history")


BS = 128
"""Block size of the engine and the traces (tokens)."""


def req(t: float, ids: list[int], n: int = 4 * BS, o: int = 4) -> dict[str, Any]:
    return {"timestamp": t, "input_length": n, "output_length": o, "hash_ids": ids}


PACER = req(0, [900], n=1, o=120)
A, B, C, D = [1, 2, 3, 4], [11, 12, 13, 14], [21, 22, 23, 24], [31, 32, 33, 34]


def config(blocks: int, host: dict[str, Any] | None, **scheduler: int) -> dict[str, Any]:
    kv: dict[str, Any] = {"block_size": BS, "prefix_caching": True, "bytes_per_token": 1000,
                          "capacity": {"type": "fixed", "blocks": blocks}}
    if host is not None:
        kv["host_offload"] = host
    worker: dict[str, Any] = {"scheduler": {"max_batched_tokens": 8192, "max_sequences": 256, **scheduler},
                              "kv_cache": kv, "timing": {"type": "fixed", "prefill_ms": 10, "decode_ms": 5}}
    return {"traffic": {"source": {"type": "trace", "paths": ["trace.jsonl"], "format": "mooncake", "block_size": BS},
                        "load": {"type": "trace_timestamps"}},
            "engine": {"model": "Qwen/Qwen3-32B", "hardware": "h200_sxm", "backend": "vllm", "context_length": 32768,
                       "workers": {"aggregated": worker}}}


def with_g3(cfg: dict[str, Any], **g3: Any) -> dict[str, Any]:
    """`cfg` with a worker-local disk tier behind its host tier."""
    cfg = copy.deepcopy(cfg)
    cfg["engine"]["workers"]["aggregated"]["kv_cache"]["g3_offload"] = {"scope": "worker_local", **g3}
    return cfg


G3_TRACE = [PACER, req(100, A), req(200, B), req(300, C), req(400, B), req(500, A)]


def _pressure_trace() -> list[dict[str, Any]]:
    """30 requests every 20 ms over 5 prompt families of 4 shared blocks plus a private tail."""
    out = [PACER]
    for i in range(30):
        family = [100 * (i % 5 + 1) + b for b in range(4)]
        out.append(req(20 + 20 * i, family + [5000 + i, 6000 + i, 7000 + i], n=4 * BS + BS * (i % 3) + 5))
    return out


SCENARIOS: dict[str, tuple[dict[str, Any], list[dict[str, Any]], str]] = {
    "reload": (config(8, {"num_host_blocks": 100}),
               [PACER, req(100, A), req(200, B), req(300, C), req(400, A)],
               "A's blocks are evicted from the GPU pool and come back from host memory"),
    "reload-slow": (config(8, {"num_host_blocks": 100, "h2d_bandwidth_gbps": 0.01, "latency_to_first_byte_ms": 4.0}),
                    [PACER, req(100, A), req(200, B), req(300, C), req(400, A + [5], n=5 * BS)],
                    "a slow load: 4 ms first byte + 4 blocks x 128000 bytes at 10 MB/s"),
    "host-lru": (config(8, {"num_host_blocks": 8}),
                 [PACER, req(100, A), req(200, B), req(300, C), req(400, B), req(500, A)],
                 "host memory holds two prompts: B's blocks come back, A's were dropped"),
    "serial-loads": (config(9, {"num_host_blocks": 100, "latency_to_first_byte_ms": 3.0}),
                     [PACER, req(100, A), req(150, B), req(200, D), req(250, C, n=BS), req(300, A + [5], n=5 * BS),
                      req(300, B + [15], n=5 * BS)],
                     "two loads at once: the second waits for room, then loads"),
    "overlapped-loads": (config(10, {"num_host_blocks": 100, "latency_to_first_byte_ms": 14.0, "h2d_bandwidth_gbps": 0.05}),
                         [PACER, req(100, A, n=2 * BS), req(150, B, n=2 * BS), req(200, D), req(250, C),
                          req(300, A + [5], n=2 * BS + 1), req(300, B + [15], n=2 * BS + 1)],
                         "two loads at once (2 blocks = 5.12 ms each, 14 ms first byte): their bytes queue on "
                         "the channel, their latencies overlap (admitted at 320 and 335 ms, not 340)"),
    "skip-loading": (config(8, {"num_host_blocks": 100, "latency_to_first_byte_ms": 3.0}),
                     [PACER, req(100, A), req(200, B), req(300, C), req(350, D), req(400, A), req(400, [41, 42, 43, 44])],
                     "a request loading from host memory lets the next one be admitted first"),
    "no-offload": (config(8, None),
                   [PACER, req(100, A), req(200, B), req(300, C), req(400, A)],
                   "the same trace as `reload` without a host tier"),
    "pressure": (config(14, {"num_host_blocks": 40}), _pressure_trace(),
                 "30 requests over 5 shared prefixes, the GPU pool overflowing, host memory holding them all"),
    "g3-restore": (with_g3(config(8, {"num_host_blocks": 8}), num_g3_blocks=100), G3_TRACE,
                   "A dropped from host memory comes back from disk: read into host memory, loaded next pass"),
    "g3-slow": (with_g3(config(8, {"num_host_blocks": 8}), num_g3_blocks=100, read_bandwidth_gbps=0.01,
                        latency_to_first_byte_ms=3.0), G3_TRACE,
                "a slow disk: 3 ms + 4 blocks at 10 MB/s = 54.2 ms"),
    "g3-small": (with_g3(config(8, {"num_host_blocks": 8}), num_g3_blocks=8), G3_TRACE,
                 "the disk holds two prompts too: A is gone from both tiers"),
}
SCENARIOS["store-wait"] = (config(8, {"num_host_blocks": 100, "latency_to_first_byte_ms": 3.0}),
                           [PACER, req(100, A, o=1), req(105, B)],
                           "B reuses two of the blocks A computed in the pass before, whose copy to host memory "
                           "(3 ms + 4 blocks at 32 GB/s) is in flight: its pass waits 3.016 ms")
SCENARIOS["store-wait-slow"] = (config(8, {"num_host_blocks": 100, "d2h_bandwidth_gbps": 0.1}),
                                [PACER, req(100, A, o=1), req(105, B), req(106, C, n=BS)],
                                "the same at 0.1 GB/s device to host and no latency: 5.12 ms")
SCENARIOS["preemption"] = (config(11, {"num_host_blocks": 100, "latency_to_first_byte_ms": 3.0}),
                           SCENARIOS["serial-loads"][1],
                           "a preempted request: the pass that reuses its last block waits for that block's "
                           "copy to host memory (3 ms + 2 blocks), then it is reloaded from host memory")
SCENARIOS["host-gone-order"] = (config(8, {"num_host_blocks": 7}), G3_TRACE,
                                "one block more: the dropped GPU blocks leave host memory in the order the GPU pool "
                                "evicted them (tail first: B4 before B3), so B3 comes back from host memory")
SCENARIOS["host-resident-lru"] = (config(8, {"num_host_blocks": 4}),
                                  [PACER, req(100, A), req(200, [700, 701], n=BS + 1), req(300, [800], n=1, o=650),
                                   req(5000, A + [5], n=5 * BS)],
                                  "every host block still in the GPU pool: the store of X's block drops A1 (least "
                                  "recently stored); a long decode then evicts A2..A4 from the GPU pool, and the last "
                                  "request finds A1 on the GPU and A2..A4 in host memory")
"""Scenarios servesim reproduces field for field (tests/upstream013/test_host_offload.py)."""

KNOWN_DIFFERENCES: dict[str, tuple[dict[str, Any], list[dict[str, Any]], str]] = {
    "pressure-host-overflow": (config(14, {"num_host_blocks": 24}), _pressure_trace(),
                               "host memory overflowing too: 25 of 30 requests match (see docs/upstream013.md)"),
    "g3-host-overflow": (with_g3(config(8, {"num_host_blocks": 6}), num_g3_blocks=100), G3_TRACE,
                         "host memory overflowing inside a prompt: 0.13 drops the blocks the GPU pool no longer "
                         "holds first, B3 and B4 among them, and reads B's tail from disk; servesim's requests "
                         "equal 0.13's, but its disk reads 5 blocks, 0.13's 6 (B3 still in host memory)"),
    "host-gone-first": (config(8, {"num_host_blocks": 6}), G3_TRACE,
                        "g3-host-overflow without a disk: B1, B2 (still in the GPU pool) outlive B3, B4 in host "
                        "memory, B is admitted with its GPU hits only; servesim's GPU pool drops B3 one pass "
                        "later (after C's store), so it finds B3 in host memory"),
}
"""Scenarios recorded to measure where servesim differs (printed with --compare, not tested)."""

VERDICTS: dict[str, dict[str, Any]] = {
    "sglang": {"engine.backend": "sglang"},
    "no-prefix-caching": {"kv_cache.prefix_caching": False},
    "worker-local-scope": {"kv_cache.host_offload.scope": "worker_local"},
    "zero-host-blocks": {"kv_cache.host_offload.num_host_blocks": 0},
    "negative-bandwidth": {"kv_cache.host_offload.h2d_bandwidth_gbps": -1.0},
    "unknown-key": {"kv_cache.host_offload.num_blocks": 10},
}


def verdict_config(changes: dict[str, Any]) -> dict[str, Any]:
    """The `reload` config with dotted-path changes (engine.* or, else, the aggregated worker's)."""
    cfg = copy.deepcopy(SCENARIOS["reload"][0])
    for path, value in changes.items():
        parts = path.split(".")
        node = cfg["engine"] if parts[0] == "engine" else cfg["engine"]["workers"]["aggregated"]
        parts = parts[1:] if parts[0] == "engine" else parts
        for part in parts[:-1]:
            node = node[part]
        node[parts[-1]] = value
    return cfg


def run(tool: str, cfg: dict[str, Any], trace: list[dict[str, Any]]) -> tuple[int, dict[str, Any] | None, str]:
    """(exit code, prediction.json, stderr) of 0.13 (`tool` = "0.13") or servesim."""
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "trace.jsonl").write_text("".join(json.dumps(r) + "\n" for r in trace))
        (work / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
        args = ["predict", "-c", "config.yaml", "--overwrite", "--capture-per-request", "--format", "json",
                "--output-dir", "out"]
        if tool == "0.13":
            venv = subprocess.run([str(REF / "install-dynamo.sh")], check=True, capture_output=True, text=True)
            cmd = [str(Path(venv.stdout.strip()) / "bin" / "aisimulate"), *args]
        else:
            cmd = [sys.executable, "-m", "servesim", *args]
        env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
        done = subprocess.run(cmd, cwd=work, capture_output=True, text=True, env=env)
        report = json.loads((work / "out" / "prediction.json").read_text()) if done.returncode == 0 else None
        return done.returncode, report, done.stderr


def records(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The compared fields of every request but the pacer (the first), in arrival order."""
    ordered = sorted(report["per_request"], key=lambda r: (r["arrival_time_ms"], r["input_length"],
                                                          r.get("first_admit_ms") or 0.0, r["e2e_latency_ms"]))
    return [{k: r.get(k) for k in FIELDS} for r in ordered[1:]]


def main() -> int:
    compare = "--compare" in sys.argv
    scenarios = {}
    for name, (cfg, trace, what) in {**SCENARIOS, **KNOWN_DIFFERENCES}.items():
        code, report, err = run("0.13", cfg, trace)
        if code:
            print(name, err, file=sys.stderr)
            return 1
        assert report is not None
        scenarios[name] = {"what": what, "exact": name in SCENARIOS, "config": cfg, "trace": trace,
                           "requests": records(report), "g3_offload": report.get("g3_offload"),
                           "prefix_cache_reused_ratio": report.get("summary", report)["prefix_cache_reused_ratio"]}
        line = f"{name}: recorded {len(trace) - 1} requests"
        if compare:
            _, mine, _ = run("servesim", {**cfg, "compat": "upstream-0.13"}, trace)
            assert mine is not None
            ours = records(mine)
            same = sum(a == b for a, b in zip(scenarios[name]["requests"], ours, strict=True))
            line += f", servesim equal on {same}/{len(ours)}"
            for a, b in zip(scenarios[name]["requests"], ours, strict=True):
                diff = {k: (a[k], b[k]) for k in FIELDS if a[k] != b[k] and k != "admission_history"}
                if diff:
                    print("   ", diff, file=sys.stderr)
        print(line, file=sys.stderr)
    verdicts = {}
    for name, changes in VERDICTS.items():
        code, _, err = run("0.13", verdict_config(changes), SCENARIOS["reload"][1])
        verdicts[name] = {"changes": changes, "exit_code": code}
        print(name, code, file=sys.stderr)
    OUT.write_text(json.dumps({
        "producer": "aisimulate==0.13.0.dev202610270000000085 predict (benchmarks/record_013_offload.py)",
        "scenarios": scenarios, "verdicts": verdicts}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
