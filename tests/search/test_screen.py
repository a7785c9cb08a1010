"""Analytic screening: the estimate against the replay, how the model-guided search uses it, and
the workload profile it reads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from search_helpers import config, disaggregated
from servesim import simulate
from servesim.config import parse_config
from servesim.perf.timing import FixedTiming
from servesim.search.estimate import estimate, role_model
from servesim.search.profile import profile
from servesim.search.run import Search, SearchResult
from servesim.search.schema import RecommendConfig


def search(data: dict) -> tuple[Search, SearchResult]:
    s = Search(RecommendConfig.model_validate(data))
    return s, s.run()


def test_the_estimate_tracks_the_replay_on_every_candidate() -> None:
    _, result = search(config(**{"engine.backend": {"choices": ["vllm", "sglang"]}, "optimizer.max_trials": 200,
                                 "optimizer.algorithm": "bayesian"}))
    replayed = [e for e in result.entries if e["feasible"]]
    assert len(replayed) == 28  # the whole space: 2 backends x 7 shapes x 2 max_sequences
    for entry in replayed:
        assert entry["estimated_score"] == pytest.approx(entry["score"], rel=0.1)
    best_estimate = max(replayed, key=lambda e: e["estimated_score"])
    assert best_estimate["score"] == max(e["score"] for e in replayed)


def test_screening_opens_with_the_best_estimated_deployments_and_costs_no_trial() -> None:
    data = config(**{"engine.backend": {"choices": ["vllm", "sglang"]}, "optimizer.max_trials": 6,
                     "optimizer.algorithm": "bayesian"})
    s, result = search(data)
    replayed = [e for e in result.entries if e["eval_seconds"] is not None]
    assert len(replayed) == 6
    assert any("screened 28 candidates" in note for note in result.notes)
    opening = replayed[:3]  # half the budget
    deployments = {(e["knobs"]["engine.backend"], e["knobs"]["engine.workers.aggregated.parallelism.replicas"],
                    e["knobs"]["engine.workers.aggregated.parallelism.tensor"]) for e in opening}
    assert len(deployments) == 3
    estimates = [e["estimated_score"] for e in opening]
    assert estimates == sorted(estimates, reverse=True)
    ranked = [x.score for x in s.screen.rank(s.branches[0], 0)]
    assert estimates[0] == max(ranked)
    grid = search(config(data, **{"optimizer.algorithm": "grid", "optimizer.max_trials": 100}))[1]
    assert max(e["score"] for e in result.feasible) == max(e["score"] for e in grid.feasible)


def test_screen_false_restores_the_spread_start() -> None:
    _, result = search(config(**{"optimizer.max_trials": 5, "optimizer.algorithm": "bayesian",
                                 "optimizer.screen": False}))
    assert all(e["estimated_score"] is None for e in result.entries)
    assert not any("screened" in note for note in result.notes)


def test_random_and_grid_are_not_screened() -> None:
    for algorithm in ("random", "grid"):
        _, result = search(config(**{"optimizer.max_trials": 4, "optimizer.algorithm": algorithm}))
        assert all(e["estimated_score"] is None for e in result.entries)


def test_disaggregated_candidates_are_screened_too() -> None:
    data = disaggregated(**{"optimizer.algorithm": "bayesian", "optimizer.max_trials": 4,
                            "engine.workers.decode.scheduler.max_sequences": {"choices": [4, 8]}})
    _, result = search(data)
    replayed = [e for e in result.entries if e["eval_seconds"] is not None]
    assert len(replayed) == 4 and all(e["estimated_score"] is not None for e in replayed if e["feasible"])
    for entry in result.feasible:
        assert entry["estimated_score"] == pytest.approx(entry["score"], rel=0.25)


def test_a_candidate_the_estimate_cannot_score_is_kept_last_and_still_replayed(monkeypatch: pytest.MonkeyPatch) -> None:
    from servesim.search import screen

    real = screen.estimate

    def failing_for_tp2(config, models, prof):  # type: ignore[no-untyped-def]
        if config.engine.workers.aggregated.parallelism.tensor == 2:
            raise KeyError("no table entry")
        return real(config, models, prof)

    monkeypatch.setattr(screen, "estimate", failing_for_tp2)
    data = config(**{"engine.backend": {"choices": ["vllm", "sglang"]}, "optimizer.max_trials": 200,
                     "optimizer.algorithm": "bayesian"})
    s, result = search(data)
    ranked = s.screen.rank(s.branches[0], 0)
    unscored = [x for x in ranked if not x.estimated]
    assert unscored and ranked[-len(unscored):] == unscored  # last, never dropped
    assert len(ranked) == 28
    replayed = [e for e in result.entries if e["feasible"]]
    assert len(replayed) == 28  # the whole space is still replayed
    tp2 = [e for e in replayed if e["knobs"]["engine.workers.aggregated.parallelism.tensor"] == 2]
    assert tp2 and all(e["estimated_score"] is None for e in tp2)
    assert any("had no analytic estimate" in note for note in result.notes)


def _comparable(result: SearchResult) -> list[tuple]:
    return [(e["trial"], e["status"], e["score"], e["estimated_score"], json.dumps(e["knobs"], sort_keys=True))
            for e in result.entries]


def test_screened_bayesian_is_independent_of_parallelism() -> None:
    data = config(**{"engine.backend": {"choices": ["vllm", "sglang"]}, "optimizer.max_trials": 9,
                     "optimizer.algorithm": "bayesian"})
    one = search(config(data, **{"optimizer.parallelism": 1}))[1]
    three = search(config(data, **{"optimizer.parallelism": 3}))[1]
    assert _comparable(one) == _comparable(three)
    assert len([e for e in one.entries if e["eval_seconds"] is not None]) == 9


# -- the estimate's shape ------------------------------------------------------------------------

def _predict_config(rate: float | None, replicas: int, prefill_ms: float, decode_ms: float,
                    max_sequences: int = 64, requests: int = 200) -> dict:
    load = ({"type": "poisson", "requests_per_second": rate, "seed": 1} if rate is not None
            else {"type": "concurrency", "concurrency": 16})
    return {"engine": {"model": "Qwen/Qwen3-8B", "hardware": "h200_sxm", "context_length": 4096, "workers": {
                "aggregated": {"parallelism": {"replicas": replicas},
                               "scheduler": {"max_batched_tokens": 4096, "max_sequences": max_sequences},
                               "kv_cache": {"block_size": 16, "capacity": {"type": "fixed", "blocks": 4000}},
                               "timing": {"type": "fixed", "prefill_ms": prefill_ms, "decode_ms": decode_ms}}}},
            "traffic": {"source": {"type": "synthetic", "input_tokens": 512, "output_tokens": 64},
                        "load": load, "stop": {"requests": requests}}}


def _estimate(data: dict) -> dict:
    cfg = parse_config(data)
    worker = cfg.engine.roles["aggregated"]
    timing = FixedTiming(worker.timing.prefill_ms, worker.timing.decode_ms)  # type: ignore[union-attr]
    return estimate(cfg, {"aggregated": role_model(cfg, "aggregated", timing)}, profile(cfg))


def test_the_front_end_latency_is_part_of_the_estimated_ttft() -> None:
    from servesim.search import facts

    def both(frontend: float | None) -> tuple[dict, dict]:
        data = _predict_config(rate=2.0, replicas=1, prefill_ms=0, decode_ms=0, requests=60)
        data["engine"]["workers"]["aggregated"]["timing"] = {"type": "roofline", "mixed_pass": "sum", "frontend_ms": frontend}
        cfg = parse_config(data)
        model = role_model(cfg, "aggregated", facts.timing_model(cfg, "aggregated"))
        return estimate(cfg, {"aggregated": model}, profile(cfg)), simulate(cfg).summary

    (est0, replay0), (est1, replay1) = both(None), both(150.0)
    assert replay1["mean_ttft_ms"] - replay0["mean_ttft_ms"] == pytest.approx(150.0, rel=0.05)
    assert est1["mean_ttft_ms"] - est0["mean_ttft_ms"] == pytest.approx(150.0, rel=1e-9)


@pytest.mark.parametrize("rate, max_sequences", [(1.0, 64), (500.0, 8)])
def test_light_and_overloaded_runs_are_estimated_close_to_their_replay(rate: float, max_sequences: int) -> None:
    data = _predict_config(rate=rate, replicas=1, prefill_ms=20, decode_ms=10, max_sequences=max_sequences)
    est, replay = _estimate(data), simulate(parse_config(data)).summary
    for key in ("request_throughput_rps", "mean_ttft_ms", "mean_itl_ms"):
        assert est[key] == pytest.approx(replay[key], rel=0.05), key
    if rate > 100:  # served at capacity: 8 running, each batch of 8 prompts one 20 ms pass
        assert est["request_throughput_rps"] == pytest.approx(8 / (64 * 10 + 20) * 1000, rel=0.05)


@settings(max_examples=30, deadline=None)
@given(rate=st.floats(0.5, 200), replicas=st.integers(1, 3), prefill=st.floats(1, 100), decode=st.floats(1, 50))
def test_more_load_never_lowers_latency_and_more_replicas_never_lower_throughput(
        rate: float, replicas: int, prefill: float, decode: float) -> None:
    base = _estimate(_predict_config(rate, replicas, prefill, decode))
    busier = _estimate(_predict_config(rate * 1.5, replicas, prefill, decode))
    wider = _estimate(_predict_config(rate, replicas + 1, prefill, decode))
    assert busier["mean_ttft_ms"] >= base["mean_ttft_ms"] * (1 - 1e-9)
    assert wider["output_throughput_tok_s"] >= base["output_throughput_tok_s"] * (1 - 1e-9)
    assert wider["mean_ttft_ms"] <= base["mean_ttft_ms"] * (1 + 1e-9)


# -- the workload profile ------------------------------------------------------------------------

def test_the_profile_counts_prefixes_earlier_prompts_hold(tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    rows = [{"timestamp": 0, "input_length": 48, "output_length": 8, "hash_ids": [1, 2, 3]},
            {"timestamp": 100, "input_length": 48, "output_length": 8, "hash_ids": [1, 2, 4]},
            {"timestamp": 300, "input_length": 40, "output_length": 4, "hash_ids": [5, 2, 3]}]
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    data = _predict_config(None, 1, 10, 5)
    data["traffic"] = {"source": {"type": "trace", "format": "mooncake", "paths": [str(trace)], "block_size": 16},
                       "load": {"type": "trace_timestamps", "speedup": 2.0}}
    cfg = parse_config(data)
    prof = profile(cfg)
    assert (prof.requests, prof.isl, prof.osl) == (3, pytest.approx(136 / 3), pytest.approx(20 / 3))
    assert prof.prefix == pytest.approx(32 / 3)  # only the second request starts with known blocks
    arrivals = prof.arrivals(cfg)
    assert arrivals.span_ms == pytest.approx(150) and arrivals.rate_per_ms == pytest.approx(2 / 150)
