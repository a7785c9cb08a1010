"""Parity with the reference: every supported case reproduces the reference's report.

Summary fields are compared exactly, except the means and standard deviations, which the
reference accumulates in a run-dependent order (1e-12 relative); per-request records are matched
by (session_id, turn_index) and compared field by field (uuids excepted).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from servesim import simulate
from servesim.config import load_config
from servesim.errors import SimulationError

CASES = Path(__file__).parent / "cases"
HOST_FIELDS = {"wall_time_ms", "processed_tokens_per_s", "processed_output_tokens_per_s"}

SUPPORTED = [
    "replay/01-fixed-synthetic-concurrency/config.yaml",
    "replay/02-polynomial-poisson-sla/config.yaml",
    "replay/04-replicas-constant-rate/config.yaml",
    "replay/05-mooncake-prefix-cache/config.yaml",
    "replay/06-mooncake-sessions-trace-speedup/config.yaml",
    "replay/07-mooncake-sessions-concurrency/config.yaml",
    "replay/08-mooncake-delta/config.yaml",
    "replay/09-synthetic-session-shared-prefix/config.yaml",
    "replay/10-max-virtual-time-cap/config.yaml",
    "replay/11-disagg-kv-transfer/config.yaml",
    "replay/11-disagg-kv-transfer/config-destination-missing.yaml",
    "replay/12-engine-limits/config.yaml",
    "engine/01-vllm-fixed-basics/config.yaml",
    "engine/02-vllm-preemption/config.yaml",
    "engine/02-vllm-preemption/config-noprefix.yaml",
    "engine/03-vllm-prefix-cache-polynomial/config.yaml",
    "engine/03-vllm-prefix-cache-polynomial/config-small-kv.yaml",
    "engine/04-sglang-fixed/config.yaml",
    "engine/05-trtllm-no-evict/config.yaml",
    "engine/05-trtllm-no-evict/config-vllm-control.yaml",
    "engine/06-attention-dp-barrier/config.yaml",
    "engine/10-sglang-disagg/config-507.yaml",
    "engine/10-sglang-disagg/config-510.yaml",
    "engine/10-sglang-disagg/config-516.yaml",
    "engine/10-sglang-disagg/config-521.yaml",
    "engine/11-vllm-disagg-decode-never-fits/config-712.yaml",
]


def _expected(config: Path, kind: str, ext: str) -> Path:
    return config.with_name(config.name.replace("config", kind, 1)).with_suffix(ext)


def assert_same_value(key: str, expected: object, actual: object) -> None:
    if isinstance(expected, float) and key.split("_", 1)[0] in ("mean", "std"):
        assert math.isclose(actual, expected, rel_tol=1e-12, abs_tol=1e-12), (key, expected, actual)
    else:
        assert actual == expected and type(actual) is type(expected), (key, expected, actual)


def assert_matches_reference(config: Path, report: dict) -> None:
    expected = json.loads(_expected(config, "report", ".json").read_text())
    assert set(report) - {"per_request"} == set(expected)
    for key, value in expected.items():
        if key not in HOST_FIELDS:
            assert_same_value(key, value, report[key])
    want = [json.loads(line) for line in _expected(config, "requests", ".jsonl").read_text().splitlines()]
    got = {(r["session_id"], r["turn_index"]): r for r in report["per_request"]}
    assert len(got) == len(want)
    for record in want:
        mine = got[(record["session_id"], record["turn_index"])]
        assert set(mine) == set(record)
        for field, value in record.items():
            if field != "uuid":
                assert mine[field] == value, (record["session_id"], field, value, mine[field])


@pytest.mark.parametrize("case", SUPPORTED)
def test_case_matches_reference(case: str) -> None:
    config = CASES / case
    report = simulate(load_config(config), capture_per_request=True).to_dict()
    assert_matches_reference(config, report)


def test_overlong_vllm_request_fails_like_the_reference_on_request() -> None:
    config = CASES / "engine/05-trtllm-no-evict/config-vllm-overlong.yaml"
    expected = (CASES / "engine/05-trtllm-no-evict/stderr-vllm-overlong.txt").read_text()
    assert "effect-free zero-duration pass with 1 in-flight requests remaining" in expected
    with pytest.raises(SimulationError, match="effect-free zero-duration pass with 1 in-flight"):
        simulate(load_config(config), unservable="fail")


def test_overlong_vllm_request_is_rejected_with_a_reason_by_default() -> None:
    config = CASES / "engine/05-trtllm-no-evict/config-vllm-overlong.yaml"
    report = simulate(load_config(config), capture_per_request=True).to_dict()
    (record,) = report["per_request"]
    assert record["terminal_status"] == "rejected" and report["completed_requests"] == 0
    assert "more than the 10 a rank has" in record["rejection_reason"]
    assert record["output_length"] > 0, "it ran until its tokens outgrew the pool"
