"""`servesim recommend --executor ray` on a real two-node Ray cluster: a head (`ray start --head`)
and a second node joining it (`ray start --address`), each with one CPU, so that two candidates in
flight must run on different nodes. The ledger must be the local executor's."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from search_helpers import config, without_timing_fields

pytestmark = pytest.mark.slow

RAY_ENV = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}


def _free_port() -> int:
    """A free TCP port outside Ray's default worker-port range (10002-19999)."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if not 10002 <= port <= 19999:
            return port


def _ray_start(args: list[str], temp_dir: str) -> subprocess.Popen:
    """`ray start --block ...` in a session of its own (its daemons share its process group)."""
    ray = Path(sys.executable).with_name("ray")
    return subprocess.Popen([str(ray), "start", "--block", "--num-cpus", "1", "--node-ip-address", "127.0.0.1",
                             "--disable-usage-stats", *args],
                            env=dict(os.environ, **RAY_ENV, RAY_TMPDIR=temp_dir), start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _stop(proc: subprocess.Popen) -> None:
    """End the node's whole process group (its raylet, GCS, ...) — only the processes this test started."""
    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            try:
                os.killpg(proc.pid, 0)
            except ProcessLookupError:
                proc.wait(timeout=5)
                return
            time.sleep(0.2)


def _nodes_alive(address: str) -> int:
    probe = ("import ray; ray.init(address=%r, log_to_driver=False, configure_logging=False); "
             "print(sum(n['Alive'] for n in ray.nodes()))" % address)
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, **RAY_ENV))
    return int(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 and done.stdout.strip() else 0


@pytest.fixture
def two_node_cluster() -> Iterator[str]:
    pytest.importorskip("ray")
    if not Path(sys.executable).with_name("ray").exists():
        pytest.skip("the `ray` command is not installed beside this Python")
    temp_dir = tempfile.mkdtemp(prefix="ss-ray-", dir="/tmp")  # short: Ray's socket paths must fit 107 bytes
    address = f"127.0.0.1:{_free_port()}"
    nodes = [_ray_start(["--head", "--port", address.rsplit(":", 1)[1], "--include-dashboard=false",
                         "--temp-dir", temp_dir], temp_dir)]
    try:
        deadline = time.monotonic() + 60
        while _nodes_alive(address) < 1:
            assert nodes[0].poll() is None, f"ray start --head failed: {nodes[0].stderr.read()[-2000:]}"
            assert time.monotonic() < deadline, "the head node did not come up within 60 s"
            time.sleep(1)
        nodes.append(_ray_start(["--address", address], temp_dir))
        while _nodes_alive(address) < 2:
            assert nodes[1].poll() is None, f"ray start --address failed: {nodes[1].stderr.read()[-2000:]}"
            assert time.monotonic() < deadline, "the second node did not join within 60 s"
            time.sleep(1)
        yield address
    finally:
        for node in reversed(nodes):
            _stop(node)
        shutil.rmtree(temp_dir, ignore_errors=True)


def _recommend(folder: Path, data: dict, *args: str) -> dict:
    folder.mkdir()
    (folder / "recommend.yaml").write_text(yaml.safe_dump(data))
    done = subprocess.run([sys.executable, "-m", "servesim", "recommend", "-c", "recommend.yaml",
                           "--output-dir", "out", *args], cwd=folder, capture_output=True, text=True, timeout=240,
                          env=dict(os.environ, **RAY_ENV))
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads((folder / "out" / "recommendation.json").read_text())


def test_two_node_cluster_gives_the_local_ledger(tmp_path: Path, two_node_cluster: str) -> None:
    data = config(**{"optimizer.algorithm": "bayesian", "optimizer.max_trials": 8, "optimizer.parallelism": 2,
                     "engine.backend": {"choices": ["vllm", "sglang"]}})
    on_ray = _recommend(tmp_path / "ray", data, "--executor", "ray", "--ray-address", two_node_cluster)
    nodes = on_ray["workers"]["ray_nodes"]
    assert len(nodes) == 2, f"both nodes replay candidates (one CPU each, two in flight): {nodes}"
    replayed = sum(e["eval_seconds"] is not None for e in on_ray["candidates"])
    assert sum(nodes.values()) == replayed > 0
    local = _recommend(tmp_path / "local", data)
    assert "ray_nodes" not in local["workers"]
    assert without_timing_fields(on_ray) == without_timing_fields(local)
    assert (tmp_path / "ray" / "out" / "recommendations" / "0001.yaml").read_text() == \
        (tmp_path / "local" / "out" / "recommendations" / "0001.yaml").read_text()
