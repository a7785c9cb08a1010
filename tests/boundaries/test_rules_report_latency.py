"""Rules of the report's latency samples and SLA verdict table (report/latency.py, report/sla.py):
a request enters the TTFT and E2E samples with one token and the TPOT sample with two; a TTFT
is never negative; per-request rows count only completed requests with a TTFT; a quantile is
the smallest sample whose cumulative fraction reaches q; an empirical CDF keeps every step of a
sample of at most `max_points` values, and at most ~`max_points` points (p99 and p99.99 among
them) of a larger one; a per-request target is met when every arrived request is within it."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from servesim.report.latency import cdf_points, from_request_rows, from_tally, quantile, rate_per_second
from servesim.report.sla import Sla, achieved_text, verdict_lines, verdicts
from servesim.report.tally import Timelines


def _timelines(arrival, count, first, last, terminal=None) -> Timelines:
    n = len(arrival)
    col = lambda values: np.asarray(values, float)  # noqa: E731
    return Timelines(arrival=col(arrival), terminal=col(terminal if terminal is not None else last),
                     input_length=np.full(n, 10), output_length=np.asarray(count), reused_first=np.zeros(n, int),
                     reused_max=np.zeros(n, int), count=np.asarray(count), first=col(first), second=col(first),
                     last=col(last), gaps=np.array([2.0, 3.0]), gap_counts=np.array([4, 1]))


# -- samples from the tally ---------------------------------------------------------------------

def test_token_counts_decide_which_samples_a_request_enters():
    # counts 0, 1, 2, 3: TTFT and E2E from the last three, TPOT from the last two.
    tl = _timelines(arrival=[0, 0, 0, 0], count=[0, 1, 2, 3], first=[0, 5, 6, 7], last=[0, 5, 10, 15])
    lat = from_tally(SimpleNamespace(arrivals=lambda: tl.arrival), tl)
    assert lat.ttft_ms.tolist() == [5.0, 6.0, 7.0]
    assert lat.e2e_ms.tolist() == [5.0, 10.0, 15.0]
    assert lat.tpot_ms.tolist() == [4.0, 4.0], "(10-6)/1 and (15-7)/2"


def test_a_first_token_before_arrival_is_a_zero_ttft():
    tl = _timelines(arrival=[10.0], count=[2], first=[8.0], last=[12.0])
    lat = from_tally(SimpleNamespace(arrivals=lambda: tl.arrival), tl)
    assert lat.ttft_ms.tolist() == [0.0] and lat.e2e_ms.tolist() == [2.0]


def test_only_the_itl_distribution_is_weighted():
    tl = _timelines(arrival=[0.0], count=[2], first=[3.0], last=[5.0])
    lat = from_tally(SimpleNamespace(arrivals=lambda: tl.arrival), tl)
    values, weights = lat.values("itl_ms")
    assert values.tolist() == [2.0, 3.0] and weights is not None and weights.tolist() == [4, 1]
    values, weights = lat.values("ttft_ms")
    assert values.tolist() == [3.0] and weights is None
    assert lat.values("e2e_ms")[0].tolist() == [5.0]


def _row(status="completed", ttft=5.0, itl=2.0):
    return {"arrival_time_ms": 1.0, "terminal_status": status, "ttft_ms": ttft, "terminal_time_ms": 9.0,
            "e2e_latency_ms": 8.0, "itl_ms": itl}


def test_request_rows_count_completed_requests_with_a_ttft():
    rows = [_row(), _row(status="rejected"), _row(ttft=None), _row(status="failed", ttft=None), _row(itl=None)]
    lat = from_request_rows(rows)
    assert len(lat.arrival_ms) == 5, "every arrival"
    assert lat.ttft_ms.tolist() == [5.0, 5.0]
    assert lat.tpot_ms.tolist() == [2.0], "a one-token request has no ITL"
    assert len(lat.completion_ms) == 2


# -- quantiles and CDFs -------------------------------------------------------------------------

@pytest.mark.parametrize(("q", "expected"), [(0.0, 1.0), (0.25, 1.0), (0.2500001, 2.0), (0.5, 2.0),
                                             (0.75, 3.0), (0.7500001, 4.0), (1.0, 4.0)])
def test_a_quantile_on_a_cumulative_fraction_takes_that_sample(q, expected):
    assert quantile(np.array([4.0, 2.0, 3.0, 1.0]), None, q) == expected


def test_one_sample_is_every_quantile():
    assert quantile(np.array([7.0]), None, 0.5) == 7.0
    x, y = cdf_points(np.array([7.0]))
    assert x.tolist() == [7.0] and y.tolist() == [1.0]


def test_a_sample_of_max_points_keeps_every_step():
    values = np.arange(50.0)
    x, _ = cdf_points(values, max_points=50)
    assert x.tolist() == values.tolist()
    x, _ = cdf_points(np.arange(51.0), max_points=50)
    assert len(x) < 51


def test_a_large_sample_has_at_most_max_points_with_the_tail_percentiles():
    values = np.arange(1.0, 100_001.0)
    x, y = cdf_points(values)
    assert len(x) <= 600
    for q in (0.99, 0.9999):
        first = int(np.argmax(y >= q - 1e-12))
        assert x[first] == quantile(values, None, q), q
        assert abs(y[first] - q) < 1e-9, f"p{100 * q:g} is a point of the CDF"
    assert y[0] == 1e-5 and x[0] == 1.0, "the smallest sample is always a point"


def test_rates_count_events_per_second_of_each_interval():
    assert rate_per_second(np.array([0.0, 400.0, 999.0, 1500.0]), np.array([0.0, 1000.0, 3000.0])).tolist() \
        == [3.0, 0.5]


# -- SLA verdicts -------------------------------------------------------------------------------

@pytest.mark.parametrize(("within", "met"), [(1, True), (0, False)])
def test_a_single_request_run_meets_a_per_request_target_when_it_is_within(within, met):
    block = verdicts(Sla(ttft_ms=50.0), {"num_requests": 1, "completed_requests": 1}, {"ttft_ms": within},
                     {"ttft_ms": 40.0}, {})
    assert block["met"] is met and block["targets"][0]["share_within"] == float(within)


def test_achieved_names_the_worst_request_only_for_per_request_targets():
    block = verdicts(Sla(ttft_ms=50.0, run_targets=(("ttft_ms", "p90", 40.0),)),
                     {"num_requests": 2, "completed_requests": 2, "p90_ttft_ms": 30.0},
                     {"ttft_ms": 2}, {"ttft_ms": 45.0}, {"ttft_ms": 2})
    per_request, run_level = block["targets"]
    assert achieved_text(per_request) == "45.00 ms (worst request)"
    assert achieved_text(run_level) == "30.00 ms"


def test_the_verdict_table_aligns_its_columns():
    block = verdicts(Sla(ttft_ms=50.0, e2e_ms=1234.5, run_targets=(("itl_ms", "p99", 7.0),)),
                     {"num_requests": 4, "completed_requests": 4, "p99_itl_ms": 3.0},
                     {"ttft_ms": 4, "e2e_ms": 1}, {"ttft_ms": 45.0, "e2e_ms": 2000.0}, {"itl_ms": 9})
    rows = verdict_lines(block)[1:]
    assert len(rows) == 3
    starts = {row.index("MET") if "MISSED" not in row else row.index("MISSED") for row in rows}
    assert len(starts) == 1, rows


def test_no_samples_give_an_empty_cdf():
    x, y = cdf_points(np.empty(0))
    assert len(x) == 0 and len(y) == 0


@pytest.mark.parametrize("max_points", [100, 120, 400, 600])
def test_the_upper_tail_gets_its_own_share_of_the_points(max_points):
    """min(40, max_points // 4) log-spaced fractions from p99 to p99.99, beside an even grid of
    the other points: every one of them is a point of a large sample's CDF."""
    tail = min(40, max_points // 4)
    even = np.linspace(0.0, 1.0, max_points - tail)[1:]
    expected = tail + int(np.sum((even >= 0.99 - 1e-12) & (even < 1.0)))
    _, y = cdf_points(np.arange(1.0, 1_000_001.0), max_points=max_points)
    assert int(np.sum((y >= 0.99 - 1e-12) & (y < 1.0))) == expected
    assert abs(y[1] - even[0]) < 1e-6, "the even grid starts one step above 0"
