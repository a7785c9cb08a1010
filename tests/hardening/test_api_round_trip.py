"""The Python API round-trips its own configs and its exports are visible to tools."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import servesim
from servesim.config import parse_config

CASES = Path(__file__).parents[1] / "cases"
SMALL = """
engine:
  mode: aggregated
  model: Qwen/Qwen3-32B-FP8
  hardware: h200_sxm
  backend: vllm
  backend_version: 0.24.0
  workers:
    aggregated:
      parallelism: {tensor: 1}
      kv_cache: {block_size: 16, capacity: {type: fixed, blocks: 2000}}
      timing: {type: fixed, prefill_ms: 30, decode_ms: 12}
traffic:
  source: {type: synthetic, input_tokens: 100, output_tokens: 10}
  load: {type: concurrency, concurrency: 2}
  stop: {requests: 6}
"""
CONFIGS = sorted(p for p in CASES.rglob("config*.yaml") if "recommend" not in p.parts)


@pytest.mark.parametrize("path", CONFIGS[::4], ids=lambda p: str(p.relative_to(CASES)))
def test_a_dumped_config_validates_to_the_same_config(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(path.parent)  # trace paths are relative to the config
    try:
        config = servesim.load_config(path.name)
    except servesim.ConfigError:
        pytest.skip("a case of a refused config")
    assert parse_config(config.model_dump()) == config
    assert parse_config(config.model_dump(mode="json")) == config


def test_simulate_takes_a_dump_of_a_config_that_omitted_max_sequences(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(SMALL)
    config = servesim.load_config(str(path))
    dumped = config.model_dump()
    assert config.engine.workers.aggregated.scheduler.max_sequences is None  # the role default
    assert "max_sequences" not in dumped["engine"]["workers"]["aggregated"]["scheduler"]
    wall = ("wall_time_ms", "processed_output_tokens_per_s", "processed_tokens_per_s")
    again, first = (servesim.simulate(c).summary for c in (dumped, config))
    assert {k: v for k, v in again.items() if k not in wall} == {k: v for k, v in first.items() if k not in wall}


def test_dir_lists_the_lazy_exports() -> None:
    assert set(servesim.__all__) <= set(dir(servesim))
    assert callable(servesim.simulate) and callable(servesim.load_config)


def test_type_checkers_see_the_exports(tmp_path: Path) -> None:
    pytest.importorskip("mypy")
    usage = tmp_path / "usage.py"
    usage.write_text("import servesim\n\nconfig = servesim.load_config('x.yaml')\n"
                     "report = servesim.simulate(config)\nttft: float = report['mean_ttft_ms']\n"
                     "reveal_type(servesim.simulate)\n")
    src = str(Path(servesim.__file__).parents[1])
    done = subprocess.run([sys.executable, "-m", "mypy", "--no-error-summary", "--cache-dir", str(tmp_path / "cache"),
                           str(usage)], capture_output=True, text=True, timeout=600, cwd=tmp_path,
                          env=dict(os.environ, MYPYPATH=src))
    assert "not callable" not in done.stdout and "def (config:" in done.stdout, done.stdout[-2000:]
