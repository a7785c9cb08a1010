"""Parity with the reference's direct execution specs of engine case 08 (SGLang variants).

The reference ran these specs through its native runtime (requests with explicit token ids, SGLang
knobs its YAML does not expose). `direct_specs.py` turns a spec into a servesim config (using the
`scheduler.sglang` extension) plus a workload with the same tokens and arrival times, runs it
through `servesim.simulate`, and compares every per-request record and summary field with the
stored `report_<name>.json` (records matched by request id).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from direct_specs import assert_matches_reference
from direct_specs import run_spec as run_direct_spec

from servesim.errors import RunError

CASE = Path(__file__).parent.parent / "cases" / "engine" / "08-direct-runtime-knobs"
TINY_POOL = Path(__file__).parent.parent / "cases" / "engine" / "13-sglang-lpm-tiny-pool" / "spec_lpm_tiny_pool.json"
NAMES = ["sglang_fifo_order", "sglang_lpm_order", "sglang_chunked_prefix_polynomial",
         "sglang_chunk_budget_shared", "sglang_retraction"]


def run_spec(name: str) -> dict[str, Any]:
    return run_direct_spec(CASE / f"spec_{name}.json")


@pytest.mark.parametrize("name", NAMES)
def test_direct_spec_matches_reference(name: str) -> None:
    expected = json.loads((CASE / f"report_{name}.json").read_text())
    assert_matches_reference(run_spec(name), expected)


def test_lpm_reorders_and_fifo_does_not() -> None:
    fifo = {r["session_id"]: r for r in run_spec("sglang_fifo_order")["per_request"]}
    lpm = {r["session_id"]: r for r in run_spec("sglang_lpm_order")["per_request"]}
    assert fifo["r1"]["first_admit_ms"] < fifo["r2"]["first_admit_ms"]
    assert lpm["r2"]["first_admit_ms"] < lpm["r1"]["first_admit_ms"]
    assert lpm["r2"]["reused_input_tokens"] == 64


def test_lpm_compares_prompts_longer_than_a_tiny_pool() -> None:
    """LPM keys on a waiting prompt's first 32 tokens even when the pool holds fewer (24 here;
    this was an IndexError). The 32-token prompt can never be served: the reference fails at the
    effect-free pass (report_lpm_tiny_pool.json), servesim rejects it — or fails when asked to."""
    reference = json.loads(TINY_POOL.with_name("report_lpm_tiny_pool.json").read_text())
    assert "effect-free zero-duration pass with 4 in-flight requests remaining" in reference["error"]
    with pytest.raises(RunError, match="can never be served"):
        run_direct_spec(TINY_POOL, unservable="fail")
    records = {r["session_id"]: r for r in run_direct_spec(TINY_POOL)["per_request"]}
    assert records["S0"]["terminal_status"] == "rejected" and "do not fit" in records["S0"]["rejection_reason"]
    assert [records[s]["terminal_status"] for s in ("S1", "S2", "S3")] == ["completed"] * 3
