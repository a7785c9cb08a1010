"""Parity of the agentic and Dynamo trace formats with the reference (tests/cases/traffic).

Each case folder holds a config, its trace files and the reference's report.json and
requests.jsonl, produced by `benchmarks/difftest_traces.py --make-case` (vLLM and SGLang, fixed
and polynomial timing, replicas, small KV pools). Summary fields — the trajectory fields and
the `agentic_graph` block (whose digest covers the whole lowered graph) included — are compared
exactly except means and standard deviations (1e-12 relative); records are matched by (request
id, session, turn) and compared field by field, agentic request UUIDs included (the reference
numbers them deterministically).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import (
    CASES as ALL_CASES,
    HOST_FIELDS,
    assert_same_record_fields,
    assert_same_summary_fields,
    assert_same_value,
    reference_config,
)

from servesim import simulate

CASES = sorted((ALL_CASES / "traffic").glob("*/config.yaml"))


def _key(record: dict) -> tuple:
    return record.get("request_id"), record["session_id"], record["turn_index"]


@pytest.mark.parametrize("config", CASES, ids=[c.parent.name for c in CASES])
def test_trace_case_matches_reference(config: Path) -> None:
    report = simulate(reference_config(config), capture_per_request=True).to_dict()
    expected = json.loads((config.parent / "report.json").read_text())
    assert_same_summary_fields(report, expected)
    for key, value in expected.items():
        if key not in HOST_FIELDS:
            assert_same_value(key, value, report[key])
    want = [json.loads(line) for line in (config.parent / "requests.jsonl").read_text().splitlines()]
    got = {_key(r): r for r in report["per_request"]}
    assert len(got) == len(report["per_request"]) == len(want)
    if "request_id" in want[0]:  # agentic records are sorted by request id, as in the reference
        assert [_key(r) for r in report["per_request"]] == [_key(r) for r in want]
    for record in want:
        mine = got[_key(record)]
        assert_same_record_fields(mine, record)
        for field, value in record.items():
            if field != "uuid" or "request_id" in record:
                assert mine[field] == value, (_key(record), field, value, mine[field])


def test_every_format_has_cases() -> None:
    formats = {c.parent.name.split("-")[0] for c in CASES}
    assert formats == {"agentic_mooncake", "agentic_v2", "applied_compute_agentic", "dynamo", "dynamo_agentic"}
    assert len(CASES) >= 15
