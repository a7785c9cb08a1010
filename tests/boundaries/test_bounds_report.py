"""Report boundaries (docs/metrics.md): percentile ranks round (n−1)·p/100 half away from zero;
the DDSketch percentiles (alpha 0.001) pick the same rank as the exact ones, so they are within
0.1 % of that sample; a request exactly at an SLA bound is within it (goodput: ≤ for TTFT, ITL
and E2E; one-token requests are within every ITL bound); a run-level statistic exactly at its
target meets it."""

from __future__ import annotations

from array import array

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servesim.collect.collector import Admission, RequestRecord
from servesim.report import stats
from servesim.report.sla import verdict_lines, verdicts
from servesim.report.summary import Sla, summarize

# -- percentile ranks ------------------------------------------------------------------------


def test_round_half_away_from_zero():
    assert [stats.round_half_away(x) for x in (0.5, 1.5, 2.5, -2.5, 2.4999999, 3.0, -0.4)] == [1, 2, 3, -3, 2, 3, 0]


@pytest.mark.parametrize(("n", "expected"), [
    (5, {"median": 2, "p75": 3, "p90": 4, "p95": 4, "p99": 4}),     # 4·p: 2, 3, 3.6, 3.8, 3.96
    (11, {"median": 5, "p75": 8, "p90": 9, "p95": 10, "p99": 10}),  # 10·p: 5, 7.5, 9, 9.5, 9.9
    (1, {"median": 0, "p75": 0, "p90": 0, "p95": 0, "p99": 0}),
])
def test_exact_percentiles_take_the_rounded_rank(n, expected):
    values = stats.exact_stats([float(i) for i in reversed(range(n))])
    assert {name: values[name] for name in expected} == {k: float(v) for k, v in expected.items()}


def test_the_sketch_rank_is_the_rounded_rank_for_every_size():
    for n in range(2, 3000):
        for _, p in stats.PERCENTILES:
            assert stats._sketch_rank(n, p) == stats.percentile_rank(n, p), (n, p)


_SAMPLE = st.one_of(st.just(0.0), st.floats(1e-3, 1e6), st.floats(-1e6, -1e-3))


@settings(max_examples=150, deadline=None)
@given(st.lists(_SAMPLE, min_size=2, max_size=60))
def test_sketch_percentiles_are_the_exact_sample_within_alpha(values):
    exact, sketch = stats.exact_stats(values), stats.sketch_stats(values)
    for name, _ in stats.PERCENTILES:
        assert sketch[name] == pytest.approx(exact[name], rel=2.001e-3, abs=0.0), name


def test_weighted_sketch_counts_each_sample_its_weight():
    values = np.array([1.0, 10.0, 100.0])
    counts = np.array([1, 2, 7], dtype=np.int64)
    expanded = stats.sketch_stats([1.0] + [10.0] * 2 + [100.0] * 7)
    weighted = stats.sketch_stats(values, counts)
    assert {name: weighted[name] for name, _ in stats.PERCENTILES} == {name: expanded[name] for name, _ in stats.PERCENTILES}
    # 10 samples: median rank round(4.5) = 5 -> the 6th smallest, 100.
    assert expanded["median"] == pytest.approx(100.0, rel=1e-3)


def test_samples_on_one_side_of_a_bucket_edge():
    """Two samples: the median (rank round(0.5) = 1) is the larger one, not the smaller."""
    lo = stats.sketch_value(100)
    hi = stats.sketch_value(101)
    got = stats.sketch_stats([lo, hi])
    assert got["median"] == pytest.approx(hi, rel=1e-12)
    assert got["median"] != pytest.approx(lo, rel=1e-6)


# -- goodput at the SLA boundary -------------------------------------------------------------

PASS_ENDS = array("d", [10.0, 12.0, 15.0, 20.0, 30.0, 31.0])


def _record(rid: int, arrival: float, spans: list[int]) -> RequestRecord:
    record = RequestRecord(rid, f"s{rid}", 0, arrival, 100, 8)
    record.admissions = [Admission(arrival, 0, "agg")]
    record.status = "completed"
    record.terminal_ms = PASS_ENDS[spans[-1] - 1] if spans else arrival + 1.0
    record.token_spans = list(spans)
    record.output_length = sum(spans[i + 1] - spans[i] for i in range(0, len(spans), 2))
    record.pass_ends = PASS_ENDS
    return record


THREE_TOKENS = _record(0, 0.0, [0, 3])  # tokens at 10, 12, 15: TTFT 10, E2E 15, ITL (15-10)/2 = 2.5


@pytest.mark.parametrize("sla", [Sla(ttft_ms=10.0), Sla(itl_ms=2.5), Sla(e2e_ms=15.0),
                                 Sla(ttft_ms=10.0, itl_ms=2.5, e2e_ms=15.0)],
                         ids=["ttft", "itl", "e2e", "all"])
def test_a_request_exactly_at_the_bound_is_good(sla):
    assert summarize([THREE_TOKENS], {}, 1.0, sla)["goodput_completed_requests"] == 1


