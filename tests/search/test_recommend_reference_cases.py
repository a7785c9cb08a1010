"""Recommendations run to the same numbers in servesim and in the reference.

Each case under tests/cases/recommend/ holds a recommend config, the reference's own
recommendations (`reference/NNNN.yaml`, its ranking in `reference/stdout.json`), servesim's
recommendations for the same config (`servesim/NNNN.yaml`) and the reference's `predict` of each
of those (`servesim/NNNN.prediction.json`, made with ../shared/reference/run.sh's aisimulate).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml

from servesim.api import simulate
from servesim.config import load_config
from servesim.search import outputs
from servesim.search.cli import load_recommend_config
from servesim.search.run import Search

CASES = Path(__file__).resolve().parents[1] / "cases" / "recommend"
NAMES = sorted(p.name for p in CASES.iterdir() if p.is_dir())
WITH_SERVESIM = [name for name in NAMES if (CASES / name / "servesim").is_dir()]
HOST_FIELDS = {"wall_time_ms", "processed_tokens_per_s", "processed_output_tokens_per_s"}


@pytest.fixture(autouse=True)
def reference_database(reference_systems: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The reference's timing database (its newest versions are what recommend writes)."""
    monkeypatch.setenv("SERVESIM_AIC_SYSTEMS_PATH", str(reference_systems))


def _close(a: float, b: float, key: str) -> bool:
    if key.startswith(("mean_", "std_")):
        return math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-12)
    return a == b


@pytest.mark.slow
@pytest.mark.parametrize("case", WITH_SERVESIM)
def test_servesim_recommendations_replay_to_the_reference_numbers(case: str) -> None:
    for path in sorted((CASES / case / "servesim").glob("*.yaml")):
        expected = json.loads(path.with_suffix(".prediction.json").read_text())
        got = simulate(load_config(path, ["compat=reference"])).summary
        for key, value in expected.items():
            if key in HOST_FIELDS or not isinstance(value, (int, float)):
                continue
            assert _close(got[key], value, key), f"{path.name} {key}: {got[key]} != {value}"


@pytest.mark.parametrize("case", NAMES)
def test_reference_recommendations_score_the_same_in_servesim(case: str) -> None:
    cfg = load_recommend_config(str(CASES / case / "config.yaml"), [])
    target = cfg.optimization.target
    for row in json.loads((CASES / case / "reference" / "stdout.json").read_text()):
        summary = simulate(load_config(CASES / case / "reference" / Path(row["config_path"]).name,
                                       ["compat=reference"])).summary
        gpus = summary["gpu_hours"] / (summary["duration_ms"] / 3_600_000)
        values = {"throughput_per_gpu": summary["output_throughput_tok_s"] / gpus,
                  "throughput_per_user": summary["mean_output_token_throughput_per_user"],
                  "goodput_per_gpu": summary.get("goodput_output_throughput_tok_s", 0.0) / gpus}
        expected = row["objectives"] if target == "pareto" else {target: row["score"]}
        for name, value in expected.items():
            assert math.isclose(values[name], value, rel_tol=1e-12), (row["config_path"], name)


@pytest.mark.parametrize("case", WITH_SERVESIM)
def test_servesim_recommend_still_writes_the_stored_configs(case: str, tmp_path: Path) -> None:
    path = CASES / case / "config.yaml"
    # the stored picks predate the attainment gate (the reference's behaviour: no gate)
    result = Search(load_recommend_config(str(path), ["compat=reference", "optimization.sla_attainment=null"]),
                    base_dir=path.parent).run()
    outputs.write_recommendations(tmp_path, result)
    stored = sorted((CASES / case / "servesim").glob("*.yaml"))
    written = sorted((tmp_path / "recommendations").glob("*.yaml"))
    assert [p.name for p in written] == [p.name for p in stored]
    for new, old in zip(written, stored, strict=True):
        assert yaml.safe_load(new.read_text()) == yaml.safe_load(old.read_text()), old.name


def test_kv_capacity_fraction_resolves_to_the_reference_concurrency() -> None:
    """The reference's recommendations of 03-kv-fraction (its own run at max_trials 3) carry the
    concurrency each candidate's KV pools give; servesim resolves the same candidates alike."""
    from servesim.search.candidate import Materializer
    from servesim.search.space import Candidate, Shape

    case = CASES / "03-kv-fraction"
    materializer = Materializer(load_recommend_config(str(case / "config.yaml"), ["compat=reference"]), case)
    base = "engine.workers.aggregated"
    for path in sorted((case / "reference").glob("*.yaml")):
        ref = yaml.safe_load(path.read_text())
        worker = ref["engine"]["workers"]["aggregated"]
        found = set()
        for fraction in (0.01, 0.05, 0.2):
            knobs = {f"{base}.kv_cache.block_size": 64, f"{base}.kv_cache.capacity.memory_fraction": 0.9,
                     f"{base}.scheduler.max_batched_tokens": worker["scheduler"]["max_batched_tokens"],
                     f"{base}.scheduler.max_sequences": worker["scheduler"]["max_sequences"],
                     "traffic.load.fraction": fraction}
            cand = Candidate("aggregated", "vllm", (("aggregated", Shape(**worker["parallelism"])),),
                             tuple(sorted(knobs.items())))
            found.add(materializer.prepare(cand).config["traffic"]["load"]["concurrency"])
        assert ref["traffic"]["load"]["concurrency"] in found, path.name
