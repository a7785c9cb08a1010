"""Rules of `servesim validate`'s error math (studies/validate.py): the signed error is
100·(simulated / measured − 1); statistics are the NaN-free mean and linear-interpolated
percentiles; the table's mean absolute error averages |error| over the runs (and over runs and
metrics); numbers of at least 10 get one decimal, smaller ones two; a simulated request enters
only when it completed with tokens, with a TPOT from two tokens; the section markers both must
be present to splice."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

import servesim.api
from servesim.studies import validate


def test_the_signed_error_is_positive_when_servesim_is_slower():
    assert validate.signed_error(110.0, 100.0) == pytest.approx(10.0)
    assert validate.signed_error(90.0, 100.0) == pytest.approx(-10.0)
    assert validate.signed_error(100.0, 100.0) == 0.0


def test_describe_interpolates_and_drops_nans():
    got = validate.describe(np.array([0.0, np.nan, 10.0]))
    assert got == {"mean": 5.0, "p50": 5.0, "p90": 9.0, "p99": pytest.approx(9.9)}


def _result(name: str, errors: dict[str, dict[str, float]]) -> validate.RunResult:
    """A run measured at 100 ms everywhere, simulated at 100·(1 + error/100)."""
    flat = {m: dict.fromkeys(validate.STATS, 100.0) for m in validate.METRICS}
    res = validate.RunResult(name, 3, flat)
    for mode in validate.MODES:
        res.simulated[mode] = {m: dict.fromkeys(validate.STATS, 100.0 + errors[mode].get(m, 0.0))
                               for m in validate.METRICS}
    return res


def test_the_mean_absolute_error_averages_over_runs_and_metrics():
    a = _result("a", {"reference": {"ttft": 10.0}, "default": {"ttft": -4.0, "tpot": 6.0}})
    b = _result("b", {"reference": {"ttft": -30.0}, "default": {"e2e": 3.0}})
    assert a.error("reference", "ttft") == pytest.approx(10.0) and a.error("default", "ttft", "p99") == pytest.approx(-4.0)
    text = validate.render([a, b], detail=False)
    row = next(line for line in text.splitlines() if line.startswith("| mean absolute error"))
    assert row == "| mean absolute error | 20.0 % | 2.0 % | 0.0 % | 3.0 % | 0.0 % | 1.5 % |"
    assert "reference 6.7 %, default 2.2 % mean absolute error." in text
    assert "| a | +10.0 % | -4.0 % | +0.0 % | +6.0 % | +0.0 % | +0.0 % |" in text


def test_detail_rows_use_one_decimal_from_ten():
    res = _result("a", {"reference": {"ttft": -90.5}, "default": {}})
    res.measured["ttft"]["mean"] = 10.0
    text = validate.render([res])
    assert "| TTFT mean (ms) | 10.0 | 9.50 | 100.0 |" in text
    assert validate._num(9.999) == "10.00" and validate._num(-12.34) == "-12.3" and validate._num(1234.56) == "1,234.6"


def test_no_results_render_no_average():
    assert "mean absolute error" not in validate.render([])


def test_section_markers_must_both_be_present():
    text = "head\n<!-- v: begin -->\nold\n<!-- v: end -->\ntail\n"
    assert validate.section_text(text, "v", "new\n") == "head\n<!-- v: begin -->\nnew\n<!-- v: end -->\ntail\n"
    assert validate.section_text("head\n<!-- v: begin -->\nold\n", "v", "new\n") == "new\n"
    assert validate.section_text(None, "v", "new\n") == "new\n"


def test_all_finite():
    res = _result("a", {"reference": {}, "default": {}})
    assert validate.all_finite([res])
    res.simulated["default"]["tpot"]["p99"] = math.nan
    assert not validate.all_finite([res])


def test_simulated_requests_count_when_completed_with_tokens(monkeypatch):
    rows = [{"terminal_status": "completed", "output_length": 3, "ttft_ms": 5.0, "first_token_ms": 10.0,
             "last_token_ms": 14.0, "e2e_latency_ms": 9.0},
            {"terminal_status": "completed", "output_length": 1, "ttft_ms": 6.0, "first_token_ms": 11.0,
             "last_token_ms": 11.0, "e2e_latency_ms": 6.0},
            {"terminal_status": "completed", "output_length": 2, "ttft_ms": 7.0, "first_token_ms": 12.0,
             "last_token_ms": 15.0, "e2e_latency_ms": 10.0},
            {"terminal_status": "completed", "output_length": 0, "ttft_ms": None},
            {"terminal_status": "rejected", "output_length": 4, "ttft_ms": 1.0}]
    monkeypatch.setattr(servesim.api, "simulate", lambda config, capture_per_request: SimpleNamespace(per_request=rows))
    got = validate.simulated_latencies({})
    assert got["ttft"].tolist() == [5.0, 6.0, 7.0] and got["e2e"].tolist() == [9.0, 6.0, 10.0]
    assert got["tpot"][0] == 2.0 and math.isnan(got["tpot"][1]) and got["tpot"][2] == 3.0
