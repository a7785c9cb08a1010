"""An agentic warm-up whose preparation request cannot complete, as AISimulate 0.13 runs it
(tests/cases/weka_aborted, recorded by `benchmarks/weka_side_by_side.py --cases
tests/cases/weka_aborted --record`; P/D pools, no timing shift).

0.13 aborts the preparation at the first preparation request that ends without completing: no
lane sends another, the ones in flight finish, the barrier never falls and the measured replay
never runs. The `agentic_phases` block says so (phase `aborted`, the failure's reason and UUID,
`finished_at_ms` when the server was quiescent), the report is saved and the run fails (exit 1).

Not compared: the latency and throughput fields of the empty summary, which 0.13 gives as null
and servesim, like 0.1.0.dev2 for a run where nothing completed, as 0.0.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import CASES, reference_config

from servesim import simulate

ABORTED = sorted((CASES / "weka_aborted").glob("*/config.yaml"))
COUNTS = ("num_requests", "completed_requests", "total_input_tokens", "total_output_tokens", "total_trajectories",
          "completed_trajectories", "incomplete_trajectories", "duration_ms", "prefill_worker_seconds",
          "decode_worker_seconds", "gpu_hours", "agentic_snapshots", "agentic_graph", "agentic_lanes")


def test_there_are_aborted_cases() -> None:
    assert len(ABORTED) >= 3
    failing = {json.loads((c.parent / "report.json").read_text())["agentic_phases"]["failure_request_id"]
               for c in ABORTED}
    assert len(failing) >= 2  # the first request of lane 0, and one of another lane


@pytest.mark.parametrize("config", ABORTED, ids=[c.parent.name for c in ABORTED])
def test_an_aborted_preparation_is_reported_as_upstream(config: Path) -> None:
    report = simulate(reference_config(config), capture_per_request=True).to_dict()
    expected = json.loads((config.parent / "report.json").read_text())
    assert report["agentic_phases"] == expected["agentic_phases"]
    assert report["agentic_phases"]["phase"] == "aborted" and report["agentic_phases"]["profile_start_ms"] is None
    for key in COUNTS:
        assert report[key] == expected[key], key
    if "agentic_profile" in expected:
        assert report["agentic_profile"] == expected["agentic_profile"]
    assert report["per_request"] == [] == [json.loads(x) for x in (config.parent / "requests.jsonl").read_text().split()]
    phases = report["agentic_phases"]
    failed = next(r for r in phases["requests"] if r["uuid"] == phases["failure_request_id"])
    assert failed["terminal_status"] == "rejected" and phases["failure_reason"].endswith("Rejected")
    sent = [r for r in phases["requests"] if r["dispatched_at_ms"] is not None]
    assert phases["finished_at_ms"] == max(r["quiescent_at_ms"] for r in sent)
    # nothing is sent after the failure
    assert all(r["dispatched_at_ms"] <= failed["causal_terminal_at_ms"] for r in sent)


def test_the_cli_saves_the_report_and_fails(tmp_path: Path) -> None:
    config = ABORTED[0]
    out = tmp_path / "out"
    result = subprocess.run([sys.executable, "-m", "servesim", "predict", "-c", str(config), "--format", "json",
                             "--compat", "reference", "--output-dir", str(out), "--capture-per-request"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 1, result.stderr
    assert "agentic preparation aborted: preparation request ended with Rejected" in result.stderr
    assert "primer:0" in result.stderr and "prediction.json" in result.stderr
    saved = json.loads((out / "prediction.json").read_text())
    assert saved["agentic_phases"]["phase"] == "aborted"
