"""`servesim recommend` fails with a clear message and the right exit code, never a traceback
or a hang: an unreachable Ray cluster, bad values, missing extras, signals."""

from __future__ import annotations

import os
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
