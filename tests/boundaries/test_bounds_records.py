"""Per-request records and the tally (runtime spec §8.5 and §8.3): each field derived by hand
from a small run — TTFT = first token − arrival clamped at 0, TTST = second − first, E2E = last
token − arrival, ITL = (last − first)/(n − 1) and null below two tokens, readmissions counted per
pool, reuse the best prompt-side admission; the tally's token count, first/second/last token
times, pooled token gaps (inside a run and between runs) and per-worker sums."""

from __future__ import annotations

from array import array

import numpy as np
import pytest

from servesim.collect.collector import Admission, RequestRecord, Route, Status
from servesim.report.records import request_record, request_records
from servesim.report.tally import CompletedColumns, RequestTally

ENDS = array("d", [15.0, 25.0, 30.0, 42.0, 50.0])


def _record(rid: int, arrival: float, spans: list[int], admissions=None, routes=None,
            status=Status.COMPLETED) -> RequestRecord:
    record = RequestRecord(rid, f"s{rid}", 0, arrival, 100, 8)
    record.admissions = admissions if admissions is not None else [Admission(arrival, 0, "agg")]
    record.routes = routes if routes is not None else [Route("agg", 0, 0, 0, 0)]
    record.status = status
    record.token_spans = list(spans)
    record.pass_ends = ENDS
    record.output_length = sum(spans[i + 1] - spans[i] for i in range(0, len(spans), 2))
    record.terminal_ms = ENDS[spans[-1] - 1] if spans else arrival + 1.0
    return record


def test_three_tokens_in_one_run():
    out = request_record(_record(0, 20.0, [1, 4]), "u")  # tokens at 25, 30, 42
    assert out["first_token_ms"] == 25.0 and out["last_token_ms"] == 42.0
    assert out["ttft_ms"] == 5.0
    assert out["ttst_ms"] == 5.0
    assert out["e2e_latency_ms"] == 22.0
    assert out["itl_ms"] == 8.5, "(42 − 25) / (3 − 1)"
    assert out["output_length"] == 3


def test_two_tokens_give_one_gap():
    out = request_record(_record(0, 20.0, [2, 4]), "u")  # tokens at 30, 42
    assert out["itl_ms"] == 12.0 and out["ttst_ms"] == 12.0


def test_tokens_in_two_runs():
    out = request_record(_record(0, 10.0, [0, 1, 2, 4]), "u")  # tokens at 15, 30, 42
    assert out["ttft_ms"] == 5.0
    assert out["ttst_ms"] == 15.0, "the second token is the first of the second run"
    assert out["itl_ms"] == 13.5, "(42 − 15) / 2"
    assert out["e2e_latency_ms"] == 32.0


def test_one_token_has_no_gap():
    out = request_record(_record(0, 10.0, [3, 4]), "u")
    assert out["ttft_ms"] == 32.0 and out["e2e_latency_ms"] == 32.0
    assert out["itl_ms"] is None and out["ttst_ms"] is None


def test_no_token_has_no_latencies():
    out = request_record(_record(0, 10.0, [], status=Status.REJECTED), "u")
    for key in ("ttft_ms", "ttst_ms", "e2e_latency_ms", "itl_ms", "first_token_ms", "last_token_ms"):
        assert out[key] is None, key
    assert out["terminal_status"] == "rejected"


def test_a_first_token_before_the_arrival_clamps_ttft_at_zero():
    assert request_record(_record(0, 16.0, [0, 2]), "u")["ttft_ms"] == 0.0
    assert request_record(_record(0, 15.0, [0, 2]), "u")["ttft_ms"] == 0.0
    assert request_record(_record(0, 14.5, [0, 2]), "u")["ttft_ms"] == 0.5


def test_readmissions_count_per_pool():
    adms = [Admission(1.0, 4, "prefill"), Admission(2.0, 0, "prefill"), Admission(3.0, 6, "decode"),
            Admission(4.0, 2, "decode"), Admission(5.0, 1, "decode")]
    routes = [Route("prefill", 1, 7, 0, 3), Route("decode", 2, 9, 0, 5)]
    record = _record(0, 0.0, [0, 2], adms, routes)
    record.destination_reserved_ms = 2.5
    out = request_record(record, "u")
    assert out["admission_count"] == 5
    assert out["readmission_count"] == 3, "(2 − 1) + (3 − 1)"
    history = out["admission_history"]
    assert [h["admission_ordinal"] for h in history] == [0, 1, 2, 3, 4]
    assert [h["pool_admission_ordinal"] for h in history] == [0, 1, 0, 1, 2]
    assert [h["is_readmission"] for h in history] == [False, True, False, True, True]
    assert out["reused_input_tokens"] == 4, "prompt side only: the decode pool's 6 is not counted"
    assert out["decode_reused_input_tokens"] == 6
    assert out["prefill_admit_ms"] == 1.0 and out["decode_admit_ms"] == 3.0
    assert out["first_admit_ms"] == 1.0
    assert out["prefill_worker_idx"] == 7 and out["decode_worker_idx"] == 9
    assert out["prefill_route_overlap_tokens"] == 3 and out["decode_route_overlap_tokens"] == 5


