"""Whole searches on fixed-timing configs: determinism, static rejections, scoring, outputs."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import yaml

from search_helpers import config, disaggregated, without_timing_fields
from servesim.api import simulate
from servesim.config import load_config
from servesim.errors import ConfigError
from servesim.search import outputs
from servesim.search.run import Search, SearchResult
from servesim.search.schema import RecommendConfig
from servesim.search.score import PARETO_OBJECTIVES


def search(data: dict, **options) -> SearchResult:
    return Search(RecommendConfig.model_validate(data), **options).run()


def ledger(result: SearchResult) -> dict:
    return json.loads(json.dumps(outputs.ledger(result)))


def test_grid_replays_every_candidate_once_and_ranks_them() -> None:
    result = search(config())
    assert result.algorithm == "grid"
    assert len(result.entries) == 7 * 2 and all(e["status"] == "feasible" for e in result.entries)
    ranked = result.ranked()
    assert [e["rank"] for e in ranked] == list(range(1, 15))
    scores = [e["score"] for e in ranked]
    assert scores == sorted(scores, reverse=True)
    best = ranked[0]
    assert best["score"] == pytest.approx(best["metrics"]["output_throughput_tok_s"] / best["metrics"]["avg_gpus"])


@pytest.mark.parametrize("algorithm", ["random", "bayesian", "grid"])
def test_results_do_not_depend_on_parallelism(algorithm: str) -> None:
    data = config(**{"optimizer.algorithm": algorithm, "optimizer.max_trials": 8,
                     "engine.backend": {"choices": ["vllm", "sglang"]}})
    one = ledger(search(config(data, **{"optimizer.parallelism": 1})))
    three = ledger(search(config(data, **{"optimizer.parallelism": 3})))
    assert without_timing_fields(one) == without_timing_fields(three)
    assert sum(e["eval_seconds"] is not None for e in one["candidates"]) == 8


def test_bayesian_evaluates_each_candidate_once_and_is_seeded() -> None:
    data = config(**{"optimizer.algorithm": "bayesian", "optimizer.max_trials": 12,
                     "engine.workers.aggregated.scheduler.max_sequences": {"choices": [2, 4, 8, 16]}})
    first, again = search(data), search(data)
    knobs = [json.dumps(e["knobs"], sort_keys=True) for e in first.entries]
    assert len(knobs) == len(set(knobs))
    assert without_timing_fields(ledger(first)) == without_timing_fields(ledger(again))
    other = search(config(data, **{"optimizer.seed": 4}))
    assert [e["knobs"] for e in other.entries] != [e["knobs"] for e in first.entries]


def test_auto_is_grid_when_the_space_fits_and_model_guided_otherwise() -> None:
    assert search(config(**{"optimizer.algorithm": "auto"})).algorithm == "grid"
    small = search(config(**{"optimizer.algorithm": "auto", "optimizer.max_trials": 5}))
    assert small.algorithm == "bayesian" and sum(e["eval_seconds"] is not None for e in small.entries) == 5


def test_rejections_name_their_reason_before_any_replay() -> None:
    data = config(**{"engine.workers.aggregated.parallelism": {
        "preset": False, "tensor": {"choices": [1, 3]}, "replicas": {"choices": [1, 5]}}})
    result = search(data)
    by_shape = {(e["knobs"]["engine.workers.aggregated.parallelism.tensor"],
                 e["knobs"]["engine.workers.aggregated.parallelism.replicas"]): e for e in result.entries}
    assert by_shape[(3, 1)]["status"] == "unsupported" and "divisible" in by_shape[(3, 1)]["reason"]
    assert by_shape[(1, 5)]["status"] == "over_budget" and "max_candidate_gpus=4" in by_shape[(1, 5)]["reason"]
    assert by_shape[(1, 1)]["status"] == "feasible"
    assert all(e["eval_seconds"] is None for e in result.entries if not e["feasible"])


def test_a_kv_pool_smaller_than_the_context_is_rejected() -> None:
    data = config(**{"engine.workers.aggregated.kv_cache.capacity.blocks": 100,  # 1600 tokens < 4096
                     "engine.workers.aggregated.parallelism": {"preset": False, "tensor": {"choices": [1, 2]}}})
    result = search(data)
    assert {e["status"] for e in result.entries} == {"kv_too_small"}
    assert "4096-token sequence" in result.entries[0]["reason"]
    with pytest.raises(ConfigError, match="4096-token sequence"):  # the default pool: nothing can serve
        search(config(**{"engine.workers.aggregated.kv_cache.capacity.blocks": 100}))


def test_disaggregated_attention_dp_and_trtllm_are_unsupported() -> None:
    data = disaggregated(**{"engine.backend": {"choices": ["vllm", "trtllm"]},
                            "engine.workers.decode.parallelism": {"preset": False,
                                                                  "attention_data": {"choices": [1, 2]},
                                                                  "replicas": 1}})
    result = search(data)
    trt = [e for e in result.entries if e["knobs"]["engine.backend"] == "trtllm" and e["status"] != "over_budget"]
    assert trt and all(e["status"] == "unsupported" and "trtllm" in e["reason"] for e in trt)
    dp2 = [e for e in result.entries if e["knobs"]["engine.workers.decode.parallelism.attention_data"] == 2
           and e["knobs"]["engine.backend"] == "vllm" and e["status"] != "over_budget"]
    assert dp2 and all(e["status"] == "unsupported" and "attention" in e["reason"] for e in dp2)
    assert any(e["feasible"] for e in result.entries)


def test_a_candidate_past_its_time_limit_is_timed_out() -> None:
    data = config(**{"traffic.stop.requests": 200000, "traffic.load.concurrency": 1,
                     "optimizer.candidate_timeout_seconds": 0.5, "optimizer.max_trials": 2,
                     "optimizer.algorithm": "random"})
    result = search(data)
    assert [e["status"] for e in result.entries] == ["timed_out", "timed_out"]
    assert "0.5 s" in result.entries[0]["reason"]


def test_a_failing_replay_is_reported_and_the_search_goes_on(tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 100, "output_length": 4, "hash_ids": [1]}\nnot json\n')
    data = config(**{"traffic": {"source": {"type": "trace", "paths": [str(trace)]},
                                 "load": {"type": "concurrency", "concurrency": 2}},
                     "optimizer.max_trials": 2, "optimizer.algorithm": "random"})
    result = search(data)
    assert [e["status"] for e in result.entries] == ["failed", "failed"]
    assert "trace.jsonl:2" in result.entries[0]["reason"]


def test_every_written_config_replays_to_the_ledger_numbers(tmp_path: Path) -> None:
    data = disaggregated(**{"optimizer.max_trials": 4, "optimizer.algorithm": "random",
                            "optimization.gpu_hour_price": 2.5})
    result = search(data)
    outputs.write_recommendations(tmp_path, result)
    outputs.write_ledger(tmp_path, result)
    saved = json.loads((tmp_path / "recommendation.json").read_text())
    written = [e for e in saved["candidates"] if e["config_path"]]
    assert written
    for entry in written:
        report = simulate(load_config(tmp_path / entry["config_path"])).summary
        for key, value in entry["metrics"].items():
            if key in report:
                assert report[key] == value, key
        price = 2.5 * report["gpu_hours"] / report["total_output_tokens"] * 1e6
        assert entry["metrics"]["cost_per_million_output_tokens"] == pytest.approx(price)
    rows = list(csv.DictReader((tmp_path / "recommendation.csv").open()))
    assert len(rows) == len(saved["candidates"])


def test_min_gpus_prefers_the_fewest_gpus_that_sustain_the_rate() -> None:
    data = config(**{"optimization": {"target": "min_gpus",
                                      "constraints": {"max_candidate_gpus": 4, "min_goodput_rps": 5.0}},
                     "traffic.load": {"type": "poisson", "requests_per_second": 8.0, "seed": 5},
                     "traffic.stop.requests": 80, "evaluation.sla": {"ttft_ms": 60, "itl_ms": 13}})
    result = search(data)
    ranked = result.ranked()
    assert ranked, "some candidate must sustain 5 SLA-meeting requests per second"
    assert all(e["meets_target"] for e in ranked)
    assert [e["used_gpus"] for e in ranked] == sorted(e["used_gpus"] for e in ranked)
    assert all(e["metrics"]["goodput_request_throughput_rps"] >= 5.0 and e["metrics"]["sla_attainment"] >= 0.9
               for e in ranked)
    missed = [e for e in result.replayed if e not in ranked]
    assert missed and all(e["status"] == "misses_target" and e["shortfall"] > 0 for e in missed)
    assert all(e["metrics"]["goodput_request_throughput_rps"] < 5.0 or e["metrics"]["sla_attainment"] < 0.9
               for e in missed)


def test_pareto_returns_the_non_dominated_set(tmp_path: Path) -> None:
    data = config(**{"optimization.target": "pareto",
                     "traffic.load": {"type": "kv_capacity_fraction", "fraction": {"choices": [0.001, 0.01]}}})
    result = search(data)
    front = result.ranked()
    feasible = result.feasible
    assert front and len(front) < len(feasible)

    def dominated(e: dict) -> bool:
        return any(all(o["objectives"][k] >= e["objectives"][k] for k in PARETO_OBJECTIVES)
                   and any(o["objectives"][k] > e["objectives"][k] for k in PARETO_OBJECTIVES) for o in feasible)

    assert not any(dominated(e) for e in front)
    assert all(dominated(e) for e in feasible if e not in front)
    outputs.write_recommendations(tmp_path, result)
    outputs.write_ledger(tmp_path, result)
    rows = list(csv.DictReader((tmp_path / "pareto.csv").open()))
    assert len(rows) == len(front)
    concurrency = {yaml.safe_load((tmp_path / e["config_path"]).read_text())["traffic"]["load"]["concurrency"]
                   for e in front}
    assert concurrency <= {max(1, int(f * 2000 * 16 * r // (512 + 16))) for f in (0.001, 0.01) for r in (1, 2, 3, 4)}


def test_grid_covers_every_mode_and_budgets_split_between_modes() -> None:
    from search_helpers import DISAGG_WORKER

    both = config(**{"engine.mode": {"choices": ["aggregated", "disaggregated"]},
                     "engine.workers.prefill": DISAGG_WORKER, "engine.workers.decode": DISAGG_WORKER})
    grid = search(both)
    assert grid.algorithm == "grid"
    assert {e["mode"] for e in grid.entries} == {"aggregated", "disaggregated"}
    assert len(grid.entries) == 14 + 11
    random_run = search(config(both, **{"optimizer.algorithm": "random", "optimizer.max_trials": 7}))
    modes = [e["mode"] for e in random_run.entries if e["eval_seconds"] is not None]
    assert (modes.count("aggregated"), modes.count("disaggregated")) == (4, 3)
