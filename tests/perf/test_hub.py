"""Model configs from the Hugging Face Hub: a real huggingface_hub client against a local Hub.

A thread serves ``/{repo}/resolve/{revision}/config.json`` on 127.0.0.1 the way the Hub does for
``hf_hub_download`` (HEAD answers with the commit, ETag and size headers the client reads; GET
sends the file); servesim runs as a subprocess with ``HF_ENDPOINT`` pointing there and
``HF_HOME`` in a temporary folder (huggingface_hub reads both when it is imported). Requests
outside ``/resolve/`` are the client's own (its agent-registry lookup) and get a 404.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from servesim import simulate
from servesim.perf.models import bundled_configs_dir

COMMIT = "0123456789abcdef0123456789abcdef01234567"
QWEN8B = (bundled_configs_dir() / "Qwen--Qwen3-8B_config.json").read_bytes()


class Hub(ThreadingHTTPServer):
    """A model repository host: {repo id: config.json bytes}; logs (method, path, Authorization)."""

    def __init__(self, repos: dict[str, bytes]) -> None:
        super().__init__(("127.0.0.1", 0), _HubHandler)
        self.repos = repos
        self.log: list[tuple[str, str, str | None]] = []
        self.endpoint = f"http://127.0.0.1:{self.server_address[1]}"


class _HubHandler(BaseHTTPRequestHandler):
    server: Hub

    def do_HEAD(self) -> None:  # noqa: N802 - http.server's naming
        self._answer(body=False)

    def do_GET(self) -> None:  # noqa: N802
        self._answer(body=True)

    def _answer(self, body: bool) -> None:
        self.server.log.append((self.command, self.path, self.headers.get("Authorization")))
        found = re.fullmatch(r"/(.+)/resolve/([^/]+)/(.+)", self.path.split("?")[0])
        data = self.server.repos.get(found[1]) if found and found[3] == "config.json" else None
        if data is None:
            self.send_response(404)
            self.send_header("X-Error-Code", "EntryNotFound" if found and found[1] in self.server.repos
                             else "RepoNotFound")
            self.send_header("X-Error-Message", "Entry not found")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("ETag", f'"{hashlib.sha1(data).hexdigest()}"')
        self.send_header("X-Repo-Commit", COMMIT)
        self.end_headers()
        if body:
            self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def hub() -> Iterator[Hub]:
    server = Hub({"acme/qwen-clone": QWEN8B})
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


def config(model: str, tmp_path: Path, timing: dict | None = None) -> Path:
    path = tmp_path / f"{model.replace('/', '_')}-{len(list(tmp_path.glob('*.yaml')))}.yaml"
    path.write_text(json.dumps({
        "engine": {"model": model, "hardware": "h200_sxm", "backend": "vllm", "context_length": 4096,
                   "workers": {"aggregated": {"timing": timing or {"type": "default"}}}},
        "traffic": {"source": {"type": "synthetic", "input_tokens": 700, "output_tokens": 20},
                    "load": {"type": "concurrency", "concurrency": 4}, "stop": {"requests": 12}}}))
    return path


def predict(path: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "servesim", "predict", "-c", str(path), "--format", "json",
                           "--output-dir", str(path.with_suffix(".out"))], capture_output=True, text=True, env=env)


def hub_env(hub: Hub, home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING"))}
    return {**env, "HF_ENDPOINT": hub.endpoint, "HF_HOME": str(home), **extra}


def strip(out: str) -> dict:
    host = ("wall_time_ms", "processed_tokens_per_s", "processed_output_tokens_per_s", "provenance")
    return {k: v for k, v in json.loads(out).items() if k not in host}


def test_a_hub_model_is_timed_like_the_same_bundled_config(hub: Hub, tmp_path: Path, reference_systems: Path) -> None:
    """A repository holding Qwen3-8B's config under another id: only its config.json is asked
    for, it lands in huggingface_hub's cache, and the report equals the bundled model's."""
    env = hub_env(hub, tmp_path / "hf", HF_TOKEN="hf_test_token")
    fetched = predict(config("acme/qwen-clone", tmp_path), env)
    assert fetched.returncode == 0, fetched.stderr
    asked = [(path, auth) for _, path, auth in hub.log if "/resolve/" in path]
    assert {path for path, _ in asked} == {"/acme/qwen-clone/resolve/main/config.json"}
    assert {auth for _, auth in asked} == {"Bearer hf_test_token"}
    cached = tmp_path / "hf" / "hub" / "models--acme--qwen-clone" / "snapshots" / COMMIT / "config.json"
    assert cached.read_bytes() == QWEN8B
    bundled = simulate(config("Qwen/Qwen3-8B", tmp_path)).to_dict()
    assert strip(fetched.stdout) == {k: v for k, v in bundled.items() if k in strip(fetched.stdout)}


def test_offline_uses_the_cache_and_without_it_fails_clearly(hub: Hub, tmp_path: Path) -> None:
    roofline = {"type": "roofline"}
    online = predict(config("acme/qwen-clone", tmp_path, roofline), hub_env(hub, tmp_path / "hf"))
    assert online.returncode == 0, online.stderr
    asked = len(hub.log)
    offline = predict(config("acme/qwen-clone", tmp_path, roofline), hub_env(hub, tmp_path / "hf", HF_HUB_OFFLINE="1"))
    assert offline.returncode == 0 and len(hub.log) == asked and strip(offline.stdout) == strip(online.stdout)
    empty = predict(config("acme/qwen-clone", tmp_path, roofline), hub_env(hub, tmp_path / "empty", HF_HUB_OFFLINE="1"))
    assert empty.returncode == 1 and len(hub.log) == asked
    assert "model 'acme/qwen-clone': not a local directory holding config.json" in empty.stderr
    assert "no config.json from the Hugging Face Hub" in empty.stderr


def test_a_repository_the_hub_lacks_is_a_clear_error(hub: Hub, tmp_path: Path) -> None:
    missing = predict(config("acme/no-such-model", tmp_path, {"type": "roofline"}), hub_env(hub, tmp_path / "hf"))
    assert missing.returncode == 1 and missing.stdout == ""
    assert "model 'acme/no-such-model'" in missing.stderr and "Hugging Face Hub" in missing.stderr
    assert {path for _, path, _ in hub.log if "/resolve/" in path} == {"/acme/no-such-model/resolve/main/config.json"}
