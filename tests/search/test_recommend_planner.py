"""The `planner:` section of a recommend config as upstream AISimulate 0.13 reads it: policy and
the four preset groups (scaling_policy, fpm_sampling, load_sensitivity, load_predictor) are
searched, a candidate carries only the knobs its scaling policy uses, and throughput scaling is
searched only with a goodput target and a ttft_ms + itl_ms SLA."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from search_helpers import config
from servesim.search.outputs import varying_knobs
from servesim.search.planner_domains import PRESETS
from servesim.search.run import Search
from servesim.search.schema import RecommendConfig
from servesim.search.space import build_branches

ONE_SHAPE = {"engine.workers.aggregated.parallelism": {"preset": [{"replicas": 2, "tensor": 1, "pipeline": 1,
                                                                   "attention_data": 1, "moe_tensor": 1,
                                                                   "moe_expert": 1}]},
             "engine.workers.aggregated.scheduler.max_sequences": 16}
GOODPUT = {"optimization.target": "goodput"}


def _key(value: dict) -> str:
    return json.dumps(value, sort_keys=True)


def _space(planner: dict, **changes: object) -> dict:
    cfg = RecommendConfig.model_validate(config(planner=planner, **ONE_SHAPE, **changes))
    (branch,) = build_branches(cfg, False, lambda *args: True)
    return {d.name: d.values for d in branch.dims if d.name.startswith("planner.")} | {
        k: v for k, v in branch.fixed.items() if k.startswith("planner.")}


def test_empty_section_searches_upstream_defaults_without_throughput_scaling() -> None:
    # throughput_per_gpu: upstream drops every throughput-scaling policy (they need a goodput target)
    assert _space({}) == {"planner.policy": ("disabled", "enabled"),
                          "planner.scaling_policy": ("disabled", "load_180_5", "load_180_10"),
                          "planner.load_sensitivity": tuple(PRESETS["load_sensitivity"])}


def test_goodput_target_searches_every_scaling_policy_and_the_throughput_groups() -> None:
    space = _space({}, **GOODPUT)
    assert space["planner.scaling_policy"] == tuple(PRESETS["scaling_policy"])
    assert space["planner.fpm_sampling"] == ("small", "default", "large", "fine")
    assert len(space["planner.load_predictor"]) == 11
    assert "planner.load_sensitivity" in space


def test_goodput_with_an_e2e_only_sla_drops_throughput_scaling() -> None:
    space = _space({}, **GOODPUT, evaluation={"sla": {"e2e_ms": 5000}})
    assert space["planner.scaling_policy"] == ("disabled", "load_180_5", "load_180_10")


def test_preset_false_drops_throughput_scaling_silently_without_a_goodput_target() -> None:
    # as upstream: only a preset list that names a throughput-scaling policy is refused
    assert _space({"scaling_policy": {"preset": False}})["planner.scaling_policy"] == (
        "disabled", "load_180_5", "load_180_10", "load_600_5", "load_600_10")


def test_disabled_policy_searches_nothing_else() -> None:
    assert _space({"policy": "disabled"}) == {"planner.policy": "disabled"}


def test_preset_false_expands_the_flat_keys_over_upstream_defaults() -> None:
    space = _space({"policy": "enabled", "scaling_policy": {"preset": False}, "enable_throughput_scaling": False,
                    "enable_load_scaling": True, "load_adjustment_interval_seconds": {"choices": [5, 30]},
                    "load_sensitivity": {"preset": False}, "load_scaling_down_sensitivity": 75})
    assert space["planner.policy"] == "enabled"
    # the one equal to a named preset takes its name
    assert space["planner.scaling_policy"] == ("load_180_5", "load_180_30", "load_600_5", "load_600_30")
    assert space["planner.load_sensitivity"] == ("75/3", "75/5", "75/8")


def test_fpm_preset_false_keeps_perfect_square_buckets_and_predictor_family_labels() -> None:
    space = _space({"policy": "enabled", "scaling_policy": {"preset": ["throughput_180_5"]},
                    "fpm_sampling": {"preset": False}, "max_num_fpm_samples": 64,
                    "load_predictor": {"preset": False, "type": {"choices": ["constant", "prophet"]}},
                    "load_predictor_log1p": False}, **GOODPUT)
    assert space["planner.fpm_sampling"] == ("64/4", "default", "64/64")
    # constant ignores the window and Kalman parameters: one preset; prophet: one per window
    assert space["planner.load_predictor"] == ("constant_last", "prophet_w20_raw", "prophet_w50_raw")
    assert "planner.load_sensitivity" not in space  # no load-scaling policy


@pytest.mark.parametrize("planner, changes, message", [
    ({"policy": {"choices": ["enabled", "auto"]}}, {}, "planner.policy must be enabled or disabled"),
    ({"scaling_policy": {"preset": ["throughput_180_5", "load_180_5"]}}, {}, "needs a goodput target"),
    ({"scaling_policy": {"preset": ["throughput_180_5"]}}, {"optimization.target": "goodput",
                                                          "evaluation": {"sla": {"e2e_ms": 900}}},
     "ttft_ms and itl_ms"),
    ({"scaling_policy": {"preset": False}, "enable_throughput_scaling": True}, {},
     "every planner.scaling_policy scales by throughput"),
    ({"scaling_policy": {"preset": ["load_5"]}}, {}, "no preset 'load_5'"),
    ({"enable_load_scaling": True}, {}, "cannot be combined with its flat keys"),
    ({"fpm_sampling": {"preset": ["small"]}, "max_num_fpm_samples": 8}, {}, "given as presets"),
    ({"fpm_sampling": {"preset": [{"max_num_fpm_samples": 8, "fpm_sample_bucket_size": 10}]}}, {},
     "perfect square"),
    ({"load_sensitivity": {"preset": [{"load_scaling_down_sensitivity": 80}]}}, {}, "missing the keys"),
    ({"load_sensitivity": {"preset": [{"load_scaling_down_sensitivity": 180, "load_min_observations": 3}]}}, {},
     r"\[0, 100\]"),
    ({"scaling_policy": {"preset": [{"enable_throughput_scaling": False, "enable_load_scaling": False,
                                     "throughput_adjustment_interval_seconds": 180,
                                     "load_adjustment_interval_seconds": None}]}}, {}, "null adjustment"),
    ({"load_predictor": "arima"}, {}, "preset group"),
    ({"load_predictor": {"preset": False, "type": "lstm"}}, {}, "must be one of constant"),
    ({"scaling_policy": {"preset": []}}, {}, "non-empty"),
    ({"min_workers": -1}, {}, "planner.min_workers must be an integer >= 0"),
])
def test_upstream_rules(planner: dict, changes: dict, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        RecommendConfig.model_validate(config(planner=planner, **changes))


def test_cli_refuses_a_bad_planner_domain_with_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from servesim.cli import main

    path = tmp_path / "rec.yaml"
    path.write_text(yaml.safe_dump(config(planner={"scaling_policy": {"preset": ["hybrid_180_5"]}})))
    assert main(["recommend", "-c", str(path), "--output-dir", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "planner" in err and "hybrid_180_5" in err and "goodput target" in err
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_search_replays_each_distinct_planner_and_shows_the_varying_knobs() -> None:
    data = config(planner={"policy": {"choices": ["disabled", "enabled"]},
                           "scaling_policy": {"preset": ["disabled", "load_180_5"]},
                           "load_sensitivity": {"preset": ["default", "aggressive"]},
                           "max_num_gpus": 4},
                  **ONE_SHAPE, **{"optimizer.algorithm": "grid", "optimizer.max_trials": 20})
    result = Search(RecommendConfig.model_validate(data)).run()
    planners = [result.configs[e["trial"]]["planner"] for e in result.entries if e["trial"] in result.configs]
    # policy disabled and the 'disabled' scaling policy are the same fixed fleet: three in all
    assert sorted(planners, key=_key) == sorted([
        {"policy": "disabled"},
        {"policy": "enabled", "target": "throughput", "max_num_gpus": 4, "enable_throughput_scaling": False,
         "enable_load_scaling": True, "throughput_adjustment_interval_seconds": 180,
         "load_adjustment_interval_seconds": 5, "load_scaling_down_sensitivity": 80, "load_min_observations": 5},
        {"policy": "enabled", "target": "throughput", "max_num_gpus": 4, "enable_throughput_scaling": False,
         "enable_load_scaling": True, "throughput_adjustment_interval_seconds": 180,
         "load_adjustment_interval_seconds": 5, "load_scaling_down_sensitivity": 70, "load_min_observations": 3},
    ], key=_key)
    replayed = [e for e in result.entries if e["eval_seconds"] is not None]
    assert len(replayed) == 3 and all(e["status"] in ("feasible", "misses_target") for e in replayed)
    disabled = next(e for e in replayed if e["knobs"]["planner.policy"] == "disabled")
    assert [k for k in disabled["knobs"] if k.startswith("planner.")] == ["planner.policy"]
    columns = dict(varying_knobs(replayed))
    assert columns["planner"] == "planner.policy"
    assert columns["load_sensitivity"] == "planner.load_sensitivity"


def test_throughput_scaling_candidate_gets_every_group_and_replays() -> None:
    data = config(planner={"policy": "enabled", "scaling_policy": {"preset": ["hybrid_180_5"]},
                           "fpm_sampling": {"preset": ["fine"]}, "load_sensitivity": {"preset": ["conservative"]},
                           "load_predictor": {"preset": ["kalman_reactive_log1p"]}, "max_num_gpus": 4},
                  **ONE_SHAPE, **GOODPUT, **{"optimizer.algorithm": "grid", "optimizer.max_trials": 4})
    result = Search(RecommendConfig.model_validate(data)).run()
    (entry,) = [e for e in result.entries if e["eval_seconds"] is not None]
    assert entry["status"] in ("feasible", "misses_target")
    assert result.configs[entry["trial"]]["planner"] == {
        "policy": "enabled", "target": "sla", "max_num_gpus": 4,
        "enable_throughput_scaling": True, "enable_load_scaling": True,
        "throughput_adjustment_interval_seconds": 180, "load_adjustment_interval_seconds": 5,
        "max_num_fpm_samples": 128, "fpm_sample_bucket_size": 64,
        "load_scaling_down_sensitivity": 90, "load_min_observations": 8,
        "load_predictor": "kalman", "load_predictor_log1p": True, "kalman_q_level": 10.0, "kalman_q_trend": 1.0,
        "kalman_r": 5.0, "kalman_min_points": 3}


def test_min_workers_domains_and_the_disaggregated_ones() -> None:
    from search_helpers import disaggregated

    assert _space({"policy": "enabled", "min_workers": {"choices": [0, 1]},
                   "prefill_min_workers": {"choices": [1, 2]}})["planner.min_workers"] == (0, 1)
    assert "planner.prefill_min_workers" not in _space({"policy": "enabled", "prefill_min_workers": 2})
    cfg = RecommendConfig.model_validate(disaggregated(planner={"policy": "enabled",
                                                                "prefill_min_workers": {"choices": [1, 2]}}))
    names = {d.name for b in build_branches(cfg, False, lambda *args: True) for d in b.dims}
    assert "planner.prefill_min_workers" in names
