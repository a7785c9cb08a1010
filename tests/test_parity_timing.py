"""Parity of default (AIConfigurator) timing and default KV capacity with the reference.

* timing cases 01-02 (vLLM 0.24.0, data that the aiconfigurator-core package holds): every
  summary field within 0.5 %; in fact servesim matches them exactly (same rules as
  tests/test_parity.py), which is asserted too;
* replay case 03, engine case 07 and the `defaults/` cases (no `backend_version`: the reference's
  defaults vLLM 0.19.0, SGLang 0.5.10 and TRT-LLM 1.3.0rc10 on h100_sxm and h200_sxm, data only
  the reference's own database holds): run out of the box — servesim's default database is the
  reference's, fetched into its cache on first use (`servesim.perf.aicdata`) — and match exactly.
"""

from __future__ import annotations

import json
import math
from functools import lru_cache

import pytest
from conftest import CASES, HOST_FIELDS, assert_matches_case, reference_config

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
    *sorted(str(p.relative_to(CASES)) for p in (CASES / "defaults").glob("*/config.yaml")),
]


@lru_cache(maxsize=None)
def _run(case: str) -> dict:
    return simulate(reference_config(CASES / case), capture_per_request=True).to_dict()


@pytest.mark.parametrize("case", TIMING_CASES)
def test_timing_case_within_half_a_percent(case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SERVESIM_AIC_SYSTEMS_PATH", raising=False)
    report = _run(case)
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
    assert_matches_case(CASES / case, _run(case))


def test_defaults_cover_every_backend_on_h100_and_h200() -> None:
    configs = [load_config(CASES / case).engine for case in REFERENCE_DATA_CASES if case.startswith("defaults/")]
    assert {(e.backend, e.hardware) for e in configs} == {
        (b, h) for b in ("vllm", "sglang", "trtllm") for h in ("h100_sxm", "h200_sxm")}
    assert all(e.backend_version is None for e in configs)


@pytest.mark.parametrize("case", REFERENCE_DATA_CASES)
def test_reference_data_case_matches_exactly(case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SERVESIM_AIC_SYSTEMS_PATH", raising=False)
    assert_matches_case(CASES / case, _run(case))
