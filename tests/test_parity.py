"""Parity with the reference: every supported case reproduces the reference's report.

Summary fields are compared exactly, except the means and standard deviations, which the
reference accumulates in a run-dependent order (1e-12 relative); per-request records are matched
by (session_id, turn_index) and compared field by field (uuids excepted).
"""

from __future__ import annotations

import pytest
from conftest import CASES, assert_matches_case, reference_config, run_case

from servesim import simulate
from servesim.errors import SimulationError

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


@pytest.mark.parametrize("case", SUPPORTED)
def test_case_matches_reference(case: str) -> None:
    config = CASES / case
    assert_matches_case(config, run_case(config))


def test_overlong_vllm_request_fails_like_the_reference_on_request() -> None:
    config = CASES / "engine/05-trtllm-no-evict/config-vllm-overlong.yaml"
    expected = (CASES / "engine/05-trtllm-no-evict/stderr-vllm-overlong.txt").read_text()
    assert "effect-free zero-duration pass with 1 in-flight requests remaining" in expected
    with pytest.raises(SimulationError, match="effect-free zero-duration pass with 1 in-flight"):
        simulate(reference_config(config))


def test_overlong_vllm_request_is_rejected_with_a_reason_by_default() -> None:
    config = CASES / "engine/05-trtllm-no-evict/config-vllm-overlong.yaml"
    report = run_case(config, compat=None)
    (record,) = report["per_request"]
    assert record["terminal_status"] == "rejected" and report["completed_requests"] == 0
    assert "more than the 10 a rank has" in record["rejection_reason"]
    assert record["output_length"] > 0, "it ran until its tokens outgrew the pool"


@pytest.mark.parametrize("case", ["replay/12-engine-limits/config.yaml", "replay/10-max-virtual-time-cap/config.yaml",
                                  "engine/11-vllm-disagg-decode-never-fits/config-712.yaml"])
def test_reference_fields_flag_writes_exactly_the_reference_fields(case: str, tmp_path, monkeypatch) -> None:
    """`predict --reference-fields` leaves out servesim's additions, so a strict key-by-key
    comparison with the reference's outputs (as `compare_reports.py` makes) finds nothing extra;
    without the flag those additions are there (the cases hold rejected or unfinished requests)."""
    import json

    from servesim.cli import main

    config = CASES / case
    monkeypatch.chdir(config.parent)
    expected = json.loads(config.with_name(config.name.replace("config", "report").replace(".yaml", ".json"))
                          .read_text())
    for flag, out in (([], tmp_path / "plain"), (["--reference-fields"], tmp_path / "strict")):
        assert main(["predict", "-c", config.name, "--capture-per-request", "--output-dir", str(out),
                     "--format", "json", *flag]) == 0
    strict = json.loads((tmp_path / "strict" / "prediction.json").read_text())
    plain = json.loads((tmp_path / "plain" / "prediction.json").read_text())
    reference_records = [json.loads(line) for line in
                         config.with_name(config.name.replace("config", "requests").replace(".yaml", ".jsonl"))
                         .read_text().splitlines()]
    expected.pop("per_request", None)
    assert set(strict) - {"per_request"} == set(expected)
    from servesim.perf.energy import POWER_FIELDS

    assert set(plain) - set(strict) == {"rejected_requests", "incomplete_requests", "provenance", *POWER_FIELDS}
    strict_lines = (tmp_path / "strict" / "requests.jsonl").read_text().splitlines()
    for line, reference in zip(strict_lines, reference_records, strict=True):
        assert set(json.loads(line)) == set(reference)
    assert any("rejection_reason" in record for record in plain["per_request"]) == (
        plain["rejected_requests"] > 0)
