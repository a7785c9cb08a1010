#!/usr/bin/env python3
"""Differential test of disaggregated serving: random configs run by servesim and the reference.

    python3 benchmarks/difftest_disagg.py --count 200 [--seed 0] [--backend sglang] [--out DIR] [--keep-all]

Each case is a random disaggregated deployment (replicas and TP per pool, block sizes and
tiny KV pools on either side, prefill/decode `max_sequences`, token budgets, prefix caching,
fixed or polynomial timing, explicit or `auto` KV bytes, bandwidths, both transfer timing
modes) with a random workload (Mooncake traces with shared prefixes and sessions, or synthetic
concurrency / constant-rate / Poisson traffic; time caps; context-length rejections; output 0).
`--backend vllm` (default) tests the source-first handoff; `--backend sglang` the
destination-first one, with SGLang page sizes (1–32) and page pools sized in tokens.
Summary fields and per-request records — handoff timestamps included — are compared; a case
matches when both tools agree or both fail. The reference can spin for ever on an unservable
SGLang workload, so every run has a timeout (a timed-out run counts as a failure), and servesim
runs with `--unservable fail` (the reference's behaviour). Needs the reference
(../shared/reference).
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
REFERENCE = HERE.parent.parent / "shared" / "reference" / "aisimulate.sh"
HOST = {"wall_time_ms", "processed_tokens_per_s", "processed_output_tokens_per_s", "per_request"}
OWN_FIELDS = {"rejected_requests", "incomplete_requests"}
"""servesim's own summary fields (`servesim.report.summary.SERVESIM_FIELDS`), not the reference's."""
OWN_RECORD_FIELDS = {"rejection_reason"}
"""servesim's own per-request fields (`SERVESIM_RECORD_FIELDS`)."""
def _trace(rng: random.Random, block: int) -> list[dict]:
    prefixes = [[1, 2, 3, 4, 5, 6, 7, 8], [1, 2, 9, 10, 11, 12], [13, 14, 15, 16, 17]]
    rows, t = [], 0.0
    for s in range(rng.randint(2, 16)):
        t += rng.choice([0, 0, 1, 4, 10, 25])
        for k in range(rng.randint(1, 3) if rng.random() < 0.4 else 1):
            n = rng.randint(1, 6)
            ids = rng.choice(prefixes)[:n] if rng.random() < 0.6 else [1000 * s + 10 * k + i for i in range(n)]
            row = {"hash_ids": ids, "output_length": rng.choice([0, 1, 2, 5, 9, 20]), "session_id": f"S{s}"}
            if rng.random() < 0.7:
                row["input_length"] = rng.randint(1, n * block)
            if k == 0:
                row["timestamp"] = 500 + t
            else:
                row["delay"] = rng.choice([0, 2, 7.5])
            rows.append(row)
    return rows


