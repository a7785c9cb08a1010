"""The README's commands work as written, in order, on a fresh checkout (issue 19, "README")."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hostile import run_in_process

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"


def _bash_commands(markdown: str, sections: tuple[str, ...]) -> list[str]:
    """Commands of the ```bash blocks before the first section heading and under `sections`, in
    order (continuation lines joined, comments dropped)."""
    commands: list[str] = []
    section = ""
    for part in re.split(r"^(## .*)$", markdown, flags=re.M):
        if part.startswith("## "):
            section = part[3:].strip()
            continue
        if section and section not in sections:
            continue
        for block in re.findall(r"```bash\n(.*?)```", part, flags=re.S):
            text = block.replace("\\\n", " ")
            for line in text.splitlines():
                line = re.sub(r"\s+#.*$", "", line).strip()
                if line and not line.startswith("#"):
                    commands.extend(c.strip() for c in line.split("&&"))
    return commands


@pytest.mark.slow
def test_quick_start_runs_in_order_on_a_fresh_checkout(tmp_path, monkeypatch):
    """The set-up line, then every quick-start command, in a copy of the checkout (without
    outputs of earlier runs): all exit 0."""
    local = {".git", ".venv", "tests", "servesim-output", "out", "rec"}
    shutil.copytree(ROOT, tmp_path / "checkout", ignore=lambda folder, names: [
        n for n in names if (folder == str(ROOT) and n in local) or n.startswith(".") or n == "__pycache__"])
    monkeypatch.chdir(tmp_path / "checkout")
    commands = [c for c in _bash_commands(README.read_text(), ("Quick start",)) if c.startswith("servesim ")]
    assert len(commands) >= 3, commands
    for command in commands:
        run = run_in_process(shlex.split(command)[1:])
        assert run.returncode == 0, (command, run.stderr[-3000:])


def test_the_test_command_shows_pytest_summary_line(tmp_path):
    """The README's test command (with the project's pytest settings), aimed at one small test file,
    ends with pytest's 'N passed' line."""
    commands = [c for c in _bash_commands(README.read_text(), ()) if "pytest" in c]
    assert commands, "the README shows how to run the tests"
    argv = shlex.split(commands[0])
    assert argv[:3] == ["python", "-m", "pytest"], argv
    sample = tmp_path / "test_sample.py"
    sample.write_text("def test_one():\n    assert 1 + 1 == 2\n")
    done = subprocess.run([sys.executable, *argv[1:], "-c", str(ROOT / "pyproject.toml"), str(sample),
                           "-p", "no:cacheprovider"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(r"\b1 passed\b", done.stdout), done.stdout
