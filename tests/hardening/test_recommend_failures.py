"""`servesim recommend` fails with a clear message and the right exit code, never a traceback
or a hang: an unreachable Ray cluster, bad values, missing extras, signals."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from search_helpers import config

SERVESIM = [sys.executable, "-m", "servesim"]


def _write(tmp_path: Path, data: dict[str, Any]) -> Path:
    path = tmp_path / "recommend.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _silent_server() -> tuple[socket.socket, int]:
    """A port that accepts connections and never answers (as a firewall or another service)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                held.append(server.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    return server, server.getsockname()[1]


def test_an_unreachable_ray_address_exits_2_in_bounded_time(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    server, port = _silent_server()
    path = _write(tmp_path, config(**{"optimizer.max_trials": 1}))
    script = textwrap.dedent(f"""
        import sys
        import servesim.search.executors as executors
        executors.RAY_CONNECT_TIMEOUT_S = 3
        from servesim.cli import main
        sys.argv = ["servesim", "recommend", "-c", {str(path)!r}, "--output-dir", {str(tmp_path / "out")!r},
                    "--executor", "ray", "--ray-address", "127.0.0.1:{port}"]
        sys.exit(main())
    """)
    env = dict(os.environ, RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0")
    started = time.monotonic()
    try:
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=90, env=env)
    finally:
        server.close()
    assert done.returncode == 2, done.stderr[-2000:]
    assert f"--ray-address 127.0.0.1:{port}: no Ray cluster is reachable there (no answer within 3 s)" in done.stderr
    assert "Traceback" not in done.stderr and time.monotonic() - started < 60


def _recommend(tmp_path: Path, data: dict[str, Any], *args: str, env: dict[str, str] | None = None,
               prelude: str = "") -> subprocess.CompletedProcess[str]:
    path = _write(tmp_path, data)
    script = prelude + textwrap.dedent(f"""
        import sys
        from servesim.cli import main
        sys.argv = ["servesim", "recommend", "-c", {str(path)!r}, "--output-dir", {str(tmp_path / "out")!r},
                    "--overwrite", *{list(args)!r}]
        sys.exit(main())
    """)
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, **(env or {})))


@pytest.mark.parametrize("changes, message", [
    ({"optimizer.seed": 2**32}, "optimizer.seed: must be <= 4294967295"),
    ({"optimizer.candidate_timeout_seconds": 1e300}, "optimizer.candidate_timeout_seconds: must be <= 1000000000"),
])
def test_out_of_range_optimizer_values_exit_2(tmp_path: Path, changes: dict[str, Any], message: str) -> None:
    done = _recommend(tmp_path, config(**changes, **{"optimizer.algorithm": "bayesian", "optimizer.max_trials": 2}))
    assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_the_largest_seed_and_a_month_long_timeout_run(tmp_path: Path) -> None:
    disaggregated = {"engine.mode": {"choices": ["aggregated", "disaggregated"]},
                     **{f"engine.workers.{role}": config()["engine"]["workers"]["aggregated"]
                        for role in ("prefill", "decode")}}
    data = config(**disaggregated, **{"optimizer.seed": 2**32 - 1, "optimizer.candidate_timeout_seconds": 3e6,
                                      "optimizer.algorithm": "bayesian", "optimizer.max_trials": 4})
    done = _recommend(tmp_path, data)  # seed + 1 for the second branch; a poll of 3e6 s overflowed
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-2000:]


def test_an_unknown_model_is_a_config_error(tmp_path: Path) -> None:
    data = config(**{"engine.model": "nobody/NoSuchModel-7B"})
    worker = data["engine"]["workers"]["aggregated"]
    worker.pop("timing")
    worker["kv_cache"].pop("capacity")
    done = _recommend(tmp_path, data, env={"HF_HUB_OFFLINE": "1"})
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert "model 'nobody/NoSuchModel-7B'" in done.stderr


@pytest.mark.parametrize("module, option, message", [
    ("plotly", "--report", "pip install 'servesim[report]'"),
    ("ray", "--executor=ray", "pip install 'servesim[ray]'"),
])
def test_a_missing_extra_is_named_before_the_search(tmp_path: Path, module: str, option: str, message: str) -> None:
    done = _recommend(tmp_path, config(), option, prelude=f"import sys\nsys.modules[{module!r}] = None\n")
    assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert not (tmp_path / "out" / "recommendation.json").exists()


@pytest.mark.parametrize("signum, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_to_the_process_group_exits_quietly(tmp_path: Path, signum: int, code: int) -> None:
    data = config(**{"optimizer.algorithm": "random", "optimizer.max_trials": 200, "optimizer.parallelism": 2,
                     "traffic.stop.requests": 400, "traffic.load.concurrency": 4,
                     "engine.workers.aggregated.scheduler.max_sequences": {"range": {"min": 1, "max": 64, "step": 1}}})
    path = _write(tmp_path, data)
    ledger = tmp_path / "out" / "recommendation.json"
    proc = subprocess.Popen([*SERVESIM, "recommend", "-c", str(path), "--output-dir", str(tmp_path / "out")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not ledger.exists():
        time.sleep(0.1)
    time.sleep(0.5)
    os.killpg(proc.pid, signum)  # as a terminal, a container runtime or a service manager does
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == code and "Traceback" not in err, err[-2000:]
    assert "interrupted" in err


def _children(pid: int) -> set[int]:
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        text = (task / "children").read_text() if (task / "children").exists() else ""
        found |= {int(p) for p in text.split()}
    return found


def _alive(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in status


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's")
def test_workers_do_not_outlive_a_search_killed_outright(tmp_path: Path) -> None:
    data = config(**{"optimizer.algorithm": "random", "optimizer.max_trials": 4, "optimizer.parallelism": 2,
                     "traffic.stop.requests": 10**6, "traffic.load.concurrency": 64})
    path = _write(tmp_path, data)
    proc = subprocess.Popen([*SERVESIM, "recommend", "-c", str(path), "--output-dir", str(tmp_path / "out")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    workers: set[int] = set()
    while time.monotonic() < deadline and len(workers) < 2:
        time.sleep(0.2)
        workers = _children(proc.pid)
    assert workers, "no worker started"
    time.sleep(1)
    proc.kill()
    proc.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_alive(w) for w in workers):
        time.sleep(0.2)
    left = [w for w in workers if _alive(w)]
    for pid in left:  # (clean up what the test started)
        os.kill(pid, signal.SIGKILL)
    assert not left  # workers ignore SIGTERM: one orphaned would replay on for ever
