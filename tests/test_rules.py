"""Four documented rules, each pinned by a reference run whose numbers depend on it.

The cases in `cases/rules/` were made for this: each is small enough to reason about by hand, and
the rule decides a field of the reference's report (the case's config says how). Every case must
match the reference's recorded run; the tests below also state the rule's consequence directly.

* the sketch percentile rank: ``floor((r + 0.5) / span * span)``, not ``floor(r / span * span)``
  (docs/metrics.md, "percentiles");
* goodput bounds are inclusive: ``ttft <= ttft_ms``, ``itl <= itl_ms``, ``e2e <= e2e_ms``;
* passes that start at one instant start in pool, then worker order (docs/design.md, "Time and
  the order of events"), so equal-time completions are applied in that order;
* events exactly at the time cap are processed; the first one after it is not.
"""

from __future__ import annotations

import pytest
from conftest import CASES, assert_matches_case, run_case

from servesim.report.stats import PERCENTILES, sketch_stats

RULES = CASES / "rules"
SKETCH = RULES / "01-sketch-rank-half/config.yaml"
GOODPUT_ITL = RULES / "02-goodput-bounds-inclusive/config.yaml"
GOODPUT_E2E = RULES / "02-goodput-bounds-inclusive/config-e2e.yaml"
START_ORDER = RULES / "03-pass-start-order/config.yaml"
TIME_CAP = RULES / "04-time-cap-boundary/config.yaml"


@pytest.mark.parametrize("fast", [True, False], ids=["fast", "plain"])
@pytest.mark.parametrize("config", [SKETCH, GOODPUT_ITL, GOODPUT_E2E, START_ORDER, TIME_CAP],
                         ids=lambda p: f"{p.parent.name}/{p.name}")
def test_rule_case_matches_reference(config, fast: bool) -> None:
    """Both replays (the per-worker one, when it applies, and the shared clock) match."""
    assert_matches_case(config, run_case(config, fast=fast))


def test_sketch_median_of_48_gaps_is_the_25th() -> None:
    report = run_case(SKETCH)
    (long_request,) = [r for r in report["per_request"] if r["output_length"] == 49]
    assert long_request["itl_ms"] == (24 * 15.0 + 24 * 10.0) / 48
    assert (report["min_itl_ms"], report["max_itl_ms"]) == (10.0, 15.0)
    # rank round(47 / 2) = 24 of the sorted gaps 10 x 24, 15 x 24 is the first 15 ms gap; without
    # the half, floor(24 / 47 * 47) = 23 would give the last 10 ms one.
    assert report["median_itl_ms"] > 14.9
    assert sketch_stats([10.0] * 24 + [15.0] * 24)["median"] == report["median_itl_ms"]
    assert dict(PERCENTILES)["median"] == 50.0


@pytest.mark.parametrize("config", [GOODPUT_ITL, GOODPUT_E2E], ids=["ttft-itl", "e2e"])
def test_a_request_exactly_at_its_bounds_is_good(config) -> None:
    report = run_case(config)
    (record,) = report["per_request"]
    assert (record["ttft_ms"], record["itl_ms"], record["e2e_latency_ms"]) == (12.0, 8.0, 44.0)
    assert report["goodput_completed_requests"] == 1


def test_equal_time_completions_are_applied_in_worker_order() -> None:
    records = run_case(START_ORDER)["per_request"]
    assert len(records) == 16
    for record in records:
        prefill, decode = (route["logical_worker_id"] for route in record["routing_history"])
        # prefill worker 0's request reserved its destination first, so the flat round robin of the
        # decode pool gave it decode worker 0 in every pair
        assert prefill == decode, record["session_id"]


@pytest.mark.parametrize("fast", [True, False], ids=["per-worker", "shared-clock"])
def test_events_exactly_at_the_time_cap_are_processed(fast: bool) -> None:
    report = run_case(TIME_CAP, fast=fast)
    assert report["num_requests"] == 2, "the arrival at the cap registers, the one after it does not"
    (record,) = report["per_request"]
    assert (record["terminal_status"], record["terminal_time_ms"]) == ("completed", 16.0)
    assert report["duration_ms"] == 16.0