def test_aggregated_reuse_is_the_best_admission():
    adms = [Admission(1.0, 3, "agg"), Admission(2.0, 8, "agg"), Admission(3.0, 5, "agg")]
    out = request_record(_record(0, 0.0, [0, 2], adms), "u")
    assert out["reused_input_tokens"] == 8
    assert out["readmission_count"] == 2
    assert out["prefill_worker_idx"] is None and out["decode_admit_ms"] is None


def test_records_sort_by_arrival_then_arrival_order():
    records = [_record(0, 5.0, [0, 1]), _record(1, 3.0, [0, 1]), _record(2, 5.0, [0, 1]),
               _record(3, 4.0, [0, 1], status=None)]
    out = request_records(records)
    assert [(r["arrival_time_ms"], r["session_id"]) for r in out] == [(3.0, "s1"), (5.0, "s0"), (5.0, "s2")]


def _columns(tally: RequestTally):
    t = tally.timelines()
    return t, dict(zip(t.gaps.tolist(), t.gap_counts.tolist(), strict=True))


def test_the_tally_of_a_run_of_several_tokens():
    t, gaps = _columns(RequestTally.of([_record(0, 20.0, [1, 4])]))
    assert t.count.tolist() == [3]
    assert (t.first[0], t.second[0], t.last[0]) == (25.0, 30.0, 42.0)
    assert gaps == {5.0: 1, 12.0: 1}


def test_the_tally_of_two_runs_adds_the_gap_between_them():
    t, gaps = _columns(RequestTally.of([_record(0, 10.0, [0, 1, 2, 4])]))
    assert t.count.tolist() == [3]
    assert (t.first[0], t.second[0], t.last[0]) == (15.0, 30.0, 42.0)
    assert gaps == {15.0: 1, 12.0: 1}


def test_the_tally_of_one_token_has_no_second_token_and_no_gap():
    t, gaps = _columns(RequestTally.of([_record(0, 10.0, [2, 3])]))
    assert t.count.tolist() == [1]
    assert t.first[0] == 30.0 and t.last[0] == 30.0 and np.isnan(t.second[0])
    assert gaps == {}


def test_gaps_of_several_requests_pool():
    records = [_record(0, 0.0, [0, 3]), _record(1, 0.0, [1, 5]), _record(2, 0.0, [4, 5])]
    t, gaps = _columns(RequestTally.of(records))
    # gaps: 10, 5 | 5, 12, 8 | none
    assert gaps == {5.0: 2, 8.0: 1, 10.0: 1, 12.0: 1}
    assert t.count.tolist() == [3, 4, 1]


def test_tally_counters_and_worker_sums():
    done = _record(0, 0.0, [0, 2], [Admission(0.0, 4, "agg")], [Route("agg", 3, 3, 0, 6)])
    rejected = _record(1, 1.0, [], [], [Route("agg", 3, 3, 0, 2)], status=Status.REJECTED)
    rejected.reason = "prompt reaches the context length"
    timed_out = _record(2, 2.0, [0, 1], status=Status.TIMED_OUT)
    tally = RequestTally.of([done, rejected, timed_out])
    assert (tally.num_requests, tally.num_terminal, tally.rejected, tally.timed_out) == (3, 3, 1, 1)
    assert tally.context_rejected == 1 and tally.first_rejection == (1, rejected.reason)
    assert tally.workers[("decode", 3)] == [2, 8, 1, 100, 4], "requests, overlap, completed, input, reused"
    assert tally.timelines().count.tolist() == [2], "only completed requests are counted"


def test_bulk_completion_equals_adding_the_records():
    records = [_record(0, 0.0, [0, 3]), _record(1, 1.0, [1, 2]), _record(2, 2.0, [1, 5])]
    one = RequestTally.of(records)
    bulk = RequestTally()
    bulk.add_completed(("decode", 0), ENDS, CompletedColumns(
        rid=np.array([0, 1, 2]), arrival=np.array([0.0, 1.0, 2.0]), input_length=np.array([100] * 3),
        tokens=np.array([3, 1, 4]), first_pass=np.array([0, 1, 1]), first=np.array([15.0, 25.0, 25.0]),
        second=np.array([25.0, np.nan, 30.0]), last=np.array([30.0, 25.0, 50.0])))
    a, b = one.timelines(), bulk.timelines()
    for name in ("count", "first", "last", "input_length", "output_length", "gaps", "gap_counts"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name
    assert np.array_equal(a.second, b.second, equal_nan=True)
    assert bulk.workers[("decode", 0)] == one.workers[("decode", 0)]


@pytest.mark.parametrize("settle_every", [1, 2, 3])
def test_settling_early_changes_nothing(settle_every):
    records = [_record(i, float(i), spans) for i, spans in
               enumerate([[0, 3], [1, 2], [0, 1, 2, 5], [3, 5], [4, 5]])]
    whole = RequestTally.of(records).timelines()
    tally = RequestTally(settle_every=settle_every)
    for record in reversed(records):
        tally.add(record)
    part = tally.timelines()
    for name in ("count", "first", "last", "arrival", "gaps", "gap_counts"):
        assert np.array_equal(getattr(whole, name), getattr(part, name)), name
