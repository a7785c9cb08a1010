#!/usr/bin/env python3
"""Differential test of the engine cores on knobs the YAML does not expose (speculative decoding).

    python3 benchmarks/difftest_engine.py --count 300 [--seed 0] [--out DIR]

Each case is a random direct execution spec — one vLLM, TRT-LLM or SGLang worker (attention DP
1-2), tiny KV pools, small token budgets and sequence limits, SGLang policies and chunk limits,
prefix caching on or off, a vLLM context limit, speculative decoding with 1-4 draft tokens and random acceptance rates — with a handful of
requests sharing prefixes. The reference runs the spec natively (inside its venv, via
../shared/reference/python.sh); servesim runs it through the adapter of the engine parity tests
(tests/engine/direct_specs.py). Every per-request record and summary field is compared. Needs the
reference.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent / "tests" / "engine"), str(HERE.parent / "tests")]
from direct_specs import assert_matches_reference, run_spec  # noqa: E402

PYTHON = HERE.parent.parent / "shared" / "reference" / "python.sh"
RUNNER = """
import json, multiprocessing, sys
from pathlib import Path
from aisimulate import _runtime

def run(spec):
    try:
        report = json.loads(_runtime.run_replay_json(spec.read_text()))
    except Exception as exc:
        report = {"error": str(exc)}
    spec.with_name("report_" + spec.name[5:]).write_text(json.dumps(report))

if __name__ == "__main__":
    for spec in sorted(Path(sys.argv[1]).glob("spec_*.json")):
        child = multiprocessing.Process(target=run, args=(spec,))
        child.start()
        child.join(float(sys.argv[2]))
        if child.is_alive():  # the reference spins for ever on some unservable SGLang workloads
            child.kill()
            spec.with_name("report_" + spec.name[5:]).write_text(json.dumps({"hang": True}))
"""


def random_spec(seed: int) -> dict:
    rnd = random.Random(seed)
    backend = rnd.choice(["vllm", "vllm", "trtllm", "sglang"])
    bs = rnd.choice([1, 4, 8, 16] if backend == "sglang" else [4, 8, 16])
    blocks, nextn = rnd.randint(12, 60) * (16 if bs == 1 else 1), rnd.randint(1, 4)
    rates = ",".join(str(rnd.choice([0.0, 0.3, 0.5, 0.8, 1.0])) for _ in range(rnd.randint(1, nextn)))
    rank = {"backend": backend, "block_size": bs, "num_gpu_blocks": blocks,
            "max_num_batched_tokens": rnd.choice([32, 64, 128, 512, 8192]), "max_num_seqs": rnd.randint(1, 8),
            "timing_model": {"type": "fixed", "prefill_ms": 10.0, "decode_ms": 5.0},
            "aic_nextn": nextn, "aic_nextn_accept_rates": rates, "aic_mtp_seed": rnd.randint(0, 100),
            "enable_prefix_caching": rnd.random() < 0.8}
    capacity = bs * blocks
    if backend == "sglang":
        rank["sglang"] = {"schedule_policy": rnd.choice(["fifo", "lpm"]),
                          "chunked_prefill_size": rnd.choice([64, 256, 8192]),
                          "max_prefill_tokens": rnd.choice([128, 16384])}
    if backend == "vllm" and rnd.random() < 0.3:
        rank["max_model_len"] = rnd.randint(40, capacity)
    shared = [rnd.randint(1, 10**6) for _ in range(capacity)]
    requests = []
    for i in range(rnd.randint(2, 10)):
        n = rnd.randint(1, max(1, capacity // 2))
        k = rnd.randint(0, n) if rnd.random() < 0.5 else 0
        ids = shared[:k] + [10**7 + 1000 * i + j for j in range(n - k)]
        requests.append({"id": f"r{i}", "arrival_time_ms": float(rnd.choice([0, 0, 5, 20, 50, 100, 200])),
                         "output_tokens": rnd.randint(1, max(1, min(60, capacity - n - 2 * max(bs, 8)))),
                         "metadata": None, "input_token_ids": ids, "input_tokens": n})
    return {"version": 1,
            "topology": {"kind": "aggregated", "workers": {"initial_workers": 1, "startup_delay_ms": 0.0}},
            "engine": {"dp_size": rnd.choice([1, 1, 2]), "tensor_parallel_size": 1, "rank": rank},
            "adapters": {"placement": {"provider": "round_robin", "config": None},
                         "scaling": {"provider": "none", "config": None}},
            "max_sim_time_ms": None, "max_in_flight": None, "record_per_request": True, "sla": {},
            "requests": requests}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None, help="keep specs and reports here")
    parser.add_argument("--timeout", type=float, default=20.0, help="seconds before a reference run counts as hung")
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="servesim-difftest-engine-"))
    out.mkdir(parents=True, exist_ok=True)
    seeds = range(args.seed, args.seed + args.count)
    for seed in seeds:
        (out / f"spec_{seed}.json").write_text(json.dumps(random_spec(seed)))
    subprocess.run(["bash", str(PYTHON), "-c", RUNNER, str(out), str(args.timeout)], check=True)
    failures = hangs = 0
    for seed in seeds:
        expected = json.loads((out / f"report_{seed}.json").read_text())
        if expected.get("hang"):
            hangs += 1
            continue
        try:
            report = run_spec(out / f"spec_{seed}.json", unservable="fail")
        except Exception as exc:  # noqa: BLE001 - a failing run is a result to compare
            report = {"error": repr(exc)}
        try:
            if "error" in expected or "error" in report:
                assert ("error" in expected) == ("error" in report), (expected.get("error"), report.get("error"))
            else:
                assert_matches_reference(report, expected)
        except AssertionError as exc:
            failures += 1
            print(f"seed {seed}: MISMATCH {str(exc)[:300]}")
    compared = args.count - hangs
    print(f"{compared - failures}/{compared} match; the reference hung on {hangs} ({out})")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
