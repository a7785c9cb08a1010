"""Start-up: what a short run imports, and the command's start-up helpers (benchmarks/README.md,
"Start-up")."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from servesim.cli.common import start_up

SHORT_RUN = """\
engine:
  model: Qwen/Qwen3-8B
  hardware: h200_sxm
  backend: vllm
  context_length: 32768
  workers:
    aggregated:
      parallelism: {replicas: 1, tensor: 1}
      kv_cache: {block_size: 64, capacity: {type: fixed, blocks: 12000}}
      timing: {type: fixed, prefill_ms: 20, decode_ms: 10}
traffic:
  source: {type: synthetic, input_tokens: 128, output_tokens: 16}
  load: {type: poisson, requests_per_second: 10, seed: 1}
  stop: {requests: 10}
"""

NOT_FOR_A_SHORT_RUN = (
    # optional extras and the AIConfigurator database
    "plotly", "optuna", "pandas", "polars", "pyarrow", "ray", "aiconfigurator_core", "servesim.perf.aic",
    # pydantic's plugin discovery (servesim.cli.pydantic_plugins)
    "importlib.metadata", "email", "pydantic.plugin._loader",
    # the standard library's logging: imported by what has something to say
    "logging",
    # tempfile (with random): the output folder makes its own hidden files (servesim.outputs)
    "tempfile",
    # the other subcommands (servesim.cli builds only the parser of the one named)
    "servesim.search.cli", "servesim.studies.commands", "servesim.cli.tools",
    # what only other kinds of runs use
    "numpy.ma", "servesim.cluster.disaggregated", "servesim.collect.sampler", "servesim.scaling.planner.settings",
    "servesim.placement.routers", "servesim.perf.roofline", "servesim.perf.capacity", "servesim.report.html",
    "servesim.report.latency", "servesim.traffic.agentic", "servesim.traffic.agentic_driver",
)


def _imported(stderr: str) -> set[str]:
    """The modules `python -X importtime` reported importing."""
    return {line.rsplit("|", 1)[1].strip() for line in stderr.splitlines() if line.startswith("import time:")}


def test_a_short_fixed_timing_run_imports_only_what_it_uses(tmp_path: Path) -> None:
    config = tmp_path / "short.yaml"
    config.write_text(SHORT_RUN)
    env = {k: v for k, v in os.environ.items() if k != "PYDANTIC_DISABLE_PLUGINS"}
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "servesim", "predict", "-c", str(config),
                           "--output-dir", str(tmp_path / "out"), "--format", "json"],
                          capture_output=True, text=True, env=env, check=True)
    assert json.loads(done.stdout)["completed_requests"] == 10
    imported = _imported(done.stderr)
    assert {"servesim.api", "numpy", "pydantic", "yaml"} <= imported  # the parse sees the run's imports
    unwanted = {m for m in imported if any(m == n or m.startswith(n + ".") for n in NOT_FOR_A_SHORT_RUN)}
    assert unwanted == set()


TRACE_RUN = SHORT_RUN.replace(
    "timing: {type: fixed, prefill_ms: 20, decode_ms: 10}", "timing: {type: polynomial}").replace(
    "source: {type: synthetic, input_tokens: 128, output_tokens: 16}",
    "source: {type: trace, paths: [trace.jsonl], format: mooncake}").replace(
    "load: {type: poisson, requests_per_second: 10, seed: 1}\n  stop: {requests: 10}", "load: {type: trace_timestamps}")

NOT_FOR_A_TRACE_RUN = NOT_FOR_A_SHORT_RUN + ("servesim.traffic.dynamo", "servesim.traffic.agentic_mooncake")
"""An aggregated vLLM run of a timestamped Mooncake trace with polynomial timing (L1's kind)."""


def test_a_mooncake_trace_run_imports_only_what_it_uses(tmp_path: Path) -> None:
    config = tmp_path / "trace.yaml"
    config.write_text(TRACE_RUN)
    rows = [{"timestamp": 10 * k, "input_length": 100, "output_length": 4, "hash_ids": [0, k + 1]} for k in range(5)]
    (tmp_path / "trace.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    env = {k: v for k, v in os.environ.items() if k != "PYDANTIC_DISABLE_PLUGINS"}
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "servesim", "predict", "-c", str(config),
                           "--output-dir", str(tmp_path / "out"), "--format", "json"],
                          capture_output=True, text=True, env=env, check=True, cwd=tmp_path)
    assert json.loads(done.stdout)["completed_requests"] == 5
    imported = _imported(done.stderr)
    assert {"servesim.traffic.mooncake", "servesim.traffic.hash_ids"} <= imported
    unwanted = {m for m in imported if any(m == n or m.startswith(n + ".") for n in NOT_FOR_A_TRACE_RUN)}
    assert unwanted == set()


def test_pydantic_plugins_load_again_once_the_variable_allows_them() -> None:
    script = textwrap.dedent("""\
        import os, sys
        os.environ["PYDANTIC_DISABLE_PLUGINS"] = "__all__"
        from servesim.cli import pydantic_plugins
        pydantic_plugins.skip_loader()
        import pydantic

        class Before(pydantic.BaseModel):
            x: int

        print(Before(x="1").x, "importlib.metadata" in sys.modules)
        os.environ["PYDANTIC_DISABLE_PLUGINS"] = ""

        class After(pydantic.BaseModel):
            y: int

        loader = sys.modules[pydantic_plugins.LOADER]
        print(After(y="2").y, "importlib.metadata" in sys.modules, loader.__file__.endswith("_loader.py"))
        """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert done.stdout.split("\n")[:2] == ["1 False", "2 True True"]


def test_start_up_pauses_the_collector_and_restores_its_state() -> None:
    try:
        with start_up():
            assert not gc.isenabled()
        assert gc.isenabled()
        gc.disable()
        with start_up():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
        gc.unfreeze()
