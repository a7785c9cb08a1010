"""`calibrate -o`, `validate -o` and `compare -o`: an unusable target fails before the work
(exit 2), a write that fails after it keeps the previous file (exit 1), the file is replaced
atomically and never written through a symbolic link."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from servesim.output_file import OutputFile
from servesim.errors import ConfigError
from servesim.outputs import OutputError

from hostile import run_in_process, run_servesim

DATA = Path(__file__).parent / "data"
CONFIG = DATA / "calibrate.yaml"


def _measurements(tmp_path: Path) -> Path:
    path = tmp_path / "requests.jsonl"
    rows = [{"input_toks": 200, "output_toks": 20, "queued_ts": i * 0.125, "first_token_ts": i * 0.125 + 0.03,
             "last_token_ts": i * 0.125 + 0.03 + 19 * 0.006} for i in range(10)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _blocked(tmp_path: Path, kind: str) -> Path:
    """A target that cannot be written: under a regular file, or an existing directory."""
    if kind == "under_a_file":
        (tmp_path / "plain").write_text("x")
        return tmp_path / "plain" / "out"
    folder = tmp_path / "a_directory"
    folder.mkdir()
    return folder


def _commands(tmp_path: Path, target: Path) -> dict[str, list[str]]:
    run = tmp_path / "measured"
    run.mkdir(exist_ok=True)
    measured = _measurements(run)
    return {
        "calibrate": ["calibrate", "-c", str(CONFIG), "-m", str(measured), "--no-holdout", "-o", str(target)],
        "validate": ["validate", "--runs", "1", "-o", str(target)],
        "compare": ["compare", str(measured), "-o", str(target)],
    }


@pytest.mark.parametrize("kind", ["under_a_file", "directory"])
@pytest.mark.parametrize("command", ["calibrate", "validate", "compare"])
def test_an_unusable_target_fails_before_the_work(tmp_path, command, kind):
    target = _blocked(tmp_path, kind)
    run = run_in_process(_commands(tmp_path, target)[command])
    run.assert_clean(2)
    assert f"-o {target}" in run.stderr and run.seconds < 5, run.stderr
    assert run.stdout == ""  # nothing was worked out


@pytest.mark.parametrize("command", ["calibrate", "compare"])
def test_a_full_disk_keeps_the_previous_file(tmp_path, command):
    target = tmp_path / "out" / "result"
    target.parent.mkdir()
    target.write_text("previous\n")
    run = run_servesim(_commands(tmp_path, target)[command], timeout=120, file_size=200)
    run.assert_clean(1)
    # compare fails writing its page; calibrate already writing its replays' scratch trace
    assert (f"cannot write {target}" if command == "compare" else "cannot write") in run.stderr, run.stderr
    assert target.read_text() == "previous\n"
    assert sorted(p.name for p in target.parent.iterdir()) == ["result"]  # no temporary file left


def test_a_symlinked_target_is_replaced_not_written_through(tmp_path):
    outside = tmp_path / "outside.html"
    outside.write_text("keep me\n")
    folder = tmp_path / "out"
    folder.mkdir()
    link = folder / "compare.html"
    link.symlink_to(outside)
    run = run_in_process(_commands(tmp_path, link)["compare"])
    run.assert_clean(0)
    assert outside.read_text() == "keep me\n"
    assert not link.is_symlink() and "<html" in link.read_text().lower()


def test_a_planted_temporary_symlink_is_never_followed(tmp_path):
    outside = tmp_path / "outside"
    outside.write_text("keep me\n")
    folder = tmp_path / "out"
    folder.mkdir()
    for i in range(20):  # whatever hidden names it might pick are fresh, random and created exclusively
        (folder / f".servesim-planted{i}.tmp").symlink_to(outside)
    target = OutputFile("-o", folder / "cal.yaml")
    target.check()
    target.write("new\n")
    assert (folder / "cal.yaml").read_text() == "new\n" and outside.read_text() == "keep me\n"


def test_the_previous_file_keeps_its_permissions(tmp_path):
    path = tmp_path / "cal.yaml"
    path.write_text("old\n")
    os.chmod(path, 0o640)
    target = OutputFile("-o", path)
    target.check()
    target.write("new\n")
    assert path.read_text() == "new\n" and (path.stat().st_mode & 0o777) == 0o640


def test_a_failed_write_is_an_output_error_and_keeps_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "cal.yaml"
    path.write_text("old\n")
    target = OutputFile("-o", path)
    target.check()

    def refuse(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(OutputError, match="No space left on device"):
        target.write("new\n")
    assert path.read_text() == "old\n" and sorted(p.name for p in tmp_path.iterdir()) == ["cal.yaml"]


def test_validate_keeps_the_text_around_its_markers(tmp_path):
    doc = tmp_path / "accuracy.md"
    doc.write_text("intro\n<!-- servesim validate: begin -->\nold\n<!-- servesim validate: end -->\noutro\n")
    run = run_in_process(["validate", "--runs", "1", "--summary", "-o", str(doc)])
    run.assert_clean(0)
    text = doc.read_text()
    assert text.startswith("intro\n<!-- servesim validate: begin -->\n") and text.endswith("end -->\noutro\n")
    assert "old" not in text and "mean absolute error" in text


def test_validate_refuses_an_existing_target_that_is_not_text(tmp_path):
    doc = tmp_path / "accuracy.md"
    doc.write_bytes(b"\xff\xfe binary")
    run = run_in_process(["validate", "--runs", "1", "-o", str(doc)])
    run.assert_clean(2)
    assert "not UTF-8" in run.stderr and doc.read_bytes() == b"\xff\xfe binary"


def test_check_names_the_option():
    with pytest.raises(ConfigError, match="^-o /dev/null/x: "):
        OutputFile("-o", "/dev/null/x").check()
