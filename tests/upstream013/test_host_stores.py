"""Copies to host memory take time (`kv_cache.host_offload`, issue 34): a pass that reuses a GPU
block whose copy is still in flight waits for it, as in AISimulate 0.13
(`tests/cases/upstream013/offload.json`: `store-wait`, `store-wait-slow`, `preemption`; every
request of those is compared field for field by `test_host_offload.py`)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from conftest import CASES

from servesim import simulate
from servesim.config.load import parse_config
from servesim.engine.cache.host import HostOffloadSettings, HostTier
from servesim.engine.cache.kv import BlockPool

SCENARIOS = json.loads((CASES / "upstream013" / "offload.json").read_text())["scenarios"]


def test_recorded_waits() -> None:
    """0.13's numbers: 3 ms + 4 x 128000 bytes at 32 GB/s = 3.016 ms; at 0.1 GB/s, 5.12 ms;
    a preempted request's last block: 3 ms + 2 blocks (the pass's job) = 3.008 ms."""
    wait = SCENARIOS["store-wait"]["requests"][1]
    assert wait["first_admit_ms"] == 115.0 and round(wait["ttft_ms"] - 10.0 - 15.0, 9) == 3.016
    slow = SCENARIOS["store-wait-slow"]["requests"][1]
    assert round(slow["ttft_ms"] - 10.0 - 15.0, 9) == 5.12
    preempted = SCENARIOS["preemption"]["requests"][-1]
    assert preempted["admission_count"] == 2 and round(preempted["admission_history"][1]["at_ms"], 9) == 343.008
    assert "host_reused_input_tokens" not in preempted["admission_history"][1]  # 0.13: none on a readmission
    assert all(s["exact"] for n, s in SCENARIOS.items() if n.startswith("store") or n == "preemption")


def test_store_job_queues_bytes_then_latency() -> None:
    """A pass's store job: its bytes after the jobs before it on the channel, then the latency."""
    tier = HostTier(HostOffloadSettings(num_blocks=10, block_bytes=1_000_000, h2d_gb_per_second=1.0,
                                        latency_ms=2.0, d2h_gb_per_second=1.0))
    assert tier.store([1, 2]) == 2 and tier.store([2, 3]) == 1  # only new blocks are copied
    assert tier.store_job(2, submit=10.0) == pytest.approx(10.0 + 2.0 + 2.0)
    assert tier.store_job(1, submit=11.0) == pytest.approx(12.0 + 1.0 + 2.0)  # after the first job's bytes


def test_pool_reports_the_latest_due_it_evicts() -> None:
    """A release marks its LRU entries with the copy's end; evicting them reports it, evicting
    older entries does not."""
    pool = BlockPool(4)
    assert pool.allocate(2)
    pool.release([None, None], 2, due=0.0)  # an old release: copies long done
    assert pool.allocate(2)
    pool.release([None, None], 2, due=50.0)
    assert pool.allocate(2) and pool.evicted_due == 0.0  # takes the older blocks first
    assert pool.allocate(1) and pool.evicted_due == 50.0
    pool.check()


def test_kv_tiers_count_the_wait(tmp_path: Path) -> None:
    """The report's KV-tier numbers: the store-wait run's passes waited 3.016 ms in all."""
    scenario = SCENARIOS["store-wait"]
    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(json.dumps(r) + "\n" for r in scenario["trace"]))
    config = copy.deepcopy(scenario["config"])
    config["traffic"]["source"]["paths"] = [str(trace)]
    tiers = simulate(parse_config(config)).extensions["kv_tiers"]
    assert tiers["store_wait_ms"] == pytest.approx(3.016) and tiers["shared_pool_ranks"] == 0
