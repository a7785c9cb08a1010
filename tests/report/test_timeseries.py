"""A run's time series as the cluster's pass observer (`servesim.cluster.sampling`) feeds them:
its counters add up to the records' admissions, both replay paths observe the same passes, and
a worker the planner removed stops at its removal."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import servesim

CASES = Path(__file__).resolve().parents[1] / "cases"


def _config(mode: str) -> dict:
    pool = {"parallelism": {"replicas": 2, "tensor": 1}, "scheduler": {"max_sequences": 32},
            "kv_cache": {"block_size": 32, "capacity": {"type": "fixed", "blocks": 600}},
            "timing": {"type": "fixed", "prefill_ms": 25, "decode_ms": 8}}
    workers = {"aggregated": pool} if mode == "aggregated" else {"prefill": pool, "decode": pool}
    return {
        "engine": {"mode": mode, "model": "Qwen/Qwen3-8B", "hardware": "h200_sxm", "backend": "vllm",
                   "context_length": 32768, "workers": workers},
        "traffic": {"source": {"type": "synthetic-session", "new_input_tokens_per_turn": 384,
                               "output_tokens_per_turn": 48,
                               "session": {"turns": 3, "shared_prefix_ratio": 0.5, "prefix_groups": 3}},
                    "load": {"type": "poisson", "sessions_per_second": 5, "seed": 7}, "stop": {"sessions": 80}},
        "router": {"policy": "kv_router"},
    }


@pytest.mark.parametrize("mode", ["aggregated", "disaggregated"])
def test_counters_add_up_to_the_records_admissions(mode):
    report = servesim.simulate(_config(mode), capture_per_request=True, timeseries=True)
    series = report.timeseries
    assert series is not None and set(series.pools()) == ({"agg"} if mode == "aggregated" else {"prefill", "decode"})
    for pool in series.pools():
        admissions = [(row["input_length"], entry["reused_input_tokens"]) for row in report.per_request
                      for entry in row["admission_history"] if entry["pool"] == pool]
        assert admissions
        assert sum(s.prompt_tokens.sum() for s in series.of_pool(pool)) == sum(n for n, _ in admissions)
        assert sum(s.prefix_hits.sum() for s in series.of_pool(pool)) == sum(hit for _, hit in admissions)
    if mode == "aggregated":
        assert sum(hit for s in series.workers for hit in s.prefix_hits) > 0  # shared prefixes were reused


@pytest.mark.parametrize("mode", ["aggregated", "disaggregated"])
def test_both_replay_paths_observe_the_same_passes(mode):
    fast = servesim.simulate(_config(mode), timeseries=True).timeseries
    plain = servesim.simulate(_config(mode), timeseries=True, fast=False).timeseries
    assert fast is not None and plain is not None
    assert fast.width_ms == plain.width_ms and len(fast.workers) == len(plain.workers)
    for a, b in zip(fast.workers, plain.workers, strict=True):
        assert (a.pool, a.worker_id) == (b.pool, b.worker_id)
        for name in ("waiting", "running", "kv_usage", "prefix_hits", "prompt_tokens"):
            assert np.array_equal(getattr(a, name), getattr(b, name), equal_nan=True), (a.pool, a.worker_id, name)


def test_a_removed_worker_stops_at_its_removal():
    report = servesim.simulate(CASES / "dynamo" / "planner-load-kv-burst" / "config.yaml", timeseries=True)
    series = report.timeseries
    assert series is not None
    removed = {e["worker_id"]: e["at_s"] * 1000 for e in report["planner"]["lifecycle"] if e["state"] == "removed"}
    assert removed
    for worker in series.of_pool("agg"):  # the planner's "decode" pool is the aggregated pool
        observed = np.nonzero(~np.isnan(worker.waiting))[0]
        if worker.worker_id in removed:
            assert observed.max() == int(removed[worker.worker_id] // series.width_ms)
        else:
            assert observed.max() == len(series.start_ms) - 1
