"""Only a candidate that meets the target is a pick; an impossible target exits 1 naming the
closest; the sizing answer (fewest GPUs per shape) and the coverage of a truncated space."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

from search_helpers import config
from servesim.search import outputs
from servesim.search.run import Search, SearchResult
from servesim.search.schema import RecommendConfig

SERVESIM = [sys.executable, "-m", "servesim"]
GATED = {"optimization.sla_attainment": 0.9}
"""The product default (the helpers turn the gate off for the mechanics tests)."""


def search(data: dict) -> SearchResult:
    return Search(RecommendConfig.model_validate(data)).run()


def _cli(tmp_path: Path, data: dict, *args: str) -> subprocess.CompletedProcess:
    path = tmp_path / "recommend.yaml"
    path.write_text(yaml.safe_dump(data))
    return subprocess.run([*SERVESIM, "recommend", "-c", str(path), "--output-dir", str(tmp_path / "out"), *args],
                          capture_output=True, text=True, timeout=300)


def test_a_candidate_that_misses_the_sla_is_never_a_pick() -> None:
    result = search(config(**GATED, **{"optimizer.algorithm": "grid"}))
    missed = [e for e in result.replayed if not e["feasible"]]
    picks = result.ranked()
    assert missed and picks, "this space has candidates on both sides of the SLA"
    assert all(e["metrics"]["sla_attainment"] >= 0.9 for e in picks)
    for entry in missed:
        assert entry["status"] == "misses_target" and entry["rank"] is None
        assert entry["metrics"]["sla_attainment"] < 0.9 and "sla_attainment" in entry["reason"]
        assert 0 < entry["shortfall"] <= 1


def test_strict_sla_also_gates_the_means() -> None:
    # no attainment gate (the helpers' BASE has sla_attainment: null); max_sequences 4 queues,
    # so its mean TTFT (~390 ms) breaks a 200 ms bound that the 16-sequence shapes (~40 ms) keep
    loose = {"evaluation.sla": {"ttft_ms": 200, "itl_ms": 20}}
    plain = search(config(**loose, **{"optimizer.algorithm": "grid"}))
    strict = search(config(**loose, **{"optimizer.algorithm": "grid", "optimization.strict_sla": True}))
    assert len(strict.ranked()) < len(plain.ranked())
    assert all(e["metrics"]["mean_tpot_ms"] <= 20 and e["metrics"]["mean_ttft_ms"] <= 200 for e in strict.ranked())
    assert any("(strict_sla)" in e["reason"] for e in strict.entries if e["status"] == "misses_target")


def test_an_impossible_sla_exits_1_names_the_closest_and_writes_no_pick(tmp_path: Path) -> None:
    data = config(**GATED, **{"evaluation.sla": {"ttft_ms": 1, "itl_ms": 1}, "optimizer.max_trials": 6,
                              "optimizer.algorithm": "random"})
    done = _cli(tmp_path, data, "--format", "json")
    assert done.returncode == 1
    assert "no candidate meets the target; closest: trial" in done.stderr and "missing by" in done.stderr
    assert json.loads(done.stdout) == []
    assert not (tmp_path / "out" / "recommendations").exists()
    ledger = json.loads((tmp_path / "out" / "recommendation.json").read_text())
    assert ledger["closest"] is not None and all(e["rank"] is None for e in ledger["candidates"])


def test_json_config_path_is_the_output_dir_as_given(tmp_path: Path) -> None:
    done = _cli(tmp_path, config(**{"optimizer.max_trials": 3, "optimizer.algorithm": "random"}), "--format", "json")
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    assert rows and all(row["config_path"] == str(tmp_path / "out" / "recommendations" / f"{row['rank']:04d}.yaml")
                        for row in rows)
    assert all(Path(row["config_path"]).is_file() for row in rows)


def test_a_truncated_grid_says_how_much_it_evaluated(tmp_path: Path) -> None:
    data = config(**{"optimizer.algorithm": "grid", "optimizer.max_trials": 4,
                     "engine.backend": {"choices": ["vllm", "sglang"]}})
    result = search(data)
    assert result.coverage["evaluated"] < result.coverage["space"]
    note = [n for n in result.notes if "candidates evaluated" in n]
    assert note and note[0].startswith(f"{result.coverage['evaluated']} of {result.coverage['space']} ")
    assert "never tried: sglang" in note[0]
    assert "candidates evaluated" in outputs.stdout_table(result, tmp_path)


def test_the_table_shows_the_knobs_that_vary_and_the_sla_columns(tmp_path: Path) -> None:
    result = search(config(**{"optimizer.algorithm": "grid"}))
    table = outputs.stdout_table(result, tmp_path)
    head = next(line for line in table.splitlines() if line.startswith("rank"))
    assert "max_sequences" in head and "SLA met" in head and "p90 ttft ms" in head and "p90 itl ms" in head
    rows = [line.split() for line in table.splitlines() if line[:1].isdigit()]
    assert len({tuple(r[1:-1]) for r in rows}) == len(rows), "no two rows look alike"


def test_sizing_finds_the_fewest_gpus_per_shape() -> None:
    # one shape (tp1): the SLA needs several replicas at this load; the search alone is too
    # short to try them all, the sizing phase bisects to the boundary
    data = config(**GATED, **{
        "engine.workers.aggregated.parallelism": {"preset": False, "tensor": 1, "replicas": {"range": {"min": 1, "max": 16, "step": 1}}},
        "engine.workers.aggregated.scheduler.max_sequences": 16,
        "optimization.constraints.max_candidate_gpus": 16,
        "traffic.load": {"type": "poisson", "requests_per_second": 90.0, "seed": 2}, "traffic.stop.requests": 400,
        "optimizer.algorithm": "bayesian", "optimizer.max_trials": 10})
    result = search(data)
    (row,) = result.sizing
    curve = {p["gpus"]: p["meets_target"] for p in row["curve"]}
    assert row["fewest_gpus"] is not None and curve[row["fewest_gpus"]]
    assert row["misses_at"] == row["fewest_gpus"] - 1 and curve[row["misses_at"]] is False
    assert any(e["phase"] == "sizing" for e in result.entries)
    assert sum(e["eval_seconds"] is not None for e in result.entries) <= 10
    # the boundary is real: every replica count below it misses, every one above holds
    full = search(config(data, **{"optimizer.algorithm": "grid", "optimizer.max_trials": 40}))
    truth = {e["used_gpus"]: e["feasible"] for e in full.replayed}
    assert min(g for g, ok in truth.items() if ok) == row["fewest_gpus"]


def test_the_closest_is_the_smallest_shortfall_and_the_table_says_by_how_much(tmp_path: Path) -> None:
    data = config(**GATED, **{"evaluation.sla": {"ttft_ms": 35, "itl_ms": 5}, "optimizer.algorithm": "grid"})
    done = _cli(tmp_path, data)
    assert done.returncode == 1
    ledger = json.loads((tmp_path / "out" / "recommendation.json").read_text())
    missed = [e for e in ledger["candidates"] if e["status"] == "misses_target"]
    assert missed and not any(e["feasible"] for e in ledger["candidates"])
    closest = min(missed, key=lambda e: (e["shortfall"], e["used_gpus"], e["trial"]))
    assert ledger["closest"] == closest["trial"]
    said = f"closest: trial {closest['trial']} "
    assert said in done.stderr and said in done.stdout
    assert f"missing by {100 * closest['shortfall']:.0f} %" in done.stdout
    assert all(text in done.stdout for text in closest["missed"])
    assert "No candidate meets the target" in done.stdout and not (tmp_path / "out" / "recommendations").exists()


def test_min_goodput_rps_gates_the_picks() -> None:
    data = config(**{"optimization.target": "min_gpus", "optimization.constraints.min_goodput_rps": 40.0,
                     "engine.workers.aggregated.scheduler.max_sequences": 16,
                     "traffic.load": {"type": "poisson", "requests_per_second": 60.0, "seed": 2},
                     "traffic.stop.requests": 200, "optimizer.algorithm": "grid"})
    result = search(data)
    picks, missed = result.ranked(), [e for e in result.replayed if not e["feasible"]]
    assert picks and missed
    assert all(e["metrics"]["goodput_request_throughput_rps"] >= 40.0 for e in picks)
    assert all("min_goodput_rps 40" in e["reason"] for e in missed)
    assert picks[0]["used_gpus"] == min(e["used_gpus"] for e in picks)


def test_every_configuration_is_replayed_and_listed_once(tmp_path: Path) -> None:
    # a model-guided search asks for points it already has; the sizing phase proposes replica
    # counts the search tried: each concrete config still has one ledger entry and one table row
    data = config(**GATED, **{
        "engine.workers.aggregated.parallelism": {"preset": False, "tensor": {"choices": [1, 2]},
                                                   "replicas": {"range": {"min": 1, "max": 6, "step": 1}}},
        "engine.workers.aggregated.scheduler.max_sequences": {"choices": [8, 16]},
        "optimization.constraints.max_candidate_gpus": 8,
        "traffic.load": {"type": "poisson", "requests_per_second": 40.0, "seed": 2}, "traffic.stop.requests": 120,
        "optimizer.algorithm": "bayesian", "optimizer.max_trials": 30})
    result = search(data)
    configs = [json.dumps(result.configs[e["trial"]], sort_keys=True) for e in result.entries if e["trial"] in result.configs]
    assert len(configs) == len(set(configs)) == len(result.configs)
    knobs = [json.dumps(e["knobs"], sort_keys=True) for e in result.entries]
    assert len(knobs) == len(set(knobs))
    assert sum(e["eval_seconds"] is not None for e in result.entries) <= 30
    table = outputs.stdout_table(result, tmp_path)
    rows = [line.split()[1:-1] for line in table.splitlines() if line[:1].isdigit()]
    assert rows and len({tuple(r) for r in rows}) == len(rows)
