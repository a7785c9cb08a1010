"""Parity with the reference's direct execution specs of engine case 08 (SGLang variants).

The reference ran these specs through its native runtime (requests with explicit token ids, SGLang
knobs its YAML does not expose). The adapter below turns a spec into a servesim config (using the
`scheduler.sglang` extension) plus a workload with the same tokens and arrival times, runs it
through `servesim.simulate`, and compares every per-request record and summary field with the
stored `report_<name>.json` (records matched by request id).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

import servesim.build
from servesim import simulate
from servesim.traffic.driver import Driver
from servesim.traffic.workload import Session, Turn, Workload

CASE = Path(__file__).parent.parent / "cases" / "engine" / "08-direct-runtime-knobs"
NAMES = ["sglang_fifo_order", "sglang_lpm_order", "sglang_chunked_prefix_polynomial",
         "sglang_chunk_budget_shared", "sglang_retraction"]
HOST_FIELDS = {"wall_time_ms", "processed_tokens_per_s", "processed_output_tokens_per_s"}
RECORD_SKIP = {"uuid", "request_id", "session_id", "turn_index"}
PRIVATE_BASE = 1 << 40
"""Token values for spec requests given only a length (unique per request, as in the reference)."""


def spec_config(spec: dict[str, Any]) -> dict[str, Any]:
    """The servesim config of a direct spec's single aggregated worker."""
    rank = spec["engine"]["rank"]
    timing = dict(rank["timing_model"])
    worker = {
        "parallelism": {"attention_data": spec["engine"]["dp_size"]},
        "scheduler": {"max_batched_tokens": rank["max_num_batched_tokens"],
                      "max_sequences": rank["max_num_seqs"], "sglang": rank.get("sglang") or {}},
        "kv_cache": {"block_size": rank["block_size"],
                     "capacity": {"type": "fixed", "blocks": rank["num_gpu_blocks"]}},
        "timing": timing,
    }
    engine = {"model": "m", "hardware": "h200_sxm", "backend": rank["backend"],
              "workers": {"aggregated": worker}}
    traffic = {"source": {"type": "synthetic"}, "load": {"type": "concurrency"}, "stop": {"requests": 1}}
    return {"engine": engine, "traffic": traffic}


def spec_driver(spec: dict[str, Any]) -> Driver:
    """One single-turn session per spec request, with its tokens and arrival time."""
    sessions, arrivals = [], []
    for i, request in enumerate(spec["requests"]):
        ids = request.get("input_token_ids")
        n = request["input_tokens"]
        if ids is None:
            ids = list(range(PRIVATE_BASE * (i + 1), PRIVATE_BASE * (i + 1) + n))
        turn = Turn(block_values=ids, block_size=1, input_length=n,
                    max_output_tokens=request["output_tokens"])
        sessions.append(Session(request["id"], [turn]))
        arrivals.append(float(request["arrival_time_ms"]))
    return Driver(Workload(sessions), first_arrivals=arrivals)


def run_spec(name: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    spec = json.loads((CASE / f"spec_{name}.json").read_text())
    driver = spec_driver(spec)
    monkeypatch.setattr(servesim.build.LoweredRun, "make_driver", lambda self: driver)
    return simulate(spec_config(spec), capture_per_request=True).to_dict()


def assert_same(where: str, expected: Any, actual: Any) -> None:
    if isinstance(expected, float) and where.rsplit(".", 1)[-1].split("_", 1)[0] in ("mean", "std"):
        assert math.isclose(actual, expected, rel_tol=1e-12, abs_tol=1e-12), (where, expected, actual)
    else:
        assert actual == expected and type(actual) is type(expected), (where, expected, actual)


@pytest.mark.parametrize("name", NAMES)
def test_direct_spec_matches_reference(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    report = run_spec(name, monkeypatch)
    expected = json.loads((CASE / f"report_{name}.json").read_text())
    want = {r["request_id"]: r for r in expected.pop("per_request")}
    got = {r["session_id"]: r for r in report.pop("per_request")}
    assert set(got) == set(want)
    for rid, record in want.items():
        mine = got[rid]
        assert set(mine) - RECORD_SKIP == set(record) - RECORD_SKIP, rid
        for field, value in record.items():
            if field not in RECORD_SKIP:
                assert_same(f"{rid}.{field}", value, mine[field])
    assert set(report) == set(expected)
    for key, value in expected.items():
        if key not in HOST_FIELDS:
            assert_same(key, value, report[key])


def test_lpm_reorders_and_fifo_does_not(monkeypatch: pytest.MonkeyPatch) -> None:
    fifo = {r["session_id"]: r for r in run_spec("sglang_fifo_order", monkeypatch)["per_request"]}
    lpm = {r["session_id"]: r for r in run_spec("sglang_lpm_order", monkeypatch)["per_request"]}
    assert fifo["r1"]["first_admit_ms"] < fifo["r2"]["first_admit_ms"]
    assert lpm["r2"]["first_admit_ms"] < lpm["r1"]["first_admit_ms"]
    assert lpm["r2"]["reused_input_tokens"] == 64
