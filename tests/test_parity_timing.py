"""Parity of default (AIConfigurator) timing and default KV capacity with the reference.

* timing cases 01-02 (vLLM 0.24.0, data that the aiconfigurator-core package holds): every
  summary field within 0.5 %; in fact servesim matches them exactly (same rules as
  tests/test_parity.py), which is asserted too;
* replay case 03 and engine case 07 (the reference's default vLLM 0.19.0 data): run against the
  reference's bundled AIC systems directory and match exactly; skipped when the reference is not
  installed (`../shared/reference/install.sh --check`).
"""

from __future__ import annotations

import json
import math
from functools import lru_cache
from pathlib import Path

import pytest
from conftest import CASES, HOST_FIELDS, assert_matches_case

from servesim import simulate
from servesim.config import load_config

TIMING_CASES = [
    "timing/01-qwen32fp8-h200-vllm024/config.yaml",
    "timing/02-llama8b-h100-tp2-vllm024/config.yaml",
]
REFERENCE_DATA_CASES = [
    "replay/03-default-timing-aic/config.yaml",
    "engine/07-default-aic-timing/config.yaml",
    "engine/07-default-aic-timing/config-single.yaml",
]


@lru_cache(maxsize=None)
def _run(case: str, systems: str | None) -> dict:
    config = load_config(CASES / case)
    if systems is not None:
        engine = config.engine.model_copy(update={"aic_systems_path": systems})
        config = config.model_copy(update={"engine": engine})
    return simulate(config, capture_per_request=True).to_dict()


@pytest.mark.parametrize("case", TIMING_CASES)
def test_timing_case_within_half_a_percent(case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SERVESIM_AIC_SYSTEMS_PATH", raising=False)
    report = _run(case, None)
    expected = json.loads((CASES / case).with_name("report.json").read_text())
    for field, want in expected.items():
        if field in HOST_FIELDS:
            continue
        got = report[field]
        if isinstance(want, (int, float)) and not isinstance(want, bool):
            assert math.isclose(got, want, rel_tol=5e-3, abs_tol=1e-9), (field, want, got)
        else:
            assert got == want, (field, want, got)


@pytest.mark.parametrize("case", TIMING_CASES)
def test_timing_case_matches_exactly(case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SERVESIM_AIC_SYSTEMS_PATH", raising=False)
    assert_matches_case(CASES / case, _run(case, None))


@pytest.mark.parametrize("case", REFERENCE_DATA_CASES)
def test_reference_data_case_matches_exactly(case: str, reference_systems: Path) -> None:
    assert_matches_case(CASES / case, _run(case, str(reference_systems)))


def test_reference_default_version_without_its_data_still_runs(monkeypatch: pytest.MonkeyPatch,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    """Without the reference's database, vLLM 0.19.0 falls back to the package's current version."""
    monkeypatch.delenv("SERVESIM_AIC_SYSTEMS_PATH", raising=False)
    with caplog.at_level("WARNING", logger="servesim"):
        report = simulate(load_config(CASES / REFERENCE_DATA_CASES[1])).to_dict()
    assert report["completed_requests"] == 2
    assert any("0.19.0" in r.message and "0.24.0" in r.message for r in caplog.records)
