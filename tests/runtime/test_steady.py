"""The steady replay (`servesim.cluster.steady`) gives the plain path's report, takes the runs
it is meant for, and hands every other run (or one that leaves its class mid-way) to the
general engine."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import without_host_fields
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servesim import simulate
from servesim.cluster import steady
from servesim.config import parse_config
from servesim.engine.vllm.steady import NotSteady
from servesim.errors import SimulationError
from servesim.report.render import write_records_jsonl
from servesim.report.spool import RecordSpool
from servesim.runtime.isolated import IsolatedReplay

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks" / "configs"


class Replays:
    """Which replays a run used: steady ones (with their pass counts), steady ones abandoned,
    general per-worker ones."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.steady: list[int] = []
        self.abandoned = 0
        self.isolated = 0
        run_steady, run_isolated = steady.SteadyReplay.run, IsolatedReplay.run

        def steady_run(replay: steady.SteadyReplay) -> float:
            try:
                now = run_steady(replay)
            except NotSteady:
                self.abandoned += 1
                raise
            self.steady.append(replay.passes)
            return now

        def isolated_run(replay: IsolatedReplay) -> float:
            self.isolated += 1
            return run_isolated(replay)

        monkeypatch.setattr(steady.SteadyReplay, "run", steady_run)
        monkeypatch.setattr(IsolatedReplay, "run", isolated_run)


def report(config: dict[str, Any], *, fast: bool = True, capture: bool = False, steady: bool = True) -> str:
    """The report as JSON without host fields; `steady=False`: the general engine only (the
    per-worker replay with its fast paths when `fast`)."""
    with pytest.MonkeyPatch.context() as patch:
        if not steady:
            patch.setattr("servesim.api._steady_replay", lambda *args: None)
        result = simulate(parse_config(config), fast=fast, capture_per_request=capture)
    return json.dumps({"summary": without_host_fields(result.to_dict()), "extensions": result.extensions,
                       "first_rejection": result.first_rejection}, sort_keys=True)


def deployment(*, replicas: int = 2, prompt: int = 128, output: int = 16, rps: float = 200, requests: int = 300,
               budget: int = 8192, sequences: int = 256, block_size: int = 64, blocks: int = 12000,
               prefill_ms: float = 20, decode_ms: float = 10, load: str = "poisson", seed: int = 5,
               router: dict[str, Any] | None = None, context: int = 32768,
               timing: dict[str, Any] | None = None, backend: str = "vllm", model: str = "m",
               prefix_caching: bool = True, **traffic: Any) -> dict[str, Any]:
    config: dict[str, Any] = {
        "engine": {"model": model, "hardware": "h200_sxm", "backend": backend, "context_length": context,
                   "workers": {"aggregated": {
                       "parallelism": {"replicas": replicas},
                       "scheduler": {"max_batched_tokens": budget, "max_sequences": sequences},
                       "kv_cache": {"block_size": block_size, "prefix_caching": prefix_caching,
                                    "capacity": {"type": "fixed", "blocks": blocks}},
                       "timing": timing or {"type": "fixed", "prefill_ms": prefill_ms, "decode_ms": decode_ms}}}},
        "traffic": {"source": {"type": "synthetic", "input_tokens": prompt, "output_tokens": output},
                    "load": {"type": load, "requests_per_second": rps,
                             **({"seed": seed} if load == "poisson" else {})},
                    "stop": {"requests": requests}, **traffic},
    }
    if router is not None:
        config["router"] = router
    return config


@pytest.mark.parametrize("name, requests", [("r1-fixed-report", 4000), ("p1-fixed-synthetic", 1500)])
def test_the_benchmark_runs_take_the_steady_replay(name: str, requests: int, monkeypatch: pytest.MonkeyPatch) -> None:
    config = yaml.safe_load((BENCHMARKS / f"{name}.yaml").read_text())
    config["traffic"]["stop"]["requests"] = requests
    replays = Replays(monkeypatch)
    fast = report(config)
    assert len(replays.steady) == 1 and replays.steady[0] > requests / 4, "the steady replay ran every pass"
    assert not replays.isolated and not replays.abandoned
    assert fast == report(config, fast=False)


def test_prompts_cut_by_the_token_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    """Bursts admit more prompts than the budget holds: the last one admitted is computed over
    several passes (and with a budget below the prompt, every one is)."""
    for budget in (1000, 250):
        config = deployment(replicas=1, prompt=300, output=30, budget=budget, sequences=64, rps=60, requests=400,
                            timing={"type": "polynomial"})
        replays = Replays(monkeypatch)
        fast = report(config)
        assert len(replays.steady) == 1 and not replays.abandoned
        assert fast == report(config, steady=False) == report(config, fast=False)


def test_a_pass_of_no_duration_hands_the_run_to_the_general_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    """A pass computing only part of a prompt, with no prefill cost, takes no time."""
    config = deployment(replicas=1, prompt=300, budget=100, sequences=1, prefill_ms=0)
    replays = Replays(monkeypatch)
    fast = report(config)
    assert replays.abandoned == 1 and not replays.steady and replays.isolated == 1
    assert fast == report(config, fast=False)


