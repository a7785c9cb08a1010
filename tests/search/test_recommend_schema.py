"""The recommend schema reads the reference's recommend configs and names the key of a bad one."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from search_helpers import config
from servesim.errors import ConfigError
from servesim.search.cli import load_recommend_config
from servesim.search.schema import Choices, Range, RecommendConfig

CASES = Path(__file__).resolve().parents[1] / "cases" / "recommend"


def _write(tmp_path: Path, data: dict) -> str:
    path = tmp_path / "recommend.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


@pytest.mark.parametrize("case", sorted(p.name for p in CASES.iterdir() if p.is_dir()))
def test_reference_case_configs_parse_unchanged(case: str) -> None:
    cfg = load_recommend_config(str(CASES / case / "config.yaml"), [])
    assert cfg.optimizer.algorithm in ("random", "auto")
    assert cfg.engine.modes in (["aggregated"], ["disaggregated"])


def test_defaults_follow_the_reference() -> None:
    cfg = RecommendConfig.model_validate({"engine": {"model": "m", "hardware": "h", "workers": {
        "aggregated": {}, "prefill": {}, "decode": {}}}})
    assert cfg.engine.modes == ["aggregated", "disaggregated"]
    assert cfg.engine.backends == ["vllm", "sglang"]
    assert cfg.optimization.target == "throughput"
    assert cfg.optimization.constraints.max_candidate_gpus == 32
    assert (cfg.optimizer.max_trials, cfg.optimizer.parallelism, cfg.optimizer.seed) == (320, 16, 42)
    assert cfg.optimizer.algorithm == "auto"  # servesim's default; the reference's is bayesian


def test_domains_of_every_kind() -> None:
    data = config(**{
        "engine.workers.aggregated.scheduler.max_batched_tokens": {"range": {"min": 2048, "max": 8192, "step": 2048}},
        "engine.workers.aggregated.scheduler.max_sequences": {"range": {"min": 8, "max": 256, "scale": "log"}},
        "engine.workers.aggregated.kv_cache.capacity": {"type": "default",
                                                        "memory_fraction": {"range": {"min": 0.8, "max": 0.95}}},
        "traffic.load": {"type": "poisson", "requests_per_second": {"choices": [2, 4.5]}, "seed": 1},
        "traffic.stop": {"requests": 10}})
    worker = RecommendConfig.model_validate(data).engine.workers.aggregated
    assert isinstance(worker.scheduler.max_batched_tokens, Range)
    assert worker.scheduler.max_sequences.range.scale == "log"
    assert isinstance(worker.kv_cache.capacity.memory_fraction, Range)
    assert isinstance(RecommendConfig.model_validate(data).traffic.load.requests_per_second, Choices)


@pytest.mark.parametrize("change, key", [
    ({"engine.workers.aggregated.parallelism": {"preset": "default", "tensor": {"choices": [1, 2]}}}, "parallelism"),
    ({"engine.workers.aggregated.scheduler.max_sequences": {"range": {"min": 1, "max": 8}}}, "max_sequences"),
    ({"engine.workers.aggregated.scheduler.max_sequences": {"choices": [4, 4]}}, "max_sequences"),
    ({"engine.workers.aggregated.scheduler.max_sequences": {"choices": ["4"]}}, "max_sequences"),
    ({"engine.workers.aggregated.kv_cache.capacity": {"type": "default", "memory_fraction": {"choices": [1.2]}}},
     "memory_fraction"),
    ({"optimization.target": "goodput", "evaluation": {}}, "evaluation.sla"),
    ({"optimization.target": "min_gpus", "traffic.load": {"type": "poisson", "requests_per_second": 4.0}},
     "min_goodput_rps"),
    ({"optimization": {"target": "min_gpus", "constraints": {"min_goodput_rps": 9.0}},
      "traffic.load": {"type": "poisson", "requests_per_second": 4.0}}, "cannot exceed the offered"),
    ({"optimization.strict_sla": True, "evaluation": {}}, "strict_sla"),
    ({"optimization.constraints.min_goodput_rps": 1.0}, "only used with target 'min_gpus'"),
    ({"engine.hardware": "auto"}, "optimization.hardware"),
    ({"optimizer.algorithm": "annealing"}, "optimizer.algorithm"),
    ({"engine.mode": {"choices": ["aggregated", "disaggregated"]}}, "workers.prefill"),
    ({"traffic.load": {"type": "kv_capacity_fraction"}}, "fraction"),
])
def test_a_bad_config_names_the_key_and_the_rule(tmp_path: Path, change: dict, key: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_recommend_config(_write(tmp_path, config(**change)), [])
    assert key in str(err.value)


def test_overrides_may_set_optimizer_and_optimization(tmp_path: Path) -> None:
    cfg = load_recommend_config(_write(tmp_path, config()), ["optimizer.max_trials=7",
                                                              "optimization.target=ttft"])
    assert (cfg.optimizer.max_trials, cfg.optimization.target) == (7, "ttft")


def test_hardware_auto_takes_optimization_hardware() -> None:
    cfg = RecommendConfig.model_validate(config(**{"engine.hardware": "auto", "optimization.hardware": "h100_sxm"}))
    assert cfg.hardware == "h100_sxm"


def test_passed_through_sections_are_checked_by_the_predict_schema() -> None:
    from servesim.search.run import Search

    data = config(**{"engine.workers.aggregated.timing": {"type": "fixed", "prefill_ms": 30}})
    with pytest.raises(ConfigError, match="decode_ms"):
        Search(RecommendConfig.model_validate(data)).run()
