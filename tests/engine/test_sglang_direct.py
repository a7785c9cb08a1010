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

CASE = Path(__file__).parent.parent / "cases" / "engine" / "08-direct-runtime-knobs"
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