def test_a_clock_past_its_limit_fails_the_run_as_the_general_engine_does(monkeypatch: pytest.MonkeyPatch) -> None:
    config = deployment(load="constant_rate", rps=1e-9, requests=2)  # the second request 10¹² ms in
    replays = Replays(monkeypatch)
    with pytest.raises(SimulationError, match="simulated time reached") as steady:
        report(config)
    assert replays.abandoned == 1
    with pytest.raises(SimulationError) as general:
        report(config, steady=False)
    assert str(steady.value) == str(general.value)


@pytest.mark.parametrize("overrides", [
    {"blocks": 300, "block_size": 16},  # the KV pool could bind
    {"context": 140},  # requests stop at the context length
    {"client_timeout_seconds": 0.05},  # clients that give up
    {"backend": "trtllm"},  # another admission policy
    {"timing": {"type": "roofline", "mixed_pass": "fused"}, "model": "Qwen/Qwen3-8B"},  # fused passes, async
    {"router": {"policy": "least_loaded"}},  # a router placing by load
])
def test_runs_outside_the_class_never_take_it(overrides: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    config = deployment(**overrides)
    replays = Replays(monkeypatch)
    fast = report(config)
    assert not replays.steady and not replays.abandoned
    assert fast == report(config, fast=False)


def test_time_series_use_the_general_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    replays = Replays(monkeypatch)
    simulate(parse_config(deployment()), timeseries=True)
    assert not replays.steady and replays.isolated == 1


def test_spooled_records_are_the_general_engines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`predict --capture-per-request` spools each record as its request ends: the files are
    byte for byte those of the general engine's kept records."""
    config = deployment(replicas=3, requests=1500, rps=300, router={"policy": "random", "seed": 1})
    replays = Replays(monkeypatch)
    spool = RecordSpool(tmp_path / "spool")
    spooled = simulate(parse_config(config), capture_per_request=True, spool=spool)
    assert replays.steady and spooled.spool is spool
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("servesim.api._steady_replay", lambda *args: None)
        kept = simulate(parse_config(config), capture_per_request=True)
    assert kept.per_request is not None and len(kept.per_request) == len(spool) == 1500
    write_records_jsonl(kept.per_request, tmp_path / "kept.jsonl")
    spool.write_jsonl(tmp_path / "spooled.jsonl")
    assert (tmp_path / "spooled.jsonl").read_bytes() == (tmp_path / "kept.jsonl").read_bytes()
    assert without_host_fields(spooled.summary) == without_host_fields(kept.summary)
    assert spooled.extensions == kept.extensions
    spool.close()


@st.composite
def steady_deployments(draw: st.DrawFn) -> dict[str, Any]:
    """Random deployments in and around the steady class: constant-rate loads whose gaps equal
    pass durations (ties of arrival and pass end), budgets and sequence limits that bind,
    one-token outputs, KV pools and context lengths at the edge, timing models other than fixed,
    a front-end latency, random routing."""
    timing = draw(st.sampled_from([None, None, {"type": "polynomial"}, {"type": "roofline"},
                                   {"type": "roofline", "frontend_ms": 2.5}]))
    prompt = draw(st.sampled_from([1, 16, 64, 100, 128, 500]))
    output = draw(st.sampled_from([1, 2, 3, 16, 40]))
    block_size = draw(st.sampled_from([16, 64]))
    sequences = draw(st.integers(1, 48))
    per_request = -(-(prompt + output) // block_size)
    blocks = sequences * per_request + draw(st.sampled_from([-1, 0, 5000]))
    return deployment(
        replicas=draw(st.integers(1, 4)), prompt=prompt, output=output,
        rps=draw(st.sampled_from([10, 50, 100, 200, 400, 1000, 3000])),
        requests=draw(st.integers(1, 250)),
        budget=draw(st.sampled_from([sequences, prompt + sequences, 4 * prompt + sequences, 8192])),
        sequences=sequences, block_size=block_size, blocks=max(blocks, per_request),
        prefill_ms=draw(st.sampled_from([0, 5, 20])), decode_ms=draw(st.sampled_from([0, 10, 20])),
        prefix_caching=draw(st.booleans()), timing=timing, model="Qwen/Qwen3-8B" if timing and timing["type"] == "roofline" else "m",
        load=draw(st.sampled_from(["poisson", "constant_rate"])), seed=draw(st.integers(0, 50)),
        router=draw(st.sampled_from([None, {"policy": "random", "seed": 3}])),
        context=draw(st.sampled_from([32768, prompt + output, prompt + output - 1 if prompt + output > 2 else 32768])),
    )


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(config=steady_deployments(), capture=st.booleans())
def test_the_steady_replay_matches_the_general_engine(config: dict[str, Any], capture: bool) -> None:
    """Byte-identical to the general engine's report, with its fast paths and without (the
    plain path: one pass at a time on the shared clock)."""
    fast = report(config, capture=capture)
    assert fast == report(config, capture=capture, steady=False)
    assert fast == report(config, fast=False, capture=capture)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(config=steady_deployments(), window=st.sampled_from([1, 3, 64]))
def test_small_routing_windows_change_nothing(config: dict[str, Any], window: int) -> None:
    """The steady replay stops every worker at the next request not placed yet, in any state."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("servesim.runtime.isolated.ROUTE_WINDOW", window)
        small = report(config)
    assert small == report(config, steady=False)
