"""Helpers of the hardening tests: run `python -m servesim` as a hostile user would.

Every run is a subprocess with a wall-time limit and an address-space limit, so a hang or a
blow-up fails the test instead of taking the machine down.
"""

from __future__ import annotations

import contextlib
import copy
import io
import os
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

BASE_CONFIG: dict[str, Any] = {
    "engine": {
        "model": "Qwen/Qwen3-8B",
        "hardware": "h200_sxm",
        "backend": "vllm",
        "context_length": 4096,
        "workers": {"aggregated": {
            "parallelism": {"replicas": 1},
            "scheduler": {"max_batched_tokens": 512, "max_sequences": 8},
            "kv_cache": {"block_size": 16, "capacity": {"type": "fixed", "blocks": 200}},
            "timing": {"type": "fixed", "prefill_ms": 10, "decode_ms": 2},
        }},
    },
    "traffic": {
        "source": {"type": "synthetic", "input_tokens": 100, "output_tokens": 10},
        "load": {"type": "concurrency", "concurrency": 2},
        "stop": {"requests": 5},
    },
}
"""A small, fast config (fixed timing and capacity: no performance database)."""

DEFAULT_MEMORY_MB = 2048


@dataclass
class Run:
    """One finished (or killed) servesim process."""

    returncode: int | None
    """None when the process was killed for running past its time limit."""
    stdout: str
    stderr: str
    seconds: float

    def assert_clean(self, *codes: int) -> None:
        """Finished in time, with one of `codes`, and without a Python traceback."""
        assert self.returncode is not None, f"no exit within the time limit; stderr: {self.stderr[-2000:]}"
        assert "Traceback" not in self.stderr, self.stderr[-4000:]
        assert self.returncode in codes, (self.returncode, self.stderr[-2000:])

    def message(self, tmp_path: Path) -> str:
        """stderr with the test's temporary folder written as <tmp> (its name holds the test's name,
        which must not satisfy an assertion about the message's words)."""
        return self.stderr.replace(str(tmp_path), "<tmp>")


def config_with(changes: Mapping[str, Any] | None = None, base: Mapping[str, Any] = BASE_CONFIG) -> dict[str, Any]:
    """A copy of `base` with dotted-path `changes` applied (a mapping value replaces a whole section)."""
    data = copy.deepcopy(dict(base))
    for path, value in (changes or {}).items():
        node = data
        keys = path.split(".")
        for key in keys[:-1]:
            node = node.setdefault(key, {})
        node[keys[-1]] = value
    return data


def write_config(folder: Path, changes: Mapping[str, Any] | None = None, name: str = "config.yaml",
                 base: Mapping[str, Any] = BASE_CONFIG) -> Path:
    path = folder / name
    path.write_text(yaml.safe_dump(config_with(changes, base), sort_keys=False))
    return path


def _limits(memory_mb: int | None, file_size: int | None):
    def apply() -> None:
        os.setsid()
        if memory_mb is not None:
            resource.setrlimit(resource.RLIMIT_AS, (memory_mb << 20, memory_mb << 20))
        if file_size is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (file_size, file_size))
    return apply


def start_servesim(args: Sequence[str], *, cwd: Path | None = None, memory_mb: int | None = DEFAULT_MEMORY_MB,
                   file_size: int | None = None, stdout: Any = subprocess.PIPE,
                   stderr: Any = subprocess.PIPE) -> subprocess.Popen:
    """Start `python -m servesim ARGS` in its own process group, with resource limits."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen([sys.executable, "-m", "servesim", *args], cwd=cwd, stdout=stdout,
                            stderr=stderr, text=True, env=env,
                            preexec_fn=_limits(memory_mb, file_size))


def finish(process: subprocess.Popen, timeout: float, started: float) -> Run:
    """Wait for a started process; kill its group when it overruns `timeout`."""
    try:
        out, err = process.communicate(timeout=timeout)
        code: int | None = process.returncode
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, err = process.communicate()
        code = None
    return Run(code, out or "", err or "", time.monotonic() - started)


def run_servesim(args: Sequence[str], *, timeout: float = 60.0, **kwargs: Any) -> Run:
    """Run `python -m servesim ARGS` to the end (or `timeout`)."""
    started = time.monotonic()
    return finish(start_servesim(args, **kwargs), timeout, started)


def run_in_process(args: Sequence[str], *, stdout: Any = None) -> Run:
    """`servesim.cli.main(ARGS)` in this process, stdout (unless given) and stderr captured; an
    exception escaping `main` fails the calling test with its traceback."""
    from servesim.cli import main

    out = io.StringIO() if stdout is None else stdout
    err = io.StringIO()
    started = time.monotonic()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return Run(code, out.getvalue() if stdout is None else "", err.getvalue(), time.monotonic() - started)

