"""`servesim recommend` as a command: outputs, exit codes, interruption, the Ray executor."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import yaml

from search_helpers import config, without_timing_fields
from servesim.search import outputs
from servesim.search.run import Search
from servesim.search.schema import RecommendConfig

SERVESIM = [sys.executable, "-m", "servesim"]


def _run(tmp_path: Path, data: dict, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    path = tmp_path / "recommend.yaml"
    path.write_text(yaml.safe_dump(data))
    return subprocess.run([*SERVESIM, "recommend", "-c", str(path), "--output-dir", str(tmp_path / "out"), *args],
                          capture_output=True, text=True, timeout=timeout)


def test_table_ledger_and_recommendations(tmp_path: Path) -> None:
    done = _run(tmp_path, config(**{"optimizer.max_trials": 6, "optimizer.algorithm": "random"}))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("servesim recommendations — target throughput_per_gpu, algorithm random")
    assert "out/recommendations/0001.yaml" in done.stdout
    ledger = json.loads((tmp_path / "out" / "recommendation.json").read_text())
    assert ledger["target"] == "throughput_per_gpu" and ledger["gpu_budget"] == {"min": None, "max": 4}
    assert len(ledger["candidates"]) == 6
    assert sorted((tmp_path / "out" / "recommendations").iterdir())[0].name == "0001.yaml"


def test_json_rows_follow_the_reference(tmp_path: Path) -> None:
    done = _run(tmp_path, config(**{"optimizer.max_trials": 3, "optimizer.algorithm": "random"}), "--format", "json")
    rows = json.loads(done.stdout)
    assert [r["rank"] for r in rows] == [1, 2, 3]
    assert set(rows[0]) >= {"rank", "score", "objectives", "used_gpus", "config_path"}


def test_config_errors_exit_2_and_outputs_are_not_overwritten(tmp_path: Path) -> None:
    bad = _run(tmp_path, config(**{"optimizer.max_trials": 0}))
    assert bad.returncode == 2 and "optimizer.max_trials" in bad.stderr
    assert _run(tmp_path, config(**{"optimizer.max_trials": 1})).returncode == 0
    again = _run(tmp_path, config(**{"optimizer.max_trials": 1}))
    assert again.returncode == 2 and "--overwrite" in again.stderr
    assert _run(tmp_path, config(**{"optimizer.max_trials": 1}), "--overwrite").returncode == 0


def test_no_feasible_candidate_exits_1(tmp_path: Path) -> None:
    data = config(**{"engine.workers.aggregated.parallelism": {"preset": False, "tensor": 3}})
    done = _run(tmp_path, data)
    assert done.returncode == 1 and "no candidate meets the target" in done.stderr
    ledger = json.loads((tmp_path / "out" / "recommendation.json").read_text())
    assert {e["status"] for e in ledger["candidates"]} <= {"unsupported", "over_budget"}
    assert any("divisible" in e["reason"] for e in ledger["candidates"])


@pytest.mark.slow
def test_ctrl_c_keeps_the_ledger_of_finished_candidates(tmp_path: Path) -> None:
    data = config(**{"optimizer.algorithm": "random", "optimizer.max_trials": 200, "optimizer.parallelism": 1,
                     "traffic.stop.requests": 200, "traffic.load.concurrency": 4,
                     "engine.workers.aggregated.scheduler.max_sequences": {"range": {"min": 1, "max": 64,
                                                                                       "step": 1}}})
    path = tmp_path / "recommend.yaml"
    path.write_text(yaml.safe_dump(data))
    ledger_path = tmp_path / "out" / "recommendation.json"
    proc = subprocess.Popen([*SERVESIM, "recommend", "-c", str(path), "--output-dir", str(tmp_path / "out")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 240  # generous: a loaded CI machine
    while time.monotonic() < deadline and not ledger_path.exists():
        time.sleep(0.05)
    assert ledger_path.exists(), "the ledger is written after the first round"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=180)
    assert proc.returncode == 130, err
    ledger = json.loads(ledger_path.read_text())
    assert ledger["interrupted"] is True
    finished = [e for e in ledger["candidates"] if e["status"] == "feasible"]
    assert finished and all(e["metrics"] for e in finished)
    assert len(finished) < 200
    assert "ready" not in {e["status"] for e in ledger["candidates"]}


RAY_SCRIPT = textwrap.dedent("""
    import json, sys
    import ray
    sys.path.insert(0, {helpers!r})
    from search_helpers import config
    from servesim.search import outputs
    from servesim.search.run import Search
    from servesim.search.schema import RecommendConfig
    data = config(**{{"optimizer.algorithm": "bayesian", "optimizer.max_trials": 6,
                      "engine.backend": {{"choices": ["vllm", "sglang"]}}}})
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    result = Search(RecommendConfig.model_validate(data), executor="ray").run()
    ray.shutdown()
    print(json.dumps(outputs.ledger(result)))
""")


@pytest.mark.slow
def test_ray_executor_gives_the_local_results(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    script = tmp_path / "ray_search.py"
    script.write_text(RAY_SCRIPT.format(helpers=str(Path(__file__).parents[1])))
    env = dict(os.environ, RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    on_ray = json.loads(done.stdout.strip().splitlines()[-1])
    data = config(**{"optimizer.algorithm": "bayesian", "optimizer.max_trials": 6,
                     "engine.backend": {"choices": ["vllm", "sglang"]}})
    local = outputs.ledger(Search(RecommendConfig.model_validate(data)).run())
    assert without_timing_fields(on_ray) == without_timing_fields(json.loads(json.dumps(local)))
    assert sum(e["eval_seconds"] is not None for e in on_ray["candidates"]) == 6


def test_progress_line_on_a_terminal(tmp_path: Path) -> None:
    import pty

    path = tmp_path / "recommend.yaml"
    path.write_text(yaml.safe_dump(config(**{"optimizer.max_trials": 4, "optimizer.algorithm": "random"})))
    master, slave = pty.openpty()
    proc = subprocess.Popen([*SERVESIM, "recommend", "-c", str(path), "--output-dir", str(tmp_path / "out")],
                            stdout=subprocess.DEVNULL, stderr=slave, stdin=subprocess.DEVNULL)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 4096)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    assert proc.wait(timeout=60) == 0
    text = b"".join(chunks).decode()
    assert "[servesim recommend] " in text and "/4 trials" in text and "best throughput_per_gpu score" in text


def test_stack_engine_refuses_router_and_planner(tmp_path: Path) -> None:
    data = config(**{"router": {"policy": "round_robin"}, "optimizer.max_trials": 1})
    refused = _run(tmp_path, data, "--stack", "engine")
    assert refused.returncode == 2 and "--stack dynamo" in refused.stderr
    assert _run(tmp_path, config(**{"optimizer.max_trials": 1}), "--stack", "nope").returncode == 2
    assert _run(tmp_path, data, "--stack", "dynamo").returncode == 0


def test_report_draws_the_ledger(tmp_path: Path) -> None:
    pytest.importorskip("plotly")
    done = _run(tmp_path, config(**{"optimizer.max_trials": 4, "optimizer.algorithm": "random",
                                    "engine.workers.aggregated.parallelism": {
                                        "preset": False, "tensor": {"choices": [1, 3]}}}), "--report")
    assert done.returncode == 0, done.stderr
    page = (tmp_path / "out" / "report.html").read_text()
    assert "recommendations/0001.yaml" in page and "divisible" in page
