"""A real `servesim serve` process on a loopback port, started once per module."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "examples" / "quickstart.yaml"
STARTUP_S = 180


@dataclass(eq=False)
class LiveServer:
    process: subprocess.Popen[str]
    out_dir: Path
    lines: list[str] = field(default_factory=list)
    url: str = ""

    def stop(self, timeout: float = 10.0) -> tuple[int, float]:
        """SIGTERM; (exit code, seconds it took)."""
        started = time.perf_counter()
        self.process.send_signal(signal.SIGTERM)
        code = self.process.wait(timeout)
        return code, time.perf_counter() - started


def start_server(out_dir: Path, *extra: str) -> LiveServer:
    """Start `servesim serve` on a free loopback port and wait until it serves."""
    cmd = [sys.executable, "-m", "servesim", "serve", "-c", str(QUICKSTART), "--host", "127.0.0.1", "--port", "0",
           "--output-dir", str(out_dir), "--overwrite", *extra]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    server = LiveServer(process, out_dir)
    ready = threading.Event()

    def read() -> None:
        assert process.stderr is not None
        for line in process.stderr:
            server.lines.append(line)
            found = re.search(r"on (http://[\d.]+:\d+)", line)
            if found:
                server.url = found.group(1)
                ready.set()
        ready.set()

    threading.Thread(target=read, daemon=True).start()
    if not ready.wait(STARTUP_S) or not server.url:
        process.kill()
        raise AssertionError(f"servesim serve did not start: {''.join(server.lines)}")
    return server


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    """The quick-start config served at speed 1; stopped with SIGTERM at the end (exit 0 asserted)."""
    live = start_server(tmp_path_factory.mktemp("serve-out"))
    yield live
    if live.process.poll() is None:
        code, took = live.stop()
        assert code == 0, "".join(live.lines)
        assert took < 10
