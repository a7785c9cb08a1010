"""Record AISimulate 0.13's behaviour with the peer G2 fetch (`kv_cache.kvcr`, issue 34).

0.13 pulls a prefix from a peer rank's host tier only when a request carries a KV hint naming
that peer; `aisimulate predict` authors none (the hints come from Dynamo's KV router, and
`--stack dynamo` fails on this build), so a run with `kvcr` equals the same run without it but
for a `kvcr` summary section of zeros. This recorder runs 0.13 as a black box on host-tier
configs with two workers or two attention-DP ranks, each with and without `kvcr`, and stores the
configs, traces, per-request records and the `kvcr` section in ``tests/cases/upstream013/kvcr.json``
for ``tests/upstream013/test_kvcr.py`` (which never runs the reference); it also records which
kvcr configs 0.13 refuses. With ``--compare`` servesim runs every scenario too.

Each scenario starts with one pacer per rank (see ``record_013_offload.py``); the records
compared are those of the other requests.

    python benchmarks/record_013_kvcr.py [--compare]
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
OUT = ROOT / "tests" / "cases" / "upstream013" / "kvcr.json"
BS = 128
PACERS = 2
"""Pacers at the front of every trace (one per rank)."""


def with_kvcr(cfg: dict[str, Any], parallelism: dict[str, int], kvcr: dict[str, Any] | None) -> dict[str, Any]:
    """`cfg` on more ranks, with the peer fetch `kvcr` (None: without it)."""
    cfg = copy.deepcopy(cfg)
    worker = cfg["engine"]["workers"]["aggregated"]
    worker["parallelism"] = parallelism
    if kvcr is not None:
        worker["kv_cache"]["kvcr"] = kvcr
    return cfg


def _trace() -> list[dict[str, Any]]:
    """24 requests every 25 ms over 4 prompt families of 4 shared blocks plus a private tail: the
    family's blocks come back from host memory on one rank, or are cold on the other."""
    out = [PACER, req(1, [901], n=1, o=120)]
    for i in range(24):
        family = [100 * (i % 4 + 1) + b for b in range(4)]
        out.append(req(50 + 25 * i, family + [5000 + i, 6000 + i], n=4 * BS + BS * (i % 2) + 7))
    return out


BASE = config(10, {"num_host_blocks": 24})
SCENARIOS: dict[str, tuple[dict[str, int], dict[str, Any] | None, str]] = {
    "replicas": ({"replicas": 2}, {}, "two workers, default kvcr"),
    "replicas-plain": ({"replicas": 2}, None, "the same without kvcr"),
    "attention-dp": ({"attention_data": 2}, {"latency_to_first_byte_ms": 0.5, "bandwidth_gbps": 5.0},
                     "two attention-DP ranks of one worker, kvcr with its own latency and bandwidth"),
    "attention-dp-plain": ({"attention_data": 2}, None, "the same without kvcr"),
}

VERDICTS: dict[str, dict[str, Any]] = {
    "no-host-tier": {"kv_cache.host_offload": None, "kv_cache.kvcr": {}},
    "with-g3": {"kv_cache.kvcr": {}, "kv_cache.g3_offload": {"scope": "worker_local", "num_g3_blocks": 10}},
    "pipeline": {"kv_cache.kvcr": {}, "parallelism": {"pipeline": 2}},
    "negative-bandwidth": {"kv_cache.kvcr": {"bandwidth_gbps": -1.0}},
    "unknown-key": {"kv_cache.kvcr": {"bandwidth": 1.0}},
    "accepted": {"kv_cache.kvcr": {"latency_to_first_byte_ms": 0.0, "bandwidth_gbps": 0.0}},
}


def verdict_config(changes: dict[str, Any]) -> dict[str, Any]:
    """`BASE` with dotted-path changes of the aggregated worker (None deletes the key)."""
    cfg = copy.deepcopy(BASE)
    for path, value in changes.items():
        node = cfg["engine"]["workers"]["aggregated"]
        parts = path.split(".")
        for part in parts[:-1]:
            node = node[part]
        if value is None:
            node.pop(parts[-1], None)
        else:
            node[parts[-1]] = value
    return cfg


def records(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The compared fields of every request but the pacers, in arrival order."""
    ordered = sorted(report["per_request"], key=lambda r: (r["arrival_time_ms"], r["input_length"],
                                                          r.get("first_admit_ms") or 0.0))
    return [{k: r.get(k) for k in FIELDS} for r in ordered[PACERS:]]


def main() -> int:
    compare = "--compare" in sys.argv
    trace = _trace()
    scenarios = {}
    for name, (parallelism, kvcr, what) in SCENARIOS.items():
        cfg = with_kvcr(BASE, parallelism, kvcr)
        code, report, err = run("0.13", cfg, trace)
        if code:
            print(name, err, file=sys.stderr)
            return 1
        assert report is not None
        scenarios[name] = {"what": what, "config": cfg, "trace": trace, "requests": records(report),
                           "kvcr": report.get("kvcr")}
        line = f"{name}: recorded {len(trace) - PACERS} requests, kvcr section {report.get('kvcr')}"
        if compare:
            _, mine, err = run("servesim", cfg, trace)
            assert mine is not None, err
            ours = records(mine)
            same = sum(a == b for a, b in zip(scenarios[name]["requests"], ours, strict=True))
            line += f", servesim equal on {same}/{len(ours)}, its kvcr section {mine.get('kvcr')}"
            for a, b in zip(scenarios[name]["requests"], ours, strict=True):
                diff = {k: (a[k], b[k]) for k in FIELDS if a[k] != b[k] and k != "admission_history"}
                if diff:
                    print("   ", diff, file=sys.stderr)
        print(line, file=sys.stderr)
    verdicts = {}
    for name, changes in VERDICTS.items():
        code, _, err = run("0.13", verdict_config(changes), trace)
        verdicts[name] = {"changes": changes, "exit_code": code, "message": err.strip().splitlines()[-3:]}
        print(name, code, verdicts[name]["message"], file=sys.stderr)
    OUT.write_text(json.dumps({
        "producer": "aisimulate==0.13.0.dev202610270000000085 predict (benchmarks/record_013_kvcr.py)",
        "scenarios": scenarios, "verdicts": verdicts}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
