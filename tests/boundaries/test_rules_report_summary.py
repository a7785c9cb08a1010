"""Rules of the summary's totals and derived fields (report/summary.py, docs/metrics.md): GPU-hours
sum both pools' worker-seconds × GPUs per worker (a pool the run lacks counts nothing); rates
over the wall time are 0 without one; prefix reuse is the best admission's (and the first
admission's) reused tokens over the prompt tokens; a request with two tokens has a TPOT and an
ITL value; per-user throughput skips zero gaps; totals over chunks keep the longest duration
and the worst value; the accounting counts rejected and never-finished requests."""

from __future__ import annotations

from array import array

import numpy as np
import pytest

from servesim.collect.collector import Admission, RequestRecord
from servesim.report.summary import PoolUsage, Sla, Totals, request_accounting, summarize
from servesim.report.tally import RequestTally, Timelines

PASS_ENDS = array("d", [10.0, 12.0, 15.0, 20.0, 30.0, 31.0])


def _record(rid: int, spans: list[int], reused: tuple[int, ...] = (0,), status: str = "completed") -> RequestRecord:
    record = RequestRecord(rid, f"s{rid}", 0, 0.0, 100, 8)
    record.admissions = [Admission(0.0, r, "agg") for r in reused]
    record.status = status
    record.terminal_ms = PASS_ENDS[spans[-1] - 1] if spans else 1.0
    record.token_spans = list(spans)
    record.output_length = sum(spans[i + 1] - spans[i] for i in range(0, len(spans), 2))
    record.pass_ends = PASS_ENDS
    return record


def test_gpu_hours_sum_both_pools():
    pools = {"prefill": PoolUsage(3600.0, 2), "decode": PoolUsage(1800.0, 4)}
    got = summarize([_record(0, [0, 3])], pools, 1.0)  # 100 + 3 tokens over 15 ms
    assert got["gpu_hours"] == 4.0
    assert got["total_throughput_tok_s"] == pytest.approx(103 / 0.015)
    assert (got["prefill_worker_seconds"], got["decode_gpus_per_worker"]) == (3600.0, 4)


def test_a_pool_the_run_lacks_counts_nothing():
    got = summarize([_record(0, [0, 3])], {"decode": PoolUsage(7200.0, 1)}, 1.0)
    assert got["gpu_hours"] == 2.0
    assert got["prefill_worker_seconds"] == 0.0 and got["prefill_gpus_per_worker"] == 0


def test_processed_rates_are_per_second_of_wall_time():
    got = summarize([_record(0, [0, 3])], {}, 500.0)  # 100 prompt + 3 output tokens in 0.5 s
    assert got["processed_tokens"] == 103
    assert got["processed_tokens_per_s"] == pytest.approx(206.0)
    assert got["processed_output_tokens_per_s"] == pytest.approx(6.0)
    one_ms = summarize([_record(0, [0, 3])], {}, 1.0)
    assert one_ms["processed_tokens_per_s"] == 103_000.0 and one_ms["processed_output_tokens_per_s"] == 3_000.0
    empty = summarize([_record(0, [0, 3])], {}, 0.0)
    assert empty["processed_tokens_per_s"] == 0.0 and empty["processed_output_tokens_per_s"] == 0.0


def test_prefix_reuse_is_the_best_and_the_first_admission():
    got = summarize([_record(0, [0, 3], reused=(10, 40, 20)), _record(1, [0, 2], reused=(30,))], {}, 1.0)
    assert got["prefix_cache_reused_ratio"] == pytest.approx(70 / 200)
    assert got["first_admission_prefix_cache_reused_ratio"] == pytest.approx(40 / 200)


def test_no_prompt_tokens_is_no_reuse():
    got = summarize([], {}, 1.0)
    assert got["prefix_cache_reused_ratio"] == 0.0 and got["first_admission_prefix_cache_reused_ratio"] == 0.0


def test_a_two_token_request_has_a_tpot_and_a_second_token_time():
    got = summarize([_record(0, [0, 2])], {}, 1.0)  # tokens at 10 and 12
    assert got["mean_tpot_ms"] == 2.0 and got["mean_ttst_ms"] == 2.0
    block = summarize([_record(0, [0, 2])], {}, 1.0, Sla(itl_ms=5.0))["sla"]
    assert block["targets"][0]["achieved"] == 2.0, "the worst request's ITL is that of the two-token one"


def test_a_one_token_request_is_a_ttft_sample_for_run_level_targets():
    got = summarize([_record(0, [0, 1])], {}, 1.0, Sla(run_targets=(("ttft_ms", "mean", 20.0),)))
    assert got["sla"]["targets"][0]["achieved"] == 10.0 and got["sla"]["met"] is True


def _timelines(terminal: list[float], itl: list[float], count: list[int]) -> Timelines:
    n = len(terminal)
    t = np.asarray(terminal, float)
    return Timelines(arrival=np.zeros(n), terminal=t, input_length=np.full(n, 10), output_length=np.asarray(count),
                     reused_first=np.zeros(n, int), reused_max=np.zeros(n, int), count=np.asarray(count),
                     first=np.ones(n), second=np.ones(n) + 1, last=1 + np.asarray(itl) * (np.asarray(count) - 1),
                     gaps=np.array([0.0, 1.0, 4.0]), gap_counts=np.array([5, 1, 1]))


def test_totals_over_chunks_keep_the_longest_duration_and_the_worst_value():
    totals = Totals()
    sla = Sla(itl_ms=3.0)
    totals.add(_timelines([50.0, 40.0], itl=[2.0, 5.0], count=[3, 3]), sla)
    totals.add(_timelines([30.0], itl=[1.0], count=[3]), sla)
    assert totals.duration_ms == 50.0 and totals.completed == 3
    assert totals.worst["itl_ms"] == 5.0 and totals.within["itl_ms"] == 2
    assert totals.with_tokens == 3 and totals.good == 2


def test_per_user_throughput_skips_zero_gaps():
    tl = _timelines([10.0], itl=[2.0], count=[3])
    got = summarize([], {}, 1.0, timelines=tl)
    assert got["max_output_token_throughput_per_user"] == pytest.approx(1000.0, rel=2e-3)
    assert np.isfinite(got["mean_output_token_throughput_per_user"])
    assert got["mean_output_token_throughput_per_user"] == pytest.approx(625.0, rel=2e-3), "(1000 + 250) / 2"


def test_the_accounting_counts_rejected_and_unfinished_requests():
    tally = RequestTally.of([_record(0, [0, 3]), _record(1, [], status="rejected"), _record(2, [], status="failed")])
    assert request_accounting(tally, 5) == {"rejected_requests": 2, "incomplete_requests": 2}
    assert request_accounting(tally, 3) == {"rejected_requests": 2, "incomplete_requests": 0}
