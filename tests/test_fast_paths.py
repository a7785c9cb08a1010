"""The fast paths (decode cohorts, run-ahead passes, per-worker replay) give byte-identical
reports to the plain path: one pass at a time on the shared clock, every request explicit.

`tests/test_invariants.py` checks the same on random deployments; this file pins it on named
configurations, including ones that make each fast path do its most (large synthetic loads,
time caps, attention DP, random routing, speculative decoding, SGLang, prefix sharing).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import CASES, without_host_fields

from servesim import simulate
from servesim.config import SimConfig, load_config, parse_config
from servesim.cluster.steady import SteadyReplay
from servesim.runtime.isolated import IsolatedReplay



def synthetic(workers: dict[str, Any], *, backend: str = "vllm", requests: int = 400,
              rps: float = 200, router: dict | None = None, **traffic: Any) -> dict[str, Any]:
    engine: dict[str, Any] = {"model": "m", "hardware": "h200_sxm", "backend": backend,
                              "workers": {"aggregated": workers}}
    if backend == "vllm":
        engine["context_length"] = 8192
    config: dict[str, Any] = {
        "engine": engine,
        "traffic": {"source": {"type": "synthetic", "input_tokens": 300, "output_tokens": 60},
                    "load": {"type": "poisson", "requests_per_second": rps, "seed": 7},
                    "stop": {"requests": requests}, **traffic},
    }
    if router is not None:
        config["router"] = router
    return config


FIXED = {"type": "fixed", "prefill_ms": 20, "decode_ms": 10}
SMALL_KV = {"block_size": 16, "capacity": {"type": "fixed", "blocks": 400}}

CONFIGS: dict[str, Any] = {
    "p1-like": synthetic({"parallelism": {"replicas": 4}, "timing": FIXED,
                          "kv_cache": {"capacity": {"type": "fixed", "blocks": 2000}}}),
    "kv-pressure-preemption": synthetic({"parallelism": {"replicas": 2}, "timing": FIXED, "kv_cache": SMALL_KV,
                                         "scheduler": {"max_batched_tokens": 256}}, rps=400),
    "attention-dp": synthetic({"parallelism": {"replicas": 2, "attention_data": 2}, "timing": {"type": "polynomial"},
                               "kv_cache": SMALL_KV}),
    "random-router": synthetic({"parallelism": {"replicas": 3}, "timing": FIXED, "kv_cache": SMALL_KV},
                               router={"policy": "random", "seed": 3}),
    "speculative": synthetic({"parallelism": {"replicas": 2}, "timing": FIXED, "kv_cache": SMALL_KV,
                              "speculative": {"num_speculative_tokens": 2, "acceptance_rates": [0.7, 0.4]}}),
    "sglang": synthetic({"parallelism": {"replicas": 2}, "timing": FIXED,
                         "kv_cache": {"block_size": 4, "capacity": {"type": "fixed", "blocks": 2000}}},
                        backend="sglang"),
    "mooncake-prefix": CASES / "replay" / "05-mooncake-prefix-cache" / "config.yaml",
    "time-cap": CASES / "replay" / "10-max-virtual-time-cap" / "config.yaml",
    "closed-loop-engine-limits": CASES / "replay" / "12-engine-limits" / "config.yaml",
    "kv-router": (CASES / "replay" / "05-mooncake-prefix-cache" / "config.yaml", {"policy": "kv_router"}),
}
SHARED_CLOCK = {"closed-loop-engine-limits", "kv-router"}
"""Configurations the per-worker replay must not take (closed loop; a stateful router)."""


def parsed(config: dict[str, Any] | Path | tuple[Path, dict[str, Any]]) -> SimConfig:
    """One of `CONFIGS`, validated."""
    if isinstance(config, tuple):  # a case's config with a router section added
        path, router = config
        return parse_config({**yaml.safe_load(path.read_text()), "router": router}, base_dir=path.parent)
    if isinstance(config, Path):
        return load_config(config)
    return parse_config(config)


def report(config: dict[str, Any] | Path | tuple[Path, dict[str, Any]], fast: bool, capture: bool = True) -> str:
    result = simulate(parsed(config), capture_per_request=capture, fast=fast)
    return json.dumps({"summary": without_host_fields(result.to_dict()), "extensions": result.extensions,
                       "first_rejection": result.first_rejection}, sort_keys=True)


def per_worker_replays(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The per-worker replays (`IsolatedReplay`, or `SteadyReplay` for alike requests) that run
    from now on, as they start."""
    runs: list[Any] = []
    for replay in (IsolatedReplay, SteadyReplay):
        monkeypatch.setattr(replay, "run", lambda self, run=replay.run: runs.append(self) or run(self))
    return runs


