"""Run the reference's direct execution specs through servesim and compare with its reports.

A direct spec (what `reference/python.sh cases/engine/08-direct-runtime-knobs/run_direct.py`
feeds the reference's native runtime) is one aggregated worker, rank knobs the public YAML may
not expose, and inline requests with explicit token ids or lengths. `spec_config` turns it into a
servesim config (using servesim's extensions for those knobs), `spec_workload` into a workload
with the same tokens and arrival times, replayed with `simulate(..., workload=...)`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from conftest import HOST_FIELDS, assert_same_value

from servesim import simulate
from servesim.perf.energy import POWER_FIELDS
from servesim.report.summary import SERVESIM_FIELDS, SERVESIM_RECORD_FIELDS
from servesim.traffic.workload import Session, Turn, Workload

RECORD_SKIP = {"uuid", "request_id", "session_id", "turn_index", *SERVESIM_RECORD_FIELDS}
PRIVATE_BASE = 1 << 40
"""Token values for spec requests given only a length (unique per request, as in the reference)."""


def spec_config(spec: dict[str, Any], path: Path) -> dict[str, Any]:
    """The servesim config of a direct spec's single aggregated worker (its requests, from the
    spec at `path`, arrive at their own times)."""
    rank = spec["engine"]["rank"]
    scheduler: dict[str, Any] = {"max_batched_tokens": rank["max_num_batched_tokens"],
                                 "max_sequences": rank["max_num_seqs"]}
    if rank["backend"] == "sglang":
        scheduler["sglang"] = rank.get("sglang") or {}
    if "preemption_mode" in rank:
        scheduler["preemption_mode"] = rank["preemption_mode"]
    worker: dict[str, Any] = {
        "parallelism": {"attention_data": spec["engine"]["dp_size"]},
        "scheduler": scheduler,
        "kv_cache": {"block_size": rank["block_size"], "prefix_caching": rank.get("enable_prefix_caching", True),
                     "capacity": {"type": "fixed", "blocks": rank["num_gpu_blocks"]}},
        "timing": dict(rank["timing_model"]),
    }
    if "aic_nextn" in rank:
        rates = rank.get("aic_nextn_accept_rates")
        worker["speculative"] = {
            "num_speculative_tokens": rank["aic_nextn"],
            "acceptance_rates": [float(x) for x in rates.split(",")] if rates else None,
            "seed": rank.get("aic_mtp_seed", 42),
        }
    engine: dict[str, Any] = {"model": "m", "hardware": "h200_sxm", "backend": rank["backend"],
                              "workers": {"aggregated": worker}}
    if rank["backend"] == "vllm":
        engine["context_length"] = rank.get("max_model_len") or 1 << 40
    traffic: dict[str, Any] = {"source": {"type": "trace", "paths": [str(path)]}, "load": {"type": "trace_timestamps"}}
    if spec.get("max_sim_time_ms") is not None:
        traffic["stop"] = {"max_virtual_time_seconds": spec["max_sim_time_ms"] / 1000}
    return {"engine": engine, "traffic": traffic}


def spec_workload(spec: dict[str, Any]) -> Workload:
    """One single-turn session per spec request, with its tokens and arrival time."""
    sessions = []
    for i, request in enumerate(spec["requests"]):
        ids = request.get("input_token_ids")
        n = request["input_tokens"]
        if ids is None:
            ids = list(range(PRIVATE_BASE * (i + 1), PRIVATE_BASE * (i + 1) + n))
        turn = Turn(block_values=ids, block_size=1, input_length=n,
                    max_output_tokens=request["output_tokens"])
        sessions.append(Session(request["id"], [turn], float(request["arrival_time_ms"])))
    return Workload(sessions, origin_ms=0.0)


def run_spec(path: Path, **options: Any) -> dict[str, Any]:
    """servesim's report (with per-request records) for the direct spec at `path`."""
    spec = json.loads(path.read_text())
    return simulate(spec_config(spec, path), capture_per_request=True, workload=spec_workload(spec),
                    **options).to_dict()


def assert_matches_reference(report: dict[str, Any], expected: dict[str, Any]) -> None:
    """Every per-request record (matched by request id) and summary field equals the reference's."""
    expected = dict(expected)
    report = dict(report)
    want = {r["request_id"]: r for r in expected.pop("per_request", [])}  # absent: no request ended
    got = {r["session_id"]: r for r in report.pop("per_request")}
    assert set(got) == set(want)
    for rid, record in want.items():
        mine = got[rid]
        assert set(mine) - RECORD_SKIP == set(record) - RECORD_SKIP, rid
        for field, value in record.items():
            if field not in RECORD_SKIP:
                assert_same_value(f"{rid}.{field}", value, mine[field])
    assert set(report) - set(SERVESIM_FIELDS) - set(POWER_FIELDS) == set(expected)
    for key, value in expected.items():
        if key not in HOST_FIELDS:
            assert_same_value(key, value, report[key])
