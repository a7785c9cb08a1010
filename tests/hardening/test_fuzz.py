"""Property-based fuzzing of `servesim predict` over configs, overrides and traces (issue 19).

For every generated case the command must end in bounded time and memory, without a traceback,
with exit code 0, 1 or 2; a successful run must account for every request of the input
(completed, rejected or incomplete) and give every rejected request its reason; a failed one
must leave no output behind.

The suite runs a fixed-seed slice of 30 cases. A longer run (random seed, N cases):

    SERVESIM_FUZZ_EXAMPLES=1000 python -m pytest tests/hardening/test_fuzz.py -p no:cacheprovider

(`SERVESIM_FUZZ_SEED=S` repeats a run; failing cases are printed by hypothesis, shrunk.)
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import math
import os
import resource
import signal
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, event, given, seed, settings
from hypothesis import strategies as st

from servesim.cli import main

EXAMPLES = int(os.environ.get("SERVESIM_FUZZ_EXAMPLES", "30"))
LONG_RUN = "SERVESIM_FUZZ_EXAMPLES" in os.environ
SECONDS_PER_CASE = 20.0
MEMORY_HEADROOM = 2 << 30
"""Address space a case may add to the test process (an over-allocation fails the case)."""

# -- value strategies: mostly sensible, sometimes hostile ------------------------------------

# Out of every bound, of the wrong type, or cheap: a value that is valid but expensive (10⁶
# requests) would only measure run time.
HOSTILE_SCALARS = st.sampled_from([
    None, True, -1, 0, 10**9 + 7, 10**12, 2**63, 10**30, -(10**12), 1e300, -1e300, 1e-300, math.inf, -math.inf,
    math.nan, "", "x", "1e3", [], {}, [1, 2], {"a": 1},
]).map(copy.deepcopy)  # a fresh copy: a later mutation must not edit the shared constant


def _small_int(lo: int, hi: int) -> st.SearchStrategy:
    return st.integers(lo, hi)


def _ms(hi: float) -> st.SearchStrategy:
    return st.floats(0, hi, allow_nan=False) | st.integers(0, int(hi))


@st.composite
def worker(draw: st.DrawFn, backend: str) -> dict[str, Any]:
    out: dict[str, Any] = {
        "parallelism": {"replicas": draw(_small_int(1, 4))},
        "scheduler": {"max_batched_tokens": draw(_small_int(1, 2048)), "max_sequences": draw(_small_int(1, 16))},
        "kv_cache": {"block_size": draw(st.sampled_from([1, 4, 16, 32, 64] if backend == "sglang" else [4, 16, 32, 64])),
                     "capacity": {"type": "fixed", "blocks": draw(_small_int(1, 600))},
                     "prefix_caching": draw(st.booleans())},
        "timing": draw(st.one_of(
            st.fixed_dictionaries({"type": st.just("fixed"), "prefill_ms": _ms(50), "decode_ms": _ms(10)}),
            st.just({"type": "polynomial"}),
            st.fixed_dictionaries({"type": st.just("roofline"), "mixed_pass": st.sampled_from(["sum", "fused"]),
                                   "frontend_ms": _ms(20)}),
        )),
    }
    if draw(st.integers(0, 5)) == 0:
        out["parallelism"]["attention_data"] = draw(_small_int(1, 3))
    if draw(st.integers(0, 6)) == 0:
        out["startup_seconds"] = draw(_ms(5))
    if backend == "sglang" and draw(st.booleans()):
        out["scheduler"]["sglang"] = {"schedule_policy": draw(st.sampled_from(["fifo", "lpm"])),
                                      "chunked_prefill_size": draw(_small_int(1, 4096))}
    if draw(st.integers(0, 6)) == 0:
        out["speculative"] = {"num_speculative_tokens": draw(_small_int(1, 3)),
                              "acceptance_rates": draw(st.lists(st.floats(0, 1), min_size=1, max_size=3)),
                              "seed": draw(_small_int(0, 100))}
    return out


@st.composite
def engine(draw: st.DrawFn) -> dict[str, Any]:
    backend = draw(st.sampled_from(["vllm", "vllm", "sglang", "trtllm"]))
    out: dict[str, Any] = {"model": "Qwen/Qwen3-8B", "hardware": "h200_sxm", "backend": backend,
                           "context_length": draw(_small_int(16, 8192))}
    if backend != "trtllm" and draw(st.integers(0, 4)) == 0:
        out["mode"] = "disaggregated"
        out["workers"] = {"prefill": draw(worker(backend)), "decode": draw(worker(backend))}
        if draw(st.booleans()):
            out["kv_transfer"] = {"bytes_per_token": draw(_small_int(1, 10**6)),
                                  "bandwidth_gb_per_second": draw(st.floats(0.001, 1000))}
    else:
        out["workers"] = {"aggregated": draw(worker(backend))}
    return out


TRACE_KEYS = ["timestamp", "input_length", "output_length", "hash_ids", "session_id", "delay"]


@st.composite
def trace_row(draw: st.DrawFn, timestamp: float) -> str:
    """One JSONL line: usually a valid mooncake row, sometimes a broken one."""
    kind = draw(st.integers(0, 59))
    if kind == 0:
        return draw(st.sampled_from([
            "not json", "[1, 2]", "{", '{"x": ' + "[" * 50_000 + "]" * 50_000 + "}", "null", '"str"',
            '{"hash_ids": [NaN], "output_length": 1}', '{"hash_ids": [1e400], "output_length": 1}',
            '{"hash_ids": [-1], "output_length": 1}', '{"hash_ids": [18446744073709551616], "output_length": 1}',
        ]))
    blocks = draw(st.integers(1, 12))
    row: dict[str, Any] = {
        "timestamp": timestamp,
        "output_length": draw(_small_int(0, 40)),
        "hash_ids": draw(st.lists(st.integers(0, 40), min_size=blocks, max_size=blocks)),
    }
    if draw(st.booleans()):
        row["input_length"] = draw(_small_int(1, blocks * 16))
    if draw(st.integers(0, 2)) == 0:
        row["session_id"] = draw(st.sampled_from(["a", "b", "c"]))
    if kind in (1, 2, 3):
        del row[draw(st.sampled_from(["timestamp", "output_length", "hash_ids"]))]
    if kind in (4, 5, 6):
        row[draw(st.sampled_from(TRACE_KEYS))] = draw(HOSTILE_SCALARS)
    return json.dumps(row, allow_nan=True)


@st.composite
def traffic(draw: st.DrawFn, trace_path: Path) -> tuple[dict[str, Any], list[str] | None]:
    kind = draw(st.sampled_from(["synthetic", "session", "trace"]))
    concurrency = {"type": "concurrency", "concurrency": draw(_small_int(1, 8))}
    poisson = {"type": "poisson", "requests_per_second": draw(st.floats(0.5, 2000)),
               "seed": draw(_small_int(0, 1000))}
    constant = {"type": "constant_rate", "requests_per_second": draw(st.floats(0.5, 2000))}
    if kind == "synthetic":
        source = {"type": "synthetic", "input_tokens": draw(_small_int(1, 6000)),
                  "output_tokens": draw(_small_int(1, 60))}
        load = draw(st.sampled_from([concurrency, poisson, constant]))
        return {"source": source, "load": load, "stop": {"requests": draw(_small_int(1, 30))}}, None
    if kind == "session":
        session = {"turns": draw(_small_int(2, 12)), "inter_turn_delay_ms": draw(_ms(500))}
        if draw(st.booleans()):
            session.update(shared_prefix_ratio=draw(st.floats(0, 1)), prefix_groups=draw(_small_int(1, 4)))
        source = {"type": "synthetic-session", "new_input_tokens_per_turn": draw(_small_int(1, 3000)),
                  "output_tokens_per_turn": draw(_small_int(1, 40)), "session": session}
        load = draw(st.sampled_from([concurrency, poisson]))
        if load["type"] == "poisson":
            load = {"type": "poisson", "sessions_per_second": load["requests_per_second"], "seed": load["seed"]}
        return {"source": source, "load": load, "stop": {"sessions": draw(_small_int(1, 6))}}, None
    times = sorted(draw(st.lists(st.integers(0, 20_000).map(float), min_size=1, max_size=12)))
    rows = [draw(trace_row(t)) for t in times]
    source = {"type": "trace", "paths": [str(trace_path)],
              "format": draw(st.sampled_from(["mooncake", "mooncake", "mooncake-delta"])),
              "block_size": draw(st.sampled_from([16, 16, 64]))}
    load = draw(st.sampled_from([concurrency, {"type": "trace_timestamps",
                                               "speedup": draw(st.floats(0.01, 100))}]))
    out: dict[str, Any] = {"source": source, "load": load}
    if draw(st.integers(0, 3)) == 0:
        out["stop"] = {"max_virtual_time_seconds": draw(st.floats(0.001, 100))}
    return out, rows


@st.composite
def case(draw: st.DrawFn, folder: Path) -> tuple[dict[str, Any], list[str] | None, list[str]]:
    config: dict[str, Any] = {"engine": draw(engine())}
    config["traffic"], rows = draw(traffic(folder / "trace.jsonl"))
    if draw(st.integers(0, 3)) == 0:
        config["router"] = {"policy": draw(st.sampled_from(["round_robin", "kv_router", "random", "least_loaded"])),
                            "seed": draw(_small_int(0, 10))}
    if draw(st.integers(0, 5)) == 0:
        config["planner"] = {"policy": "enabled", "target": draw(st.sampled_from(["load", "throughput"])),
                             "load_adjustment_interval_seconds": draw(_small_int(1, 5)),
                             "max_num_gpus": draw(_small_int(-1, 8)), "min_workers": draw(_small_int(0, 2))}
    if draw(st.integers(0, 5)) == 0:
        config["evaluation"] = {"sla": {"ttft_ms": draw(st.floats(0.1, 1000)), "itl_ms": draw(st.floats(0.1, 100))}}
    if draw(st.integers(0, 5)) == 0:
        config["traffic"]["client_timeout_seconds"] = draw(st.floats(0.001, 5))
    for _ in range(draw(st.sampled_from([0, 0, 0, 1, 1, 2, 3]))):
        _mutate(config, draw)
    args = ["--unservable", draw(st.sampled_from(["reject", "fail"]))]
    if draw(st.integers(0, 4)) == 0:
        key = draw(st.sampled_from(["traffic.stop.requests", "engine.context_length", "traffic.load.concurrency",
                                    "engine.workers.aggregated.parallelism.replicas", "evaluation", "x.y"]))
        value = draw(st.sampled_from(["1", "2e3", ".inf", "-5", "[1]", "{a: 1}", "null", "&a [*a]", "{a: 1, a: 2}"]))
        args += ["--set", f"{key}={value}"]
    return config, rows, args


def _leaves(node: Any, path: tuple = ()) -> list[tuple]:
    """Paths of every value in a nested dict/list config."""
    out = [path] if path else []
    if isinstance(node, dict):
        for key, value in node.items():
            out += _leaves(value, path + (key,))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            out += _leaves(value, path + (index,))
    return out


def _mutate(config: dict[str, Any], draw: st.DrawFn) -> None:
    """Replace one value of the config by a hostile one, drop it, or add an unknown key."""
    path = draw(st.sampled_from(_leaves(config)))
    parent = config
    for key in path[:-1]:
        parent = parent[key]
    action = draw(st.sampled_from(["hostile", "hostile", "hostile", "drop", "extra"]))
    if action == "hostile":
        parent[path[-1]] = draw(HOSTILE_SCALARS)
    elif action == "drop" and isinstance(parent, dict):
        del parent[path[-1]]
    elif isinstance(parent, dict):
        parent["unknown_key"] = 1


# -- one case ---------------------------------------------------------------------------------


class _Overran(BaseException):
    """The case ran past its time limit (a hang)."""


@contextlib.contextmanager
def _bounded(seconds: float, extra_memory: int):
    """Raise _Overran after `seconds`; refuse allocations beyond `extra_memory` more bytes."""
    def overran(signum: int, frame: Any) -> None:
        raise _Overran(f"no result within {seconds} s")

    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    with open("/proc/self/statm") as statm:
        in_use = int(statm.read().split()[0]) * resource.getpagesize()
    limit = in_use + extra_memory
    previous = signal.signal(signal.SIGALRM, overran)
    started = time.monotonic()
    outer, interval = signal.setitimer(signal.ITIMER_REAL, seconds)  # pytest-timeout's alarm, if any
    resource.setrlimit(resource.RLIMIT_AS, (limit if hard == resource.RLIM_INFINITY else min(limit, hard), hard))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if outer:
            signal.setitimer(signal.ITIMER_REAL, max(outer - (time.monotonic() - started), 1e-3), interval)
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def _input_requests(config: dict[str, Any], rows: list[str] | None) -> int | None:
    """Requests the input holds, for a config that validated (None when its shape does not say,
    e.g. a mutation removed a section the defaults then filled)."""
    traffic = config.get("traffic")
    source = traffic.get("source") if isinstance(traffic, dict) else None
    if not isinstance(source, dict):
        return None
    if source.get("type") == "trace":
        return sum(1 for row in rows if row.strip()) if rows is not None else None
    stop = traffic.get("stop") or {}
    if source.get("type") == "synthetic":
        count = stop.get("requests")
        return count if type(count) is int else None
    session = source.get("session") or {}
    turns, sessions = session.get("turns", 4), stop.get("sessions")
    return turns * sessions if type(turns) is int and type(sessions) is int else None


def run_case(folder: Path, config: dict[str, Any], rows: list[str] | None, args: list[str]) -> tuple[int, str]:
    config_path = folder / "config.yaml"
    config_path.write_text(yaml.safe_dump(config, allow_unicode=True))
    if rows is not None:
        (folder / "trace.jsonl").write_text("\n".join(rows) + "\n")
    out_dir = folder / "out"
    argv = ["predict", "-c", str(config_path), "--output-dir", str(out_dir), "--capture-per-request",
            "--format", "json", *args]
    stdout, stderr = io.StringIO(), io.StringIO()
    started = time.monotonic()
    with _bounded(SECONDS_PER_CASE, MEMORY_HEADROOM), contextlib.redirect_stdout(stdout), \
            contextlib.redirect_stderr(stderr):
        code = main(argv)
    seconds = time.monotonic() - started
    err = stderr.getvalue()
    assert code in (0, 1, 2), (code, err)
    assert "Traceback" not in err and "out of memory" not in err, err
    assert seconds < SECONDS_PER_CASE
    if code == 0:
        overridden = "--set" in args
        _check_accounting(out_dir, None if overridden else _input_requests(config, rows))
    else:
        assert err.strip(), "a failure explains itself on stderr"
        assert not (out_dir / "prediction.json").exists(), "a failed run leaves no result"
        assert stdout.getvalue() == ""
    return code, err


def _check_accounting(out_dir: Path, requests: int | None) -> None:
    report = json.loads((out_dir / "prediction.json").read_text())
    records = report["per_request"]
    statuses = [r["terminal_status"] for r in records]
    assert report["rejected_requests"] == statuses.count("rejected") + statuses.count("failed")
    assert report["completed_requests"] == sum(1 for r in records if r["terminal_status"] == "completed"
                                               and r["admission_count"] > 0)
    assert all(r.get("rejection_reason") for r in records if r["terminal_status"] in ("rejected", "failed"))
    if requests is not None:
        assert len(records) + report["incomplete_requests"] == requests, (len(records), report["incomplete_requests"])
    arrived = report["num_requests"]
    assert len(records) <= arrived <= len(records) + report["incomplete_requests"]
    for key, value in report.items():
        if isinstance(value, float):
            assert math.isfinite(value), key


# -- the property -----------------------------------------------------------------------------

_SETTINGS = settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=not LONG_RUN,
                     suppress_health_check=list(HealthCheck), print_blob=True)


def _seeded(test):
    value = os.environ.get("SERVESIM_FUZZ_SEED")
    return seed(int(value))(test) if value else test


@pytest.mark.timeout(0 if LONG_RUN else 300)  # a long run bounds each case itself
@_seeded
@_SETTINGS
@given(data=st.data())
def test_predict_never_crashes_hangs_or_loses_requests(tmp_path_factory, data):
    folder = tmp_path_factory.mktemp("fuzz")
    config, rows, args = data.draw(case(folder))
    code, _ = run_case(folder, config, rows, args)
    event(f"exit {code}")
