"""`servesim.outputs.OutputSet`: a result set is committed whole or not at all, whatever fails
or interrupts it (the guarantee behind --overwrite keeping the previous results)."""

from __future__ import annotations

import errno
import os
import signal

import pytest

from servesim import outputs
from servesim.outputs import OutputError, OutputSet


def _snapshot(folder):
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def folder(tmp_path):
    """A folder holding a previous result set, a numbered recommendation and a user's file."""
    (tmp_path / "prediction.json").write_text("old prediction")
    (tmp_path / "requests.jsonl").write_text("old requests")
    (tmp_path / "recommendations").mkdir()
    (tmp_path / "recommendations" / "0001.yaml").write_text("old recommendation")
    (tmp_path / "notes.txt").write_text("mine")
    return tmp_path


def _failing_replace(fail_on_call: int, exc: BaseException):
    real = os.replace
    calls = {"n": 0}

    def replace(src, dst):
        calls["n"] += 1
        if calls["n"] == fail_on_call:
            raise exc
        return real(src, dst)
    return replace


def test_commit_replaces_the_whole_set(folder):
    with OutputSet(folder) as out:
        out.stage("prediction.json", "new prediction")
        out.stage("workers.json", "new workers")
        out.commit()
    assert _snapshot(folder) == {"notes.txt": b"mine", "prediction.json": b"new prediction",
                                 "workers.json": b"new workers"}


@pytest.mark.parametrize("fail_on_call", range(1, 8))
def test_a_failing_rename_restores_the_previous_set(folder, monkeypatch, fail_on_call):
    before = _snapshot(folder)
    monkeypatch.setattr(outputs.os, "replace", _failing_replace(fail_on_call, OSError(errno.EIO, "I/O error")))
    failure = None
    try:
        with OutputSet(folder) as out:
            out.stage("prediction.json", "new prediction")
            out.stage("workers.json", "new workers")
            out.commit()
    except OutputError as exc:
        failure = str(exc)
    if failure is None:  # the failing call would have come after the commit's last rename
        assert _snapshot(folder)["prediction.json"] == b"new prediction"
        return
    assert str(folder) in failure and "I/O error" in failure
    assert _snapshot(folder) == before


def test_an_interrupt_while_staging_leaves_the_folder_as_it_was(folder, monkeypatch):
    before = _snapshot(folder)

    def interrupted(fd):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        with OutputSet(folder) as out:
            out.stage("prediction.json", "new prediction")
            monkeypatch.setattr(outputs.os, "fsync", interrupted)
            out.stage("requests.jsonl", "new requests")
    assert _snapshot(folder) == before


def test_a_signal_during_the_commit_waits_for_its_end(folder, monkeypatch):
    """SIGINT arriving between two renames is delivered once the new set is in place."""
    real = os.replace

    def replace_and_signal(src, dst):
        os.kill(os.getpid(), signal.SIGINT)
        return real(src, dst)

    monkeypatch.setattr(outputs.os, "replace", replace_and_signal)
    with pytest.raises(KeyboardInterrupt):
        with OutputSet(folder) as out:
            out.stage("prediction.json", "new prediction")
            out.stage("requests.jsonl", "new requests")
            out.commit()
    assert _snapshot(folder) == {"notes.txt": b"mine", "prediction.json": b"new prediction",
                                 "requests.jsonl": b"new requests"}


def test_a_full_disk_while_staging_names_the_file(folder, monkeypatch):
    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(outputs.os, "fsync", full)
    before = _snapshot(folder)
    with pytest.raises(OutputError, match="prediction.json: No space left on device"):
        with OutputSet(folder) as out:
            out.stage("prediction.json", "new prediction")
    assert _snapshot(folder) == before


def test_committed_files_get_the_usual_permissions(folder):
    """Not the 0600 of a temporary file: results are as readable as any file made there."""
    plain = folder / "plain.txt"
    plain.write_text("x")
    with OutputSet(folder) as out:
        out.stage("prediction.json", "new prediction")
        out.commit()
    assert (folder / "prediction.json").stat().st_mode == plain.stat().st_mode



def test_hidden_files_are_new_private_and_never_an_existing_file(tmp_path, monkeypatch):
    handle, first = outputs.create_hidden(tmp_path, ".tmp")
    os.close(handle)
    assert first.name.startswith(".servesim-") and first.suffix == ".tmp"
    assert first.stat().st_mode & 0o777 == 0o600
    first.write_text("kept")
    taken = bytes.fromhex(first.name[len(".servesim-"):-len(".tmp")])
    draws = iter([taken, taken, b"\x01" * 6])  # the first two draws name `first` again
    monkeypatch.setattr(outputs.os, "urandom", lambda n: next(draws))
    handle, second = outputs.create_hidden(tmp_path, ".tmp")
    os.close(handle)
    assert second.name == ".servesim-010101010101.tmp" and first.read_text() == "kept"