def _worker(rng: random.Random, role: str, backend: str = "vllm") -> dict:
    worker = {
        "parallelism": {"replicas": rng.choice([1, 1, 2, 3]), "tensor": rng.choice([1, 2, 4])},
        "scheduler": {"max_batched_tokens": rng.choice([16, 64, 256, 8192]),
                      **({"max_sequences": rng.choice([1, 2, 4, 256])} if rng.random() < 0.6 else {})},
        "kv_cache": {"block_size": rng.choice([16, 32, 64]), "prefix_caching": rng.random() < 0.8,
                     "capacity": {"type": "fixed", "blocks": rng.choice([12, 20, 40, 100, 1000])}},
        "timing": ({"type": "fixed", "prefill_ms": rng.choice([10, 3.3]), "decode_ms": rng.choice([2, 0.7])}
                   if rng.random() < 0.6 else {"type": "polynomial"}),
    }
    if backend == "sglang":
        page = rng.choice([1, 1, 4, 16, 32])
        tokens = rng.choice([150, 300, 600, 1200, 20000])
        worker["kv_cache"]["block_size"] = page
        worker["kv_cache"]["capacity"]["blocks"] = max(1, tokens // page)
    return worker


def make_case(rng: random.Random, folder: Path, backend: str = "vllm") -> None:
    folder.mkdir(parents=True, exist_ok=True)
    transfer: dict = {"timing_mode": rng.choice(["full_prompt", "destination_missing"])}
    if rng.random() < 0.8:
        transfer["bandwidth_gb_per_second"] = rng.choice([0.5, 5, 50])
    transfer["bytes_per_token"] = rng.choice(["auto", 100000, 4096])
    engine = {"mode": "disaggregated", "model": "Qwen/Qwen3-8B", "hardware": "h200_sxm", "backend": backend,
              "context_length": rng.choice([32768, 32768, 150, 300]),
              "workers": {"prefill": _worker(rng, "prefill", backend), "decode": _worker(rng, "decode", backend)},
              "kv_transfer": transfer}
    if rng.random() < 0.6:
        block = rng.choice([16, 64])
        (folder / "trace.jsonl").write_text("".join(json.dumps(r) + "\n" for r in _trace(rng, block)))
        traffic = {"source": {"type": "trace", "paths": ["trace.jsonl"], "block_size": block},
                   "load": ({"type": "trace_timestamps", "speedup": rng.choice([1, 2])} if rng.random() < 0.6
                            else {"type": "concurrency", "concurrency": rng.randint(1, 4)})}
        if rng.random() < 0.2:
            traffic["stop"] = {"max_virtual_time_seconds": rng.choice([0.05, 0.2])}
    else:
        load = rng.choice([{"type": "concurrency", "concurrency": rng.randint(1, 4)},
                           {"type": "constant_rate", "requests_per_second": rng.choice([100, 400])},
                           {"type": "poisson", "requests_per_second": 300, "seed": rng.randint(0, 9)}])
        traffic = {"source": {"type": "synthetic", "input_tokens": rng.randint(1, 300),
                              "output_tokens": rng.randint(1, 12)},
                   "load": load, "stop": {"requests": rng.randint(1, 12)}}
    (folder / "config.yaml").write_text(yaml.safe_dump({"engine": engine, "traffic": traffic}))


def run(command: list[str], folder: Path, name: str, timeout: float = 600.0,
        extra: tuple[str, ...] = ()) -> tuple[dict | None, str]:
    out = folder / name
    try:
        done = subprocess.run(command + ["predict", "-c", "config.yaml", "--output-dir", str(out), "--overwrite",
                                         "--capture-per-request", "--format", "json", *extra],
                              cwd=folder, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, f"no result within {timeout:g} s"
    if done.returncode:
        lines = done.stderr.strip().splitlines()
        return None, lines[-1] if lines else f"exit {done.returncode}"
    return json.loads((out / "prediction.json").read_text()), ""


def run_servesim(command: list[str], folder: Path, timeout: float) -> tuple[dict | None, str]:
    """servesim with `--unservable fail` (the reference's behaviour for requests that can never
    fit), except that `fail` also refuses a run in which nothing completed, which the reference
    reports: such a run is compared as the default mode reports it."""
    ours, err = run(command, folder, "servesim", timeout, ("--unservable", "fail"))
    if ours is None and "no request completed" in err:
        ours, err = run(command, folder, "servesim", timeout)
    return ours, err


def same(a: object, b: object) -> bool:
    if isinstance(a, float) and isinstance(b, (int, float)):
        return abs(a - b) <= 1e-9 * max(abs(a), abs(b)) or abs(a - b) <= 1e-12
    return a == b


def compare(ref: dict, ours: dict) -> list[str]:
    diffs = [f"{k}: reference {ref[k]!r}, servesim {ours.get(k)!r}" for k in sorted(ref)
             if k not in HOST and not same(ref[k], ours.get(k))]
    key = lambda r: (r["session_id"], r["turn_index"])  # noqa: E731
    mine = {key(r): r for r in ours.get("per_request", [])}
    for r in ref.get("per_request", []):
        o = mine.get(key(r))
        if o is None:
            diffs.append(f"request {key(r)} missing")
            continue
        diffs += [f"request {key(r)}.{f}: reference {r.get(f)!r}, servesim {o.get(f)!r}"
                  for f in sorted(set(r) | set(o) - OWN_RECORD_FIELDS) if f != "uuid" and not same(r.get(f), o.get(f))]
    return diffs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--count", type=int, default=100)
    parser.add_argument("--out", default="difftest-disagg")
    parser.add_argument("--servesim", default=f"{sys.executable} -m servesim --compat reference")
    parser.add_argument("--reference", default=str(REFERENCE))
    parser.add_argument("--keep-all", action="store_true")
    parser.add_argument("--backend", choices=("vllm", "sglang"), default="vllm")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds per run (the reference may hang)")
    args = parser.parse_args()
    ours_cmd = args.servesim.split()
    matched, failed, both_failed, hung = 0, [], 0, 0
    for seed in range(args.seed, args.seed + args.count):
        folder = Path(args.out) / f"disagg-{seed}"
        make_case(random.Random(seed), folder, args.backend)
        ref, ref_err = run(args.reference.split(), folder, "reference", args.timeout)
        ours, our_err = run_servesim(ours_cmd, folder, args.timeout)
        hung += ref_err.startswith("no result within")
        if ref is None or ours is None:
            diffs = [] if (ref is None and ours is None) else [f"reference: {ref_err or 'ok'} | servesim: {our_err or 'ok'}"]
            both_failed += not diffs
        else:
            diffs = compare(ref, ours)
        if diffs:
            failed.append(seed)
            print(f"[disagg-{seed}] {len(diffs)} differences, e.g.", *("    " + d for d in diffs[:5]), sep="\n")
        else:
            matched += 1
            if not args.keep_all:
                shutil.rmtree(folder, ignore_errors=True)
    print(f"{matched}/{args.count} cases match ({both_failed} fail in both tools; the reference timed out on "
          f"{hung})" + (f"; failing seeds kept in {args.out}: {failed}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
