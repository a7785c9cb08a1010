"""Record AISimulate 0.13's cluster-shared host KV pool (`host_offload.scope: cluster_shared`, issue 34).

Runs the upstream 0.13 build as a black box on small vLLM configs with two workers (or two
attention-DP ranks) sharing one host pool, and stores each config, trace and 0.13's per-request
records in ``tests/cases/upstream013/shared.json`` for ``tests/upstream013/test_cluster_shared.py``
(which never runs the reference). Requests are placed round robin, so a prompt stored by one
worker comes back on the other. With ``--compare`` servesim runs every scenario too.

Each trace starts with one pacer per worker (see ``record_013_offload.py``); the records compared
are those of the other requests.

    python benchmarks/record_013_shared.py [--compare]
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from record_013_offload import FIELDS, PACER, config, req, run  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "cases" / "upstream013" / "shared.json"
BS = 128
A, B, C, D = [1, 2, 3, 4], [11, 12, 13, 14], [21, 22, 23, 24], [31, 32, 33, 34]
PACERS = [PACER, req(1, [901], n=1, o=120)]


def shared(blocks: int, parallelism: dict[str, int], **host: Any) -> dict[str, Any]:
    """`blocks` GPU blocks per rank, the ranks of `parallelism` sharing one host pool `host`."""
    cfg = config(blocks, {"scope": "cluster_shared", **host})
    cfg["engine"]["workers"]["aggregated"]["parallelism"] = parallelism
    return cfg


def shared_disk(host_blocks: int, **g3: Any) -> dict[str, Any]:
    """Two workers, each with `host_blocks` host blocks, sharing one disk pool `g3`."""
    cfg = config(8, {"num_host_blocks": host_blocks})
    worker = cfg["engine"]["workers"]["aggregated"]
    worker["parallelism"] = {"replicas": 2}
    worker["kv_cache"]["g3_offload"] = {"scope": "cluster_shared", **g3}
    return cfg


def _pressure() -> list[dict[str, Any]]:
    """24 requests every 25 ms over 4 prompt families plus a private tail, on two workers."""
    out = list(PACERS)
    for i in range(24):
        family = [100 * (i % 4 + 1) + b for b in range(4)]
        out.append(req(50 + 25 * i, family + [5000 + i, 6000 + i], n=4 * BS + BS * (i % 2) + 7))
    return out


TWO = {"replicas": 2}
SLOW = {"shared_h2d_bandwidth_gbps": 0.01, "latency_to_first_byte_ms": 2.0}
SCENARIOS: dict[str, tuple[dict[str, Any], list[dict[str, Any]], str]] = {
    "cross-worker": (shared(8, TWO, num_host_blocks=100),
                     [*PACERS, req(100, A), req(200, B), req(300, B), req(400, A)],
                     "a prompt one worker computed comes back from the shared pool on the other"),
    "shared-link": (shared(8, TWO, num_host_blocks=100, h2d_bandwidth_gbps=0.02, **SLOW),
                    [*PACERS, req(100, A), req(200, B), req(300, B), req(400, A)],
                    "loads at shared_h2d_bandwidth_gbps (not h2d_bandwidth_gbps): 2 + 51.2 ms"),
    "link-shared-together": (shared(8, TWO, num_host_blocks=100, **SLOW),
                             [*PACERS, req(100, A), req(150, B), req(300, B), req(301, A)],
                             "two workers' loads at once share the link: both take about twice as long"),
    "link-shared-staggered": (shared(8, TWO, num_host_blocks=100, **SLOW),
                              [*PACERS, req(100, A), req(150, B), req(300, B), req(331, A)],
                              "the second load starts 31 ms later: the first ends at 373.4 ms, not 353.2"),
    "one-worker-together": (shared(10, {"replicas": 1}, num_host_blocks=100, shared_h2d_bandwidth_gbps=0.05,
                                   latency_to_first_byte_ms=14.0),
                            [PACER, req(1, [902], n=1, o=4), req(100, A, n=2 * BS), req(150, B, n=2 * BS), req(200, D),
                             req(250, C), req(300, A + [5], n=2 * BS + 1), req(300, B + [15], n=2 * BS + 1)],
                            "one worker's two loads at once share the link too (both admitted at 325 ms)"),
    "pool-overflow": (shared(8, TWO, num_host_blocks=8),
                      [*PACERS, req(100, A), req(200, B), req(300, C), req(400, B), req(500, A), req(600, C)],
                      "the pool holds 8 blocks in all: the oldest prompt is gone"),
    "attention-dp": (shared(8, {"attention_data": 2}, num_host_blocks=100, **SLOW),
                     [*PACERS, req(100, A), req(150, B), req(300, B), req(331, A)],
                     "two attention-DP ranks of one worker share the pool and its link"),
    "pressure": (shared(10, TWO, num_host_blocks=24), _pressure(),
                 "24 requests over 4 prefixes on two workers, the GPU pools overflowing"),
    "g3-cross-worker": (shared_disk(4, num_g3_blocks=100),
                        [*PACERS, req(100, A), req(200, B), req(300, C), req(400, A)],
                        "a prompt one worker wrote to the shared disk is read back by the other "
                        "(4 cross-worker blocks, at the lower of read and shared read bandwidth)"),
    "g3-shared-link": (shared_disk(4, num_g3_blocks=100, shared_read_bandwidth_gbps=0.01),
                       [*PACERS, req(100, A), req(150, B), req(200, C), req(250, D), req(400, B), req(400, A)],
                       "two workers' disk reads at once share the link (transfer_ms 101.5 each, not 51.3)"),
    "g3-pool-overflow": (shared_disk(4, num_g3_blocks=8),
                         [*PACERS, req(100, A), req(200, B), req(300, C), req(400, A), req(500, B)],
                         "the shared disk holds 8 blocks in all: 12 evictions, nothing left to read back"),
}


def records(report: dict[str, Any], pacers: int) -> list[dict[str, Any]]:
    """The compared fields of every request but the pacers, in arrival order."""
    ordered = sorted(report["per_request"], key=lambda r: (r["arrival_time_ms"], r["input_length"],
                                                          r.get("first_admit_ms") or 0.0))
    return [{k: r.get(k) for k in FIELDS} for r in ordered[pacers:]]


def main() -> int:
    compare = "--compare" in sys.argv
    scenarios = {}
    for name, (cfg, trace, what) in SCENARIOS.items():
        pacers = 2
        code, report, err = run("0.13", cfg, trace)
        if code:
            print(name, err, file=sys.stderr)
            return 1
        assert report is not None
        scenarios[name] = {"what": what, "config": copy.deepcopy(cfg), "trace": trace, "pacers": pacers,
                           "requests": records(report, pacers), "g3_offload": report.get("g3_offload")}
        line = f"{name}: recorded {len(trace) - pacers} requests"
        if compare:
            _, mine, err = run("servesim", cfg, trace)
            assert mine is not None, err
            ours = records(mine, pacers)
            same = sum(a == b for a, b in zip(scenarios[name]["requests"], ours, strict=True))
            line += f", servesim equal on {same}/{len(ours)}"
            if mine.get("g3_offload") != report.get("g3_offload"):
                line += f", g3_offload 0.13 {report.get('g3_offload')} servesim {mine.get('g3_offload')}"
            for a, b in zip(scenarios[name]["requests"], ours, strict=True):
                diff = {k: (a[k], b[k]) for k in FIELDS if a[k] != b[k] and k != "admission_history"}
                if diff:
                    print("   ", diff, file=sys.stderr)
        print(line, file=sys.stderr)
    OUT.write_text(json.dumps({
        "producer": "aisimulate==0.13.0.dev202610270000000085 predict (benchmarks/record_013_shared.py)",
        "scenarios": scenarios}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
