"""Absurd but well-typed values: refused by the schema with the key and the rule (exit 2), or
simulated in bounded time and memory — never a hang, a blow-up or a traceback (issue 19)."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import signal
import time

import pytest

from hostile import finish, run_in_process, run_servesim, start_servesim, write_config

AGG = "engine.workers.aggregated"


def _run(tmp_path, changes, *extra, timeout=30.0, memory_mb=1536, isolated=True):
    """`servesim predict` on the base config with `changes`: in a subprocess with time and memory
    limits (`isolated`, where the old code hung or exhausted memory), else in-process."""
    config = write_config(tmp_path, changes)
    args = ["predict", "-c", str(config), "--output-dir", str(tmp_path / "o"), "--format", "json", *extra]
    return run_servesim(args, timeout=timeout, memory_mb=memory_mb) if isolated else run_in_process(args)


def _refused(run, key: str) -> None:
    run.assert_clean(2)
    assert key in run.stderr, run.stderr


# -- refused by the schema ---------------------------------------------------------------------


@pytest.mark.parametrize("key, value", [
    (f"{AGG}.timing.decode_ms", 1e300),
    (f"{AGG}.timing.decode_ms", 1e308),
    (f"{AGG}.timing.decode_ms", float("inf")),
    (f"{AGG}.timing.prefill_ms", float("nan")),
    (f"{AGG}.timing.prefill_ms", float("-inf")),
    (f"{AGG}.startup_seconds", float("inf")),
    (f"{AGG}.startup_seconds", 1e300),
])
def test_non_finite_or_absurd_timing_is_a_config_error(tmp_path, key, value):
    _refused(_run(tmp_path, {key: value}, isolated=False), key)


@pytest.mark.parametrize("key, value", [
    (f"{AGG}.parallelism.replicas", 10**6),
    ("traffic.stop.requests", 10**12),
])
def test_absurd_counts_are_a_config_error(tmp_path, key, value):
    _refused(_run(tmp_path, {key: value}, timeout=20, memory_mb=1024), key)


def test_absurd_session_turns_are_a_config_error(tmp_path):
    source = {"type": "synthetic-session", "new_input_tokens_per_turn": 10, "output_tokens_per_turn": 2,
              "session": {"turns": 10**7}}
    run = _run(tmp_path, {"traffic.source": source, "traffic.stop": {"sessions": 1}}, timeout=20, memory_mb=1024)
    _refused(run, "traffic.source.session.turns")


@pytest.mark.parametrize("tensor, budget", [(2, 1), (4, 2), (1, 0)])
def test_planner_budget_below_one_worker_is_a_config_error(tmp_path, tensor, budget):
    """Dynamo refuses a GPU budget that cannot hold the minimum fleet (min_workers x GPUs per worker)."""
    run = _run(tmp_path, {
        f"{AGG}.parallelism": {"replicas": 2, "tensor": tensor},
        "planner": {"policy": "enabled", "target": "load", "max_num_gpus": budget},
        "traffic.load": {"type": "poisson", "requests_per_second": 5},
        "traffic.stop": {"requests": 50},
    }, isolated=False)
    _refused(run, "planner.max_num_gpus")


def test_planner_allowed_to_scale_to_zero_does_not_crash(tmp_path):
    run = _run(tmp_path, {
        f"{AGG}.parallelism": {"replicas": 2, "tensor": 2},
        "planner": {"policy": "enabled", "target": "load", "max_num_gpus": 1, "min_workers": 0},
        "traffic.load": {"type": "poisson", "requests_per_second": 5},
        "traffic.stop": {"requests": 50},
    }, "--capture-per-request", isolated=False)
    run.assert_clean(0, 1)


# -- simulated in bounded time and memory -------------------------------------------------------


@pytest.mark.parametrize("backend", ["vllm", "trtllm", "sglang"])
def test_a_billion_token_prompt_is_rejected_without_building_it(tmp_path, backend):
    run = _run(tmp_path, {"engine.backend": backend, "traffic.source.input_tokens": 10**9},
               "--capture-per-request", timeout=30, memory_mb=1024)
    run.assert_clean(0)
    report = json.loads((tmp_path / "o" / "prediction.json").read_text())
    assert report["completed_requests"] == 0 and report["num_requests"] == 5
    assert [r["terminal_status"] for r in report["per_request"]] == ["rejected"] * 5
    assert all(r["rejection_reason"] for r in report["per_request"])


def test_many_replicas_are_added_in_linear_time(tmp_path):
    """100,000 replicas (quadratic worker addition took minutes)."""
    run = _run(tmp_path, {f"{AGG}.parallelism.replicas": 100_000}, timeout=40, memory_mb=3072)
    run.assert_clean(0)
    assert json.loads(run.stdout)["completed_requests"] == 5


def test_arrivals_are_generated_lazily(tmp_path):
    """10⁸ requests: the replay starts at once, in bounded memory (nothing is generated up front):
    within seconds the progress line (stderr on a terminal) counts finished requests."""
    config = write_config(tmp_path, {"traffic.stop.requests": 10**8,
                                     "traffic.load": {"type": "poisson", "requests_per_second": 1000}})
    controller, terminal = pty.openpty()
    started = time.monotonic()
    process = start_servesim(["predict", "-c", str(config), "--output-dir", str(tmp_path / "o")], memory_mb=1024,
                             stderr=terminal)
    os.close(terminal)
    seen = b""
    try:
        while time.monotonic() - started < 30 and not re.search(rb"\] [1-9][\d,]*/100000000 requests", seen):
            if select.select([controller], [], [], 0.5)[0]:
                seen += os.read(controller, 4096)
    finally:
        process.send_signal(signal.SIGINT)
        run = finish(process, 30, started)
        os.close(controller)
    assert re.search(rb"\] [1-9][\d,]*/100000000 requests", seen), seen[-500:]
    assert run.returncode == 130


def test_a_long_session_stops_at_the_context_length(tmp_path):
    """10,000 turns of 200 tokens each: past the 4096-token context every later turn is rejected
    with its reason, without re-expanding an ever longer prompt."""
    turns = 10_000
    source = {"type": "synthetic-session", "new_input_tokens_per_turn": 200, "output_tokens_per_turn": 2,
              "session": {"turns": turns}}
    run = _run(tmp_path, {"traffic.source": source, "traffic.stop": {"sessions": 1},
                          f"{AGG}.kv_cache.capacity.blocks": 400},
               "--capture-per-request", timeout=40)
    run.assert_clean(0)
    report = json.loads((tmp_path / "o" / "prediction.json").read_text())
    statuses = [r["terminal_status"] for r in report["per_request"]]
    assert len(statuses) == turns and 0 < statuses.count("completed") < 25
    assert statuses.count("rejected") == turns - statuses.count("completed")
    assert all("context" in r["rejection_reason"] for r in report["per_request"] if r["terminal_status"] == "rejected")
