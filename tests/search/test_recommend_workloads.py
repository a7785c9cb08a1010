"""`recommend` over every trace format, with the fidelity timing keys, and its start-up facts."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from servesim.api import simulate
from servesim.config import load_config
from servesim.perf.calibration import Calibration
from servesim.search import facts, outputs
from servesim.search.cli import load_recommend_config
from servesim.search.run import Search

CASES = Path(__file__).resolve().parents[1] / "cases"
TRACE_CASES = {
    "mooncake": CASES / "dynamo" / "kv-2w-prefix16-r20",
    "agentic_mooncake": CASES / "traffic" / "agentic_mooncake-vllm-fixed-replicas",
    "applied_compute_agentic": CASES / "traffic" / "applied_compute_agentic-vllm-fixed-replicas",
    "dynamo": CASES / "traffic" / "dynamo-vllm-fixed-replicas",
    "dynamo agent-aware": CASES / "traffic" / "dynamo_agentic-vllm-fixed-replicas",
}


def _recommend_config(case: Path) -> dict:
    """The case's predict config as a recommend search over replicas and max_sequences."""
    data = yaml.safe_load((case / "config.yaml").read_text())
    worker = data["engine"]["workers"]["aggregated"]
    worker["parallelism"] = {"preset": False, "replicas": {"choices": [1, 2]}, "tensor": 1}
    worker["scheduler"]["max_sequences"] = {"choices": [8, 64]}
    data["optimization"] = {"target": "throughput_per_gpu", "constraints": {"max_candidate_gpus": 2}}
    data["optimizer"] = {"algorithm": "bayesian", "max_trials": 3, "parallelism": 2, "seed": 1}
    return data


def _same_numbers(written: Path, entry: dict) -> None:
    """A written recommendation replays (from any folder) to its ledger entry's numbers."""
    summary = simulate(load_config(written)).summary
    for key, value in entry["metrics"].items():
        if key in summary:
            assert summary[key] == pytest.approx(value, rel=1e-12), key


@pytest.mark.parametrize("fmt", sorted(TRACE_CASES))
def test_every_trace_format_is_screened_searched_and_replayed(fmt: str, tmp_path: Path) -> None:
    case = TRACE_CASES[fmt]
    path = case / "recommend.yaml"
    cfg = load_recommend_config_from(path, _recommend_config(case), tmp_path)
    search = Search(cfg, base_dir=case)
    result = search.run()
    replayed = [e for e in result.entries if e["eval_seconds"] is not None]
    assert len(replayed) == 3 and all(e["feasible"] for e in replayed), [e["reason"] for e in replayed]
    assert all(e["estimated_score"] is not None and e["estimated_score"] > 0 for e in replayed)
    out = tmp_path / "out"
    outputs.write_recommendations(out, result)
    best = result.ranked()[0]
    _same_numbers(out / best["config_path"], best)


def load_recommend_config_from(path: Path, data: dict, tmp_path: Path) -> object:
    """The recommend config as `servesim recommend` reads it (written next to nothing: the
    search gets the case folder as its base)."""
    written = tmp_path / path.name
    written.write_text(yaml.safe_dump(data))
    return load_recommend_config(str(written), [])


def test_fused_and_calibrated_timing_pass_through(tmp_path: Path) -> None:
    folder = tmp_path / "configs"
    folder.mkdir()
    (folder / "cal.yaml").write_text(Calibration(prefill_scale=1.3, decode_scale=0.9, frontend_ms=4.0).to_yaml())
    worker = {"parallelism": {"preset": False, "tensor": {"choices": [1, 2]}},
              "scheduler": {"max_batched_tokens": 2048, "max_sequences": {"choices": [16, 32]}},
              "kv_cache": {"block_size": 16},
              "timing": {"type": "roofline", "mixed_pass": "fused", "calibration": "cal.yaml"}}
    data = {"engine": {"mode": "aggregated", "model": "Qwen/Qwen3-8B", "hardware": "h200_sxm", "backend": "vllm",
                       "workers": {"aggregated": worker}},
            "traffic": {"source": {"type": "synthetic", "input_tokens": 1500, "output_tokens": 60},
                        "load": {"type": "poisson", "requests_per_second": 6, "seed": 2}, "stop": {"requests": 40}},
            "optimization": {"target": "throughput_per_gpu", "constraints": {"max_candidate_gpus": 2}},
            "optimizer": {"algorithm": "bayesian", "max_trials": 3, "parallelism": 1}}
    (folder / "recommend.yaml").write_text(yaml.safe_dump(data))
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "servesim", "recommend", "-c", str(folder / "recommend.yaml"),
                           "--output-dir", str(out), "--report"], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (out / "report.html").exists()
    ledger = json.loads((out / "recommendation.json").read_text())
    assert any("screened" in note for note in ledger["notes"])
    best = next(e for e in ledger["candidates"] if e["rank"] == 1)
    written = yaml.safe_load((out / best["config_path"]).read_text())
    timing = written["engine"]["workers"]["aggregated"]["timing"]
    assert timing["mixed_pass"] == "fused" and timing["calibration"] == str(folder / "cal.yaml")
    _same_numbers(out / best["config_path"], best)
    uncalibrated = copy.deepcopy(written)
    del uncalibrated["engine"]["workers"]["aggregated"]["timing"]["calibration"]
    (tmp_path / "plain.yaml").write_text(yaml.safe_dump(uncalibrated))
    plain = simulate(load_config(tmp_path / "plain.yaml")).summary
    assert plain["mean_ttft_ms"] != pytest.approx(best["metrics"]["mean_ttft_ms"], rel=1e-3)


@pytest.mark.slow
def test_newest_version_lookup_sees_one_gpu_but_answers_as_the_whole_database(reference_systems: Path) -> None:
    from aiconfigurator_core.sdk.perf_database import get_latest_database_version

    for backend in ("vllm", "sglang"):
        facts.latest_backend_version.cache_clear()
        whole = get_latest_database_version("h200_sxm", backend, systems_paths=str(reference_systems))
        assert facts.latest_backend_version("h200_sxm", backend, str(reference_systems)) == whole is not None
