"""Outputs: unusable locations, full devices, atomic writes, and previous results that survive
failed and interrupted runs (issue 19, "Data safety" and the output-location tracebacks)."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from hostile import finish, run_in_process, run_servesim, start_servesim, write_config

OUTPUTS = ("prediction.json", "requests.jsonl", "workers.json")


def _snapshot(folder: Path) -> dict[str, bytes]:
    """Every file in `folder` (hidden ones too) and its bytes."""
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def _previous_results(tmp_path: Path) -> tuple[Path, dict[str, bytes]]:
    """An output folder holding a complete earlier result set (3 requests, captured) and a user file."""
    config = write_config(tmp_path, {"traffic.stop.requests": 3}, name="previous.yaml")
    out = tmp_path / "out"
    run_in_process(["predict", "-c", str(config), "--output-dir", str(out), "--capture-per-request"]).assert_clean(0)
    (out / "notes.txt").write_text("the user's own file\n")
    before = _snapshot(out)
    assert set(OUTPUTS) <= set(before)
    return out, before


def _is_complete_new_set(folder: Path, requests: int, user_files: set[str]) -> bool:
    names = {p.name for p in folder.iterdir()}
    if names != set(OUTPUTS) | user_files:
        return False
    report = json.loads((folder / "prediction.json").read_text())
    lines = (folder / "requests.jsonl").read_text().splitlines()
    json.loads((folder / "workers.json").read_text())
    return report["num_requests"] == requests and len(report["per_request"]) == len(lines) == requests


# -- unusable output locations: exit 2, the path and the reason, before simulating --------------


def _assert_location_error(run, path: str, reason: str, tmp_path: Path) -> None:
    run.assert_clean(2)
    assert run.stdout == ""
    assert path in run.stderr and reason in run.message(tmp_path), run.stderr


def test_output_dir_below_a_regular_file(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    config = write_config(tmp_path)
    target = blocker / "out"
    _assert_location_error(run_in_process(["predict", "-c", str(config), "--output-dir", str(target)]),
                           str(target), "Not a directory", tmp_path)


def test_output_dir_name_too_long(tmp_path):
    config = write_config(tmp_path)
    target = tmp_path / ("x" * 300)
    _assert_location_error(run_in_process(["predict", "-c", str(config), "--output-dir", str(target)]),
                           str(target), "File name too long", tmp_path)


@pytest.mark.parametrize("target", ["/proc/servesim-hardening-test/out", "/sys/servesim-hardening-test"])
def test_output_dir_in_a_kernel_filesystem(tmp_path, target):
    mount = "/" + target.split("/")[1]
    if not Path(mount).is_dir():
        pytest.skip(f"no {mount}")
    config = write_config(tmp_path)
    run = run_in_process(["predict", "-c", str(config), "--output-dir", target])
    run.assert_clean(2)
    assert target in run.stderr and "--output-dir" in run.stderr


def test_unwritable_existing_output_dir_is_refused_before_the_run(tmp_path):
    if not Path("/proc/self").is_dir():
        pytest.skip("no /proc")
    config = write_config(tmp_path)
    run = run_in_process(["predict", "-c", str(config), "--output-dir", "/proc/self", "--overwrite"])
    run.assert_clean(2)
    assert "/proc/self" in run.stderr


# -- full devices: exit 1, naming what could not be written ------------------------------------


@pytest.mark.parametrize("fmt", ["table", "json"])
def test_stdout_on_a_full_device(tmp_path, fmt):
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    config = write_config(tmp_path)
    with open("/dev/full", "w") as full:
        run = run_servesim(["predict", "-c", str(config), "--output-dir", str(tmp_path / "o"), "--format", fmt],
                           stdout=full)
    run.assert_clean(1)
    assert "stdout" in run.message(tmp_path) and "No space left on device" in run.stderr
    assert json.loads((tmp_path / "o" / "prediction.json").read_text())["completed_requests"] == 5


@pytest.mark.parametrize(("requests", "file_size"), [
    pytest.param(40, 3000, id="writing-the-results"),
    # the per-request records spooled during the run pass the spool's 1 MB buffer and hit the limit
    pytest.param(3000, 500_000, id="spooling-records"),
])
def test_a_full_disk_keeps_the_previous_results(tmp_path, requests, file_size):
    """A write that fails part-way (the file-size limit stands in for a full disk) leaves no
    truncated file or spool behind, names the folder, exits 1, and the previous results are untouched."""
    out, before = _previous_results(tmp_path)
    config = write_config(tmp_path, {"traffic.stop.requests": requests})
    run = run_servesim(["predict", "-c", str(config), "--output-dir", str(out), "--overwrite",
                        "--capture-per-request"], file_size=file_size)
    run.assert_clean(1)
    assert str(out) in run.stderr and "File too large" in run.stderr
    assert _snapshot(out) == before


# -- --overwrite: the previous results survive until the new ones are complete ------------------


def test_overwrite_keeps_previous_results_when_the_run_fails(tmp_path):
    out, before = _previous_results(tmp_path)
    trace = tmp_path / "trace.jsonl"
    trace.write_text('{"hash_ids": [1, 2], "output_length": 3}\n{"hash_ids": [1], "output_length": "x"}\n')
    config = write_config(tmp_path, {"traffic": {"source": {"type": "trace", "paths": [str(trace)]},
                                                 "load": {"type": "concurrency", "concurrency": 1}}})
    run = run_in_process(["predict", "-c", str(config), "--output-dir", str(out), "--overwrite",
                        "--capture-per-request"])
    run.assert_clean(1)
    assert f"{trace}:2" in run.stderr
    assert _snapshot(out) == before


def test_overwrite_replaces_the_whole_set(tmp_path):
    """A run without capture replaces a captured set: no stale requests.jsonl/workers.json."""
    out, before = _previous_results(tmp_path)
    config = write_config(tmp_path, {"traffic.stop.requests": 4})
    run_in_process(["predict", "-c", str(config), "--output-dir", str(out), "--overwrite"]).assert_clean(0)
    assert {p.name for p in out.iterdir()} == {"prediction.json", "notes.txt"}
    assert json.loads((out / "prediction.json").read_text())["num_requests"] == 4
    assert (out / "notes.txt").read_bytes() == before["notes.txt"]


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_interrupted_run_keeps_previous_results(tmp_path, signum):
    out, before = _previous_results(tmp_path)
    config = write_config(tmp_path, {"traffic.stop.requests": 1_000_000, "traffic.load.concurrency": 64})
    started = time.monotonic()
    process = start_servesim(["predict", "-c", str(config), "--output-dir", str(out), "--overwrite",
                              "--capture-per-request"])
    time.sleep(2.5)  # start-up and validation are over: the replay is running
    assert process.poll() is None
    process.send_signal(signum)
    run = finish(process, 30, started)
    run.assert_clean(128 + signum)
    assert "interrupted" in run.message(tmp_path)
    assert _snapshot(out) == before


@pytest.mark.parametrize("changes_seen", [1, 2, 3])
def test_interrupt_while_writing_leaves_the_old_or_the_new_set(tmp_path, changes_seen):
    """SIGINT as soon as the output folder changed `changes_seen` times (a file appeared,
    grew, or was renamed): the folder then holds the complete previous set or the complete
    new one, never a mix, and no partial or temporary file."""
    out, before = _previous_results(tmp_path)
    requests = 1500
    config = write_config(tmp_path, {"traffic.stop.requests": requests, "traffic.load.concurrency": 16})
    started = time.monotonic()
    process = start_servesim(["predict", "-c", str(config), "--output-dir", str(out), "--overwrite",
                              "--capture-per-request"], stdout=open(os.devnull, "w"))
    seen, last = 0, _listing(out)
    while process.poll() is None and seen < changes_seen and time.monotonic() - started < 60:
        now = _listing(out)
        if now != last:
            seen, last = seen + 1, now
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
    run = finish(process, 60, started)
    run.assert_clean(0, 130)
    user = {"notes.txt"}
    assert _snapshot(out) == before or _is_complete_new_set(out, requests, user), sorted(os.listdir(out))


def _listing(folder: Path) -> list[tuple[str, int]]:
    entries = []
    for entry in os.scandir(folder):
        try:
            entries.append((entry.name, entry.stat().st_size))
        except FileNotFoundError:
            continue
    return sorted(entries)


# -- what goes where ---------------------------------------------------------------------------


def test_json_stdout_with_capture_is_the_summary_only(tmp_path):
    """`--format json --capture-per-request` prints the summary line; the records go to files."""
    config = write_config(tmp_path, {"traffic.stop.requests": 50})
    run = run_in_process(["predict", "-c", str(config), "--output-dir", str(tmp_path / "o"), "--format", "json",
                        "--capture-per-request"])
    run.assert_clean(0)
    line = json.loads(run.stdout)
    assert "per_request" not in line and line["completed_requests"] == 50
    assert len((tmp_path / "o" / "requests.jsonl").read_text().splitlines()) == 50
    assert len(json.loads((tmp_path / "o" / "prediction.json").read_text())["per_request"]) == 50


def test_workers_json_only_with_capture(tmp_path):
    config = write_config(tmp_path)
    run_in_process(["predict", "-c", str(config), "--output-dir", str(tmp_path / "plain")]).assert_clean(0)
    assert sorted(os.listdir(tmp_path / "plain")) == ["prediction.json"]
    run_in_process(["predict", "-c", str(config), "--output-dir", str(tmp_path / "cap"),
                  "--capture-per-request"]).assert_clean(0)
    assert sorted(os.listdir(tmp_path / "cap")) == sorted(OUTPUTS)
