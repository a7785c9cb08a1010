"""servesim's account of the agentic requests the reference drops without a word: a request
that ends without completing aborts its play, and what the play had not released yet is listed
in `unreleased.json` with a warning on stderr; the reference's own outputs stay unchanged."""

from __future__ import annotations

import json

from conftest import CASES

from servesim.cli import main

REJECTED = CASES / "traffic" / "agentic_mooncake-vllm-fixed-rejected-parent"
CLEAN = CASES / "traffic" / "agentic_mooncake-vllm-fixed-replicas"


def _predict(case, out, *extra: str) -> int:
    return main(["predict", "-c", str(case / "config.yaml"), "--output-dir", str(out), "--format", "json", *extra])


def test_unreleased_requests_are_listed_with_the_request_that_blocked_them(tmp_path, capsys):
    assert _predict(REJECTED, tmp_path) == 0
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("servesim: warning:")]
    assert len(warnings) == 1
    assert warnings[0].startswith("servesim: warning: 4 agentic requests were never released")
    assert "(2 rejected: r01, r11)" in warnings[0]
    account = json.loads((tmp_path / "unreleased.json").read_text())["unreleased"]
    blocked = {(u["request_id"], u["blocked_by"], u["blocked_by_status"], u["play_id"]) for u in account["requests"]}
    assert blocked == {
        ("r02", "r01", "rejected", "legacy-play:r00"),  # its parent was rejected
        ("r03", "r01", "rejected", "legacy-play:r00"),  # waits for r02, never released
        ("r04", "r01", "rejected", "legacy-play:r00"),  # its parent completed, but after the play was aborted
        ("r12", "r11", "rejected", "legacy-play:r10"),
    }
    assert account["count"] == 4
    prediction = json.loads((tmp_path / "prediction.json").read_text())
    reference = json.loads((REJECTED / "report.json").read_text())
    assert prediction["num_requests"] == reference["num_requests"] == 4  # the reference's count, unchanged
    assert prediction["num_requests"] + account["count"] == prediction["agentic_graph"]["node_count"]


def test_nothing_unreleased_means_no_file_and_no_warning(tmp_path, capsys):
    assert _predict(REJECTED, tmp_path) == 0
    capsys.readouterr()
    assert _predict(CLEAN, tmp_path, "--overwrite") == 0  # --overwrite also clears the old account
    assert "warning" not in capsys.readouterr().err
    assert not (tmp_path / "unreleased.json").exists()
    assert json.loads((tmp_path / "prediction.json").read_text())["incomplete_trajectories"] == 0