@pytest.mark.parametrize("sla", [Sla(ttft_ms=9.999), Sla(itl_ms=2.499), Sla(e2e_ms=14.999)],
                         ids=["ttft", "itl", "e2e"])
def test_a_request_just_past_the_bound_is_not(sla):
    assert summarize([THREE_TOKENS], {}, 1.0, sla)["goodput_completed_requests"] == 0


def test_a_one_token_request_is_within_every_itl_bound():
    one = _record(1, 2.0, [5, 6])
    assert summarize([one], {}, 1.0, Sla(itl_ms=0.0))["goodput_completed_requests"] == 1


def _good(record: RequestRecord, sla: Sla) -> bool:
    """docs/metrics.md 'Goodput', one request written out."""
    n = record.output_length
    if n == 0:
        return sla.e2e_ms is not None and sla.ttft_ms is None and record.terminal_ms - record.arrival_ms <= sla.e2e_ms
    first, last = PASS_ENDS[record.token_spans[0]], PASS_ENDS[record.token_spans[-1] - 1]
    ttft, e2e = max(first - record.arrival_ms, 0.0), last - record.arrival_ms
    itl = (e2e - ttft) / (n - 1) if n > 1 else None
    return ((sla.ttft_ms is None or ttft <= sla.ttft_ms) and (sla.e2e_ms is None or e2e <= sla.e2e_ms)
            and (sla.itl_ms is None or itl is None or itl <= sla.itl_ms))


_ON_THE_GRID = st.none() | st.sampled_from([0.0, 1.0, 2.0, 2.5, 3.0, 5.0, 8.0, 10.0, 12.0, 15.0, 18.0, 20.0, 25.0])


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([0.0, 2.0, 5.0, 10.0]), st.integers(0, 6), st.integers(0, 6)),
                min_size=1, max_size=8), _ON_THE_GRID, _ON_THE_GRID, _ON_THE_GRID)
def test_goodput_with_bounds_on_the_latency_grid(requests, ttft, itl, e2e):
    """Arrivals and bounds on the grid of pass ends, so latencies often equal a bound exactly."""
    records = []
    for rid, (arrival, a, b) in enumerate(requests):
        lo, hi = min(a, b), max(a, b)
        records.append(_record(rid, arrival, [lo, hi] if hi > lo else []))
    sla = Sla(ttft_ms=ttft, itl_ms=itl, e2e_ms=e2e)
    got = summarize(records, {}, 1.0, sla)
    assert got["goodput_completed_requests"] == sum(_good(r, sla) for r in records)


# -- run-level targets -----------------------------------------------------------------------


@pytest.mark.parametrize(("bound", "met"), [(40.0, True), (39.999, False)])
def test_a_run_statistic_exactly_at_its_target_meets_it(bound, met):
    summary = {"num_requests": 3, "completed_requests": 3, "p90_ttft_ms": 40.0}
    block = verdicts(Sla(run_targets=(("ttft_ms", "p90", bound),)), summary, {}, {}, {"ttft_ms": 3})
    assert block["met"] is met and block["targets"][0]["margin_ms"] == pytest.approx(bound - 40.0)


def test_the_std_is_the_population_one():
    assert stats.exact_stats([1.0, 3.0])["std"] == 1.0
    assert stats.sketch_stats([1.0, 3.0])["std"] == 1.0


def test_a_run_without_requests_meets_no_per_request_target():
    block = verdicts(Sla(ttft_ms=100.0), {"num_requests": 0, "completed_requests": 0}, {}, {}, {})
    assert block["met"] is False and block["targets"][0]["share_within"] == 0.0


def test_the_margin_is_target_minus_achieved():
    summary = {"num_requests": 2, "completed_requests": 2, "p90_ttft_ms": 30.0}
    block = verdicts(Sla(ttft_ms=50.0, run_targets=(("ttft_ms", "p90", 40.0),)), summary,
                     {"ttft_ms": 2}, {"ttft_ms": 45.0}, {"ttft_ms": 2})
    per_request, run_level = block["targets"]
    assert (per_request["margin_ms"], run_level["margin_ms"]) == (5.0, 10.0)
    assert per_request["margin_pct"] == pytest.approx(10.0) and run_level["margin_pct"] == pytest.approx(25.0)


# -- the text table's incomplete-requests note ----------------------------------------------------

def _note(arrived: int, completed: int) -> list[str]:
    summary = {"num_requests": arrived, "completed_requests": completed}
    block = verdicts(Sla(ttft_ms=50.0), summary, {"ttft_ms": completed}, {"ttft_ms": 40.0}, {})
    return [line for line in verdict_lines(block) if "did not complete" in line]


def test_no_note_when_every_request_completed():
    assert _note(4, 4) == []


@pytest.mark.parametrize(("completed", "missing"), [(3, 1), (0, 4)])
def test_the_note_counts_the_requests_that_did_not_complete(completed, missing):
    (note,) = _note(4, completed)
    assert note.strip().startswith(f"({missing} of 4 requests did not complete")


def test_a_run_without_requests_has_no_note():
    assert _note(0, 0) == []