@pytest.mark.parametrize("name", list(CONFIGS))
def test_fast_and_plain_reports_are_byte_identical(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    runs = per_worker_replays(monkeypatch)
    fast = report(CONFIGS[name], fast=True)
    assert bool(runs) == (name not in SHARED_CLOCK), "which replay the fast path chose"
    assert fast == report(CONFIGS[name], fast=False)


@pytest.mark.parametrize("name", ["p1-like", "kv-pressure-preemption", "attention-dp", "sglang", "time-cap"])
@pytest.mark.parametrize("window", [1, 7])
def test_routing_ahead_in_small_windows_changes_nothing(name: str, window: int,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The per-worker replay routes requests a window at a time and pauses every worker at the
    next request not routed yet; windows of 1 or 7 requests (pauses in every state: idle, in a
    pass, in a run ahead) give the same report as the plain path."""
    import servesim.runtime.isolated as isolated

    monkeypatch.setattr(isolated, "ROUTE_WINDOW", window)
    windows = per_worker_replays(monkeypatch)
    fast = report(CONFIGS[name], fast=True)
    assert windows, "the per-worker replay ran"
    assert fast == report(CONFIGS[name], fast=False)


FOLDED = {
    **CONFIGS,
    "sla-goodput": CASES / "replay" / "02-polynomial-poisson-sla" / "config.yaml",
    "client-timeouts": synthetic({"parallelism": {"replicas": 2}, "timing": FIXED, "kv_cache": SMALL_KV},
                                 rps=400, client_timeout_seconds=1.0),
}


@pytest.mark.parametrize("name", list(FOLDED))
def test_folding_requests_as_they_end_changes_nothing(name: str) -> None:
    """Without per-request capture the collector hands each request to the report's tally as it
    ends and drops its record; the summary and extensions are those of the kept records."""
    folded = report(FOLDED[name], fast=True, capture=False)
    assert '"completed_requests": 0,' not in folded
    kept = json.loads(report(FOLDED[name], fast=True))
    assert kept["summary"].pop("per_request")
    assert folded == json.dumps(kept, sort_keys=True)



@pytest.mark.parametrize("name", list(FOLDED))
def test_the_html_reports_samples_need_no_kept_records(name: str) -> None:
    """`--report`'s latency samples and time series are the same whether the records are kept
    (with per-request capture) or folded as the requests end (without)."""
    import numpy as np

    folded = simulate(parsed(FOLDED[name]), timeseries=True)
    kept = simulate(parsed(FOLDED[name]), timeseries=True, capture_per_request=True)
    assert folded.latency is not None and kept.latency is not None
    assert len(folded.latency.arrival_ms) > 0
    for field in ("ttft_ms", "tpot_ms", "e2e_ms", "itl_ms", "itl_weights", "arrival_ms", "completion_ms"):
        assert np.array_equal(getattr(folded.latency, field), getattr(kept.latency, field), equal_nan=True), field
    assert repr(folded.timeseries) == repr(kept.timeseries)


SETTLED = {
    **FOLDED,
    "disaggregated": CASES / "replay" / "11-disagg-kv-transfer" / "config.yaml",
    "agentic-rejected-parent": CASES / "traffic" / "agentic_mooncake-vllm-fixed-rejected-parent" / "config.yaml",
    "agentic-kv-pressure": CASES / "traffic" / "agentic_v2-sglang-fixed-kv-pressure" / "config.yaml",
    "rejections": synthetic({"parallelism": {"replicas": 2}, "timing": FIXED,
                             "kv_cache": {"block_size": 16, "capacity": {"type": "fixed", "blocks": 40}}},
                            source={"type": "synthetic-session", "new_input_tokens_per_turn": 200,
                                    "output_tokens_per_turn": 20, "session": {"turns": 3}},
                            load={"type": "poisson", "sessions_per_second": 100, "seed": 7},
                            stop={"sessions": 150}),
}


def _tiny_tally(monkeypatch: pytest.MonkeyPatch, settle_every: int, spool_rows: int, read_rows: int) -> None:
    """Make the report's tally settle every few requests and spool its columns (read back a few
    rows at a time) past a few rows."""
    import servesim.report.columns as columns
    import servesim.report.tally as tally

    monkeypatch.setattr(tally, "SETTLE_EVERY", settle_every)
    monkeypatch.setattr(tally, "SPOOL_ROWS", spool_rows)
    monkeypatch.setattr(columns, "READ_ROWS", read_rows)


@pytest.mark.parametrize("name", list(SETTLED))
@pytest.mark.parametrize("sizes", [(1, 0, 1), (7, 3, 5), (64, 100, 32)])
def test_settling_and_spooling_the_tally_changes_nothing(name: str, sizes: tuple[int, int, int],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A tally that settles the ended requests every few requests and spools its columns to a
    scratch file (so the summary reads them a chunk at a time) gives the report, time series and
    latency samples byte for byte as one kept in memory."""
    import numpy as np

    whole = simulate(parsed(SETTLED[name]), timeseries=True)
    assert whole.summary["completed_requests"] > 0
    _tiny_tally(monkeypatch, *sizes)
    import servesim.report.summary as summary

    chunked = []
    original = summary.exact_stats_chunked
    monkeypatch.setattr(summary, "exact_stats_chunked", lambda *args: chunked.append(args) or original(*args))
    settled = simulate(parsed(SETTLED[name]), timeseries=True)
    assert bool(chunked) == (whole.summary["completed_requests"] > sizes[1]), "the summary read the spooled columns"
    assert json.dumps(without_host_fields(settled.to_dict()), sort_keys=True) == json.dumps(
        without_host_fields(whole.to_dict()), sort_keys=True)
    assert settled.extensions == whole.extensions
    assert whole.latency is not None and settled.latency is not None
    for field in ("ttft_ms", "tpot_ms", "e2e_ms", "itl_ms", "itl_weights", "arrival_ms", "completion_ms"):
        assert np.array_equal(getattr(settled.latency, field), getattr(whole.latency, field), equal_nan=True), field
    assert repr(settled.timeseries) == repr(whole.timeseries)


def test_the_tally_holds_what_is_in_flight_not_every_request(monkeypatch: pytest.MonkeyPatch) -> None:
    """Settling as it goes, the tally keeps unsettled only the requests ending out of request
    order (those still in flight, or routed ahead in the same window), whatever the run's length."""
    import servesim.report.tally as tally
    import servesim.runtime.isolated as isolated

    _tiny_tally(monkeypatch, 32, 64, 16)
    monkeypatch.setattr(isolated, "ROUTE_WINDOW", 64)
    left = []
    original = tally.RequestTally._settle

    def settle(self: tally.RequestTally, final: bool = False) -> None:
        original(self, final)
        if not final:
            left.append(len(self._every_rid))

    monkeypatch.setattr(tally.RequestTally, "_settle", settle)
    result = simulate(parsed(synthetic({"parallelism": {"replicas": 4}, "timing": FIXED, "kv_cache": SMALL_KV},
                                       requests=4000, rps=60)))  # ~1 s per request: ~60 in flight
    assert result.summary["completed_requests"] == 4000
    assert len(left) > 50
    assert max(left) < 200, "unsettled requests stay within the routing window and those in flight"
