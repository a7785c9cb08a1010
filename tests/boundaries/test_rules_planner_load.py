"""Load-scaling rules beyond test_bounds_planner_load.py (scaling/planner/load.py): each easy
target's value (aggregated: scheduled + queued KV + queued prefill tokens over the worker's KV
capacity, DP ranks included; decode: without the prefill queue; prefill: the queue over the
context length, or the queue itself for `load`), no opinion without capacity or workers, engines
read in key order, and how the aggregated SLA step combines its prefill and decode views."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from servesim.scaling.planner.load import LoadSteps, Step
from servesim.scaling.planner.settings import PlannerSettings


def _fpm(decode_kv=0, queued_kv=0, queued_prefill=0):
    return SimpleNamespace(sum_decode_kv_tokens=decode_kv, sum_queued_decode_kv_tokens=queued_kv,
                           sum_queued_prefill_tokens=queued_prefill)


def _pool(blocks=10, block_size=10, dp=1, context=None, workers=2):
    return SimpleNamespace(kv_blocks_per_rank=blocks, block_size=block_size, ranks_per_worker=dp, ranks=[],
                           active=list(range(workers)), timing=None, max_batched_tokens=64, max_sequences=8,
                           context_length=context)


def _steps(target="throughput", **knobs):
    return LoadSteps(PlannerSettings(target=target, **knobs), SimpleNamespace())


def test_aggregated_utilisation_counts_the_prefill_queue():
    diag: dict = {}
    fpms = {(0, 0): _fpm(50, 20, 30), (1, 0): _fpm(10)}
    step = _steps().easy_agg(_pool(), fpms, 2, diag)
    assert diag["kv_utilization"] == [1.0, 0.1]
    assert (step.desired, step.reason) == (None, "no_change"), "throughput decode: 1.0 is not over 1.0"
    step = _steps().easy_agg(_pool(), {(0, 0): _fpm(50, 20, 31), (1, 0): _fpm(10)}, 2, {})
    assert (step.desired, step.reason) == (3, "scale_up")


def test_the_worker_capacity_includes_its_dp_ranks():
    diag: dict = {}
    _steps().easy_agg(_pool(dp=2), {(0, 0): _fpm(100)}, 2, diag)
    assert diag["kv_utilization"] == [0.5]


def test_decode_utilisation_leaves_the_prefill_queue_out():
    diag: dict = {}
    step = _steps(target="latency").easy_decode(_pool(), {(0, 0): _fpm(5, 4, 1000), (1, 0): _fpm(2)}, 2, diag)
    assert diag["kv_utilization_decode"] == [0.09, 0.02]
    assert (step.desired, step.reason) == (1, "scale_down"), "both under 0.1, and 0.09 × 2 < 0.4"


def test_engines_are_read_in_key_order():
    diag: dict = {}
    _steps().easy_decode(_pool(), {(1, 0): _fpm(30), (0, 1): _fpm(20), (0, 0): _fpm(10)}, 2, diag)
    assert diag["kv_utilization_decode"] == [0.1, 0.2, 0.3]


@pytest.mark.parametrize("method", ["easy_agg", "easy_decode"])
def test_no_capacity_or_no_workers_gives_no_opinion(method):
    for pool, workers in ((_pool(blocks=0), 2), (_pool(), 0)):
        step = getattr(_steps(), method)(pool, {(0, 0): _fpm(5)}, workers, {})
        assert (step.desired, step.reason) == (None, "insufficient_data")


def test_the_prefill_queue_is_a_share_of_the_context_except_under_load():
    diag: dict = {}
    step = _steps().easy_prefill(_pool(context=1000), {(0, 0): _fpm(queued_prefill=1000)}, 1, diag)
    assert diag["prefill_queue"] == [1.0] and (step.desired, step.reason) == (2, "scale_up"), "1.0 reaches 1.0"
    diag = {}
    step = _steps(target="load").easy_prefill(_pool(context=None), {(0, 0): _fpm(queued_prefill=1)}, 1, diag)
    assert diag["prefill_queue"] == [1.0] and step.reason == "scale_up", "load: the tokens themselves"
    step = _steps().easy_prefill(_pool(context=None), {(0, 0): _fpm(queued_prefill=1)}, 1, {})
    assert (step.desired, step.reason) == (None, "insufficient_data")
    step = _steps().easy_prefill(_pool(context=1000), {(0, 0): _fpm(queued_prefill=1)}, 0, {})
    assert (step.desired, step.reason) == (None, "insufficient_data")


def test_the_prefill_minimum_holds_a_scale_down():
    fpms = {(0, 0): _fpm(queued_prefill=0), (1, 0): _fpm(queued_prefill=0)}
    step = _steps(target="latency", min_prefill=2).easy_prefill(_pool(context=100), fpms, 2, {})
    assert (step.desired, step.reason) == (2, "no_change")
    step = _steps(target="latency", min_prefill=1).easy_prefill(_pool(context=100), fpms, 2, {})
    assert (step.desired, step.reason) == (1, "scale_down")


def _combined(prefill: Step, decode: Step, workers: int = 3) -> Step:
    steps = _steps(target="sla")
    steps._sla_agg_prefill = lambda *a: prefill  # type: ignore[method-assign]
    steps._sla_agg_decode = lambda *a: decode  # type: ignore[method-assign]
    return steps.sla_agg(_pool(), {}, workers, {})


@pytest.mark.parametrize(("prefill", "decode", "expected"), [
    (Step(4, "scale_up"), Step(5, "scale_up"), (4, "scale_up")),        # the prefill view first
    (Step(2, "scale_down"), Step(4, "scale_up"), (4, "scale_up")),
    (Step(None, "no_change"), Step(2, "scale_down"), (2, "scale_down")),
    (Step(2, "scale_down"), Step(1, "scale_down"), (2, "scale_down")),  # both down: the larger
    (Step(1, "scale_down"), Step(2, "scale_down"), (2, "scale_down")),
    (Step(2, "scale_down"), Step(None, "no_change"), (None, "no_change")),
    (Step(3, "x"), Step(2, "scale_down"), (None, "no_change")),         # prefill holds at the count
    (Step(2, "scale_down"), Step(3, "x"), (None, "no_change")),
    (Step(None, "no_change"), Step(3, "x"), (None, "no_change")),
])
def test_the_aggregated_sla_step_combines_both_views(prefill, decode, expected):
    step = _combined(prefill, decode)
    assert (step.desired, step.reason) == expected and not step.refused


def test_a_refusal_in_either_view_is_kept():
    assert _combined(Step(3, "r", True), Step(None, "no_change")).refused
    assert _combined(Step(None, "no_change"), Step(3, "r", True)).refused
    assert _combined(Step(4, "scale_up"), Step(3, "r", True)).refused


def test_a_step_without_opinion_keeps_the_current_count():
    assert Step(None, "no_change").target(4) == 4 and Step(0, "scale_down").target(4) == 0
    assert not Step(1, "x").refused
