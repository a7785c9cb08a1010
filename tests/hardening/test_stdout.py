"""stdout that cannot take a command's output: an encoding without its characters
(``PYTHONIOENCODING=ascii``) gets backslash escapes, a reader that left (``| head``) a quiet
exit 1 — never a traceback — for validate, calibrate, compare and data as for predict."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from servesim.cli.common import write_stdout

from hostile import start_servesim

DATA = Path(__file__).parent / "data"


def _measurements(tmp_path: Path) -> Path:
    path = tmp_path / "requests.jsonl"
    rows = [{"input_toks": 200, "output_toks": 20, "queued_ts": i * 0.125, "first_token_ts": i * 0.125 + 0.03,
             "last_token_ts": i * 0.125 + 0.03 + 19 * 0.006} for i in range(10)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _commands(tmp_path: Path) -> dict[str, list[str]]:
    measured = _measurements(tmp_path)
    return {
        "validate": ["validate", "--runs", "1"],
        "calibrate": ["calibrate", "-c", str(DATA / "calibrate.yaml"), "-m", str(measured), "--no-holdout",
                      "-o", str(tmp_path / "cal.yaml")],
        "compare": ["compare", str(measured), "-o", str(tmp_path / "c.html")],
        "data": ["data", "timing-cache"],
    }


def _run(args: list[str], env: dict[str, str], close_stdout: bool = False) -> tuple[int, str, str]:
    full_env = {**os.environ, **env}
    if close_stdout:  # the reader is gone before the command writes: `| head -0`
        read, write = os.pipe()
        os.close(read)
        process = subprocess.Popen([sys.executable, "-m", "servesim", *args], stdout=write,
                                   stderr=subprocess.PIPE, text=True, env=full_env)
        os.close(write)
        _, err = process.communicate(timeout=120)
        return process.returncode, "", err
    done = subprocess.run([sys.executable, "-m", "servesim", *args], capture_output=True, env=full_env,
                          timeout=120)
    return done.returncode, done.stdout.decode("ascii", "replace"), done.stderr.decode("utf-8", "replace")


@pytest.mark.parametrize("command", ["validate", "calibrate", "compare", "data"])
def test_an_ascii_stdout_gets_escapes(tmp_path, command):
    code, out, err = _run(_commands(tmp_path)[command], {"PYTHONIOENCODING": "ascii"})
    assert code == 0 and "Traceback" not in err, err
    if command == "validate":
        assert "RTX 4090 \\xb7 Llama-3.1-8B" in out  # the run's name, escaped


@pytest.mark.parametrize("command", ["validate", "calibrate", "compare", "data"])
def test_a_reader_that_left_is_a_quiet_exit_1(tmp_path, command):
    code, _, err = _run(_commands(tmp_path)[command], {}, close_stdout=True)
    assert code == 1 and "Traceback" not in err and "Exception ignored" not in err, err
    assert "BrokenPipe" not in err and "Broken pipe" not in err


def test_calibrate_still_writes_its_file_when_stdout_is_gone(tmp_path):
    code, _, err = _run(_commands(tmp_path)["calibrate"], {}, close_stdout=True)
    assert code == 1 and (tmp_path / "cal.yaml").read_text().startswith("# servesim calibration file")


def test_write_stdout_escapes_on_a_stream_that_cannot_be_reconfigured(monkeypatch):
    raw = io.BytesIO()

    class Fixed(io.TextIOWrapper):
        reconfigure = None  # type: ignore[assignment]

    stream = Fixed(raw, encoding="ascii")
    monkeypatch.setattr(sys, "stdout", stream)
    assert write_stdout("validate", "a · b\n") == 0
    sys.stdout.flush()
    assert raw.getvalue() == b"a \\xb7 b\n"


def test_predict_with_head_is_quiet(tmp_path):
    process = start_servesim(["predict", "-c", str(DATA / "calibrate.yaml"), "--output-dir", str(tmp_path / "o")],
                             stdout=subprocess.PIPE)
    assert process.stdout is not None
    process.stdout.close()
    _, err = process.communicate(timeout=120)
    assert process.returncode == 1 and "Traceback" not in err, err
