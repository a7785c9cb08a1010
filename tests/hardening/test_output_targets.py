"""Issue 35, second hostile audit: `-o` targets that are not files, compare's SLA flags and a
broken servesim output folder.

Found by hand (variants the earlier audit had not tried): `compare -o /dev/full` and `calibrate
-o /dev/full` exited 0 having *replaced the device* by a regular file (run as root), and so would
`-o /dev/null`; `-o /dev/stdout` replaced the system's link. `--sla-ttft-ms nan` (or a negative)
was accepted; a folder whose `prediction.json` is a directory was read as a measured run."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from hostile import run_in_process, run_servesim

DATA = Path(__file__).parent / "data"


def _measurements(tmp_path: Path) -> Path:
    path = tmp_path / "requests.jsonl"
    path.write_text("".join(
        f'{{"input_toks": 200, "output_toks": 20, "queued_ts": {i * 0.125}, "first_token_ts": {i * 0.125 + 0.03}, '
        f'"last_token_ts": {i * 0.125 + 0.15}}}\n' for i in range(12)))
    return path


def test_an_output_that_is_a_pipe_is_refused_and_kept(tmp_path: Path) -> None:
    fifo = tmp_path / "out.html"
    os.mkfifo(fifo)
    run = run_in_process(["compare", str(_measurements(tmp_path)), "-o", str(fifo)])
    run.assert_clean(2)
    assert f"-o {fifo}: not a regular file" in run.stderr
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


@pytest.mark.parametrize("device", ["/dev/null", "/dev/full", "/dev/stdout"])
def test_an_output_linking_to_a_system_device_is_refused(tmp_path: Path, device: str) -> None:
    """Through a link of our own, so that a regression replaces the link, never the device."""
    link = tmp_path / "out.yaml"
    link.symlink_to(device)
    run = run_in_process(["calibrate", "-c", str(DATA / "calibrate.yaml"), "-m", str(_measurements(tmp_path)),
                          "-o", str(link), "--no-holdout"])
    run.assert_clean(2)
    assert "a system device path" in run.stderr and os.readlink(link) == device
    assert not list(tmp_path.glob(".*"))  # no scratch left


@pytest.mark.parametrize("value", ["nan", "inf", "-5", "0", "fast"])
def test_compare_sla_targets_are_finite_positive_numbers(tmp_path: Path, value: str) -> None:
    run = run_servesim(["compare", str(_measurements(tmp_path)), "--sla-itl-ms", value,
                          "-o", str(tmp_path / "c.html")])
    run.assert_clean(2)
    assert "--sla-itl-ms: must be a finite number of milliseconds > 0" in run.stderr
    assert not (tmp_path / "c.html").exists()


def test_a_servesim_folder_whose_prediction_is_a_directory_is_a_broken_output(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "prediction.json").mkdir()
    _measurements(folder)
    run = run_in_process(["compare", str(folder), "-o", str(tmp_path / "c.html")])
    run.assert_clean(1)
    assert f"{folder / 'prediction.json'}: cannot read" in run.stderr
