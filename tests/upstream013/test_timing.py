"""0.13's pass convention (`compat: upstream-0.13`, docs/timing.md), checked against AISimulate
0.13's recorded runs (`tests/cases/upstream013/timing.json`, recorded by
`benchmarks/record_013_timing.py`; the reference is never run here): fixed, polynomial and AIC
timing; vLLM, SGLang and TensorRT-LLM; aggregated and disaggregated; prompts in one pass or in
chunks; passes that only prefill, only decode, or both."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from cases013 import AIC_REL, assert_reports_match, recorded, run, with_trace

CASES_013 = recorded("timing")["cases"]
RECORD_FIELDS = ("input_length", "output_length", "first_admit_ms", "first_token_ms", "last_token_ms", "ttft_ms",
                 "ttst_ms", "itl_ms", "e2e_latency_ms", "reused_input_tokens", "admission_count")
UPSTREAM_SYSTEMS = Path(os.environ.get("SERVESIM_REFERENCE_HOME", Path.home() / ".cache" / "servesim-reference")) / \
    "dynamo" / "lib" / "python3.11" / "site-packages" / "aisimulate_core" / "systems"
EXACT = sorted(n for n, c in CASES_013.items() if not c["aic"])
AIC = sorted(n for n, c in CASES_013.items() if c["aic"])


def test_the_cases_cover_the_convention() -> None:
    """Every backend, both modes, all three timing kinds, chunked prompts."""
    names = set(CASES_013)
    for part in ("vllm-", "sglang-", "trtllm-", "-pd", "-fixed-", "-poly-", "-aic-", "chunked"):
        assert any(part in n for n in names), part
    assert len(AIC) >= 5


@pytest.mark.parametrize("name", EXACT)
def test_fixed_and_polynomial_runs_match_013_field_for_field(name: str, tmp_path: Path) -> None:
    """Every summary field both report and every request's admission and token times equal 0.13's."""
    case = CASES_013[name]
    ours = run(with_trace(case["config"], case["trace"], tmp_path))
    assert_reports_match(ours, case["report"], RECORD_FIELDS)


@pytest.mark.skipif(not UPSTREAM_SYSTEMS.is_dir(), reason="0.13's AIC database not installed")
@pytest.mark.parametrize("name", AIC)
def test_aic_runs_match_013_on_its_database(name: str, tmp_path: Path) -> None:
    """AIC-timed on 0.13's database: every field within 0.5 % (in fact within a few ns: servesim
    rounds a decode step to whole nanoseconds before adding the Q/K-norm latency)."""
    case = CASES_013[name]
    ours = run(with_trace(case["config"], case["trace"], tmp_path), aic_systems_path=str(UPSTREAM_SYSTEMS))
    assert_reports_match(ours, case["report"], RECORD_FIELDS, rel=AIC_REL)


@pytest.mark.parametrize("name", ["vllm-fixed-lone", "vllm-fixed-chunked", "sglang-fixed-mixed"])
def test_the_reference_convention_is_one_decode_later(name: str, tmp_path: Path) -> None:
    """Under `compat: reference` (0.1.0.dev2) a prompt's completion is charged a decode phase and
    its first token comes at the end of it: 5 ms (`decode_ms`) later than in 0.13."""
    case = CASES_013[name]
    ours = run(with_trace(case["config"], case["trace"], tmp_path), compat="reference")
    first = min(case["report"]["per_request"], key=lambda r: r["arrival_time_ms"])
    mine = min(ours["per_request"], key=lambda r: r["arrival_time_ms"])
    assert mine["ttft_ms"] - first["ttft_ms"] == 5.0
