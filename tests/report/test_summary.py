"""Summary metrics from hand-built request records (docs/metrics.md definitions)."""

from __future__ import annotations

from array import array

import pytest
from hypothesis import given
from hypothesis import strategies as st

from servesim.collect.collector import Admission, RequestRecord
from servesim.report.summary import PoolUsage, Sla, summarize

PASS_ENDS = array("d", [10.0, 12.0, 15.0, 20.0, 30.0, 31.0])


def _record(rid, arrival, spans, status="completed", admitted=True, input_length=100, reused=(0,)):
    record = RequestRecord(rid, f"s{rid}", 0, arrival, input_length, 8)
    if admitted:
        record.admissions = [Admission(arrival, r, "agg") for r in reused]
    record.status = status
    record.terminal_ms = PASS_ENDS[spans[-1] - 1] if spans else arrival + 1.0
    record.token_spans = list(spans)
    record.output_length = sum(spans[i + 1] - spans[i] for i in range(0, len(spans), 2))
    record.pass_ends = PASS_ENDS
    return record


def test_latencies_throughput_and_reuse():
    records = [
        _record(0, 0.0, [0, 3], reused=(0, 64)),   # tokens 10, 12, 15 (readmitted once)
        _record(1, 5.0, [1, 2, 4, 6]),              # tokens 12, 30, 31 (a gap across a preemption)
        _record(2, 0.0, [], status="rejected", admitted=False),
        _record(3, 2.0, [5, 6], input_length=50),   # a single token at 31
    ]
    s = summarize(records, {"decode": PoolUsage(0.5, 2)}, wall_time_ms=10.0)
    assert s["num_requests"] == 4 and s["completed_requests"] == 3
    assert s["total_input_tokens"] == 250 and s["total_output_tokens"] == 7
    assert s["duration_ms"] == 31.0
    assert s["request_throughput_rps"] == 3 / 0.031
    assert (s["min_ttft_ms"], s["max_ttft_ms"]) == (7.0, 29.0)      # 12 - 5, 31 - 2
    assert s["median_ttft_ms"] == 10.0
    assert (s["min_ttst_ms"], s["max_ttst_ms"]) == (2.0, 18.0)
    assert s["max_tpot_ms"] == pytest.approx(19.0 / 2)
    assert s["max_e2e_latency_ms"] == 29.0
    assert (s["min_itl_ms"], s["max_itl_ms"]) == (1.0, 18.0)          # pooled gaps 2,3,18,1
    assert s["mean_itl_ms"] == pytest.approx(24.0 / 4)
    assert s["gpu_hours"] == 0.5 * 2 / 3600
    assert s["prefix_cache_reused_ratio"] == 64 / 250
    assert s["first_admission_prefix_cache_reused_ratio"] == 0.0
    assert s["processed_tokens"] == 257 and s["processed_tokens_per_s"] == 257 / 10.0 * 1000
    assert "goodput_completed_requests" not in s


def test_goodput_counts_requests_meeting_every_bound():
    records = [_record(0, 0.0, [0, 3]), _record(1, 5.0, [1, 2, 4, 6]), _record(2, 2.0, [5, 6])]
    s = summarize(records, {}, 1.0, Sla(ttft_ms=10.0, itl_ms=3.0))
    # request 0: ttft 10, mean gap 2.5 -> good; request 1: mean gap 9.5 -> bad; request 2: ttft 29 -> bad
    assert s["goodput_completed_requests"] == 1
    assert s["goodput_output_throughput_tok_s"] == 3 / 0.031
    e2e = summarize(records, {}, 1.0, Sla(e2e_ms=26.0))
    assert e2e["goodput_completed_requests"] == 2


def test_zero_token_completion_counts_but_adds_no_latency_sample():
    records = [_record(0, 0.0, [0, 1]), _record(1, 3.0, [])]
    s = summarize(records, {}, 1.0, Sla(e2e_ms=5.0))
    assert s["completed_requests"] == 2 and s["max_ttft_ms"] == 10.0 and s["min_ttft_ms"] == 10.0
    assert s["goodput_completed_requests"] == 1, "only the tokenless request meets 5 ms end to end"


def test_empty_run_reports_zeros():
    s = summarize([], {}, 0.0)
    assert s["completed_requests"] == 0 and s["duration_ms"] == 0.0
    assert s["mean_ttft_ms"] == 0.0 and s["p99_itl_ms"] == 0.0 and s["processed_tokens_per_s"] == 0.0


def _good_one_by_one(record: RequestRecord, sla: Sla) -> bool:
    """The goodput rule of docs/metrics.md for one request, written out plainly."""
    n = record.output_length
    if n == 0:
        return (sla.e2e_ms is not None and sla.ttft_ms is None
                and record.terminal_ms - record.arrival_ms <= sla.e2e_ms)
    first, last = PASS_ENDS[record.token_spans[0]], PASS_ENDS[record.token_spans[-1] - 1]
    ttft, e2e = max(first - record.arrival_ms, 0.0), last - record.arrival_ms
    return ((sla.ttft_ms is None or ttft <= sla.ttft_ms) and (sla.e2e_ms is None or e2e <= sla.e2e_ms)
            and (sla.itl_ms is None or n == 1 or (e2e - ttft) / (n - 1) <= sla.itl_ms))


_BOUND = st.none() | st.floats(0.0, 40.0)


@given(requests=st.lists(st.tuples(st.floats(0.0, 31.0), st.integers(0, 6), st.integers(0, 6)), max_size=12),
       ttft=_BOUND, itl=_BOUND, e2e=_BOUND)
def test_goodput_matches_the_rule_request_by_request(requests, ttft, itl, e2e):
    records = []
    for rid, (arrival, a, b) in enumerate(requests):
        lo, hi = min(a, b), max(a, b)
        records.append(_record(rid, arrival, [lo, hi] if hi > lo else []))
    sla = Sla(ttft_ms=ttft, itl_ms=itl, e2e_ms=e2e)
    s = summarize(records, {}, 1.0, sla)
    good = [r for r in records if _good_one_by_one(r, sla)]
    assert s["goodput_completed_requests"] == len(good)
    duration = max((r.terminal_ms for r in records), default=0.0) / 1000
    assert s["goodput_output_throughput_tok_s"] == sum(r.output_length for r in good) / max(duration, 1e-9)
