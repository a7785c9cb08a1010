"""Issue 35, second hostile audit: inputs that are pipes or devices, and benchmark-point CSVs
with huge values.

Found by hand: a measurement file, a calibration file or a trace that is a named pipe nobody
writes to made `compare`, `calibrate` and `predict` wait for ever; a points CSV with a 10 MB
field was a `_csv.Error` traceback, and `num_prompts: 10^12` or `isl: 10^12` ran out of memory
instead of being refused at its line."""

from __future__ import annotations

import csv
import io
import os
import threading
from pathlib import Path

import pytest
import yaml

from hostile import run_in_process

DATA = Path(__file__).parent / "data"


@pytest.fixture
def fifo(tmp_path: Path):
    """A named pipe nobody writes to; opened for writing at the end so no reader stays blocked."""
    path = tmp_path / "pipe.jsonl"
    os.mkfifo(path)
    yield path
    unblock = threading.Thread(target=lambda: os.close(os.open(path, os.O_RDONLY | os.O_NONBLOCK)), daemon=True)
    unblock.start()


def test_a_measurement_pipe_is_refused(tmp_path: Path, fifo: Path) -> None:
    run = run_in_process(["compare", str(fifo), "-o", str(tmp_path / "c.html")])
    run.assert_clean(1)
    assert f"{fifo}: cannot read measurements: not a regular file" in run.stderr
    run = run_in_process(["calibrate", "-c", str(DATA / "calibrate.yaml"), "-m", "/dev/zero",
                          "-o", str(tmp_path / "c.yaml"), "--no-holdout"])
    run.assert_clean(1)
    assert "/dev/zero: cannot read measurements: not a regular file" in run.stderr


def test_a_calibration_pipe_and_a_trace_pipe_are_refused(tmp_path: Path, fifo: Path) -> None:
    config = yaml.safe_load((DATA / "calibrate.yaml").read_text())
    config["engine"]["workers"]["aggregated"]["timing"]["calibration"] = str(fifo)
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(config))
    run = run_in_process(["predict", "-c", str(path), "--output-dir", str(tmp_path / "o")])
    run.assert_clean(2)
    assert "timing.calibration: bad calibration file:" in run.stderr and "not a regular file" in run.stderr
    del config["engine"]["workers"]["aggregated"]["timing"]["calibration"]
    config["traffic"] = {"source": {"type": "trace", "format": "mooncake", "paths": [str(fifo)]},
                         "load": {"type": "trace_timestamps"}}
    path.write_text(yaml.safe_dump(config))
    run = run_in_process(["predict", "-c", str(path), "--output-dir", str(tmp_path / "o")])
    run.assert_clean(1)
    assert f"{fifo}: cannot read trace: not a regular file" in run.stderr


HEADER = ("row_id,model,gpu,engine,engine_image,tp,ep,dp_attention,num_gpus,isl,osl,range_ratio,conc,"
          "num_prompts,mean_ttft_ms,mean_tpot_ms,tput_per_gpu,licence")
ROW = {"row_id": "p-vllm", "model": "openai/gpt-oss-120b", "gpu": "h200", "engine": "vllm",
       "engine_image": "vllm/vllm-openai:v0.13.0", "tp": "2", "ep": "1", "dp_attention": "false", "num_gpus": "2",
       "isl": "1024", "osl": "1024", "range_ratio": "0.8", "conc": "4", "num_prompts": "40", "mean_ttft_ms": "58.7",
       "mean_tpot_ms": "4.91", "tput_per_gpu": "786.3", "licence": "test"}


def _points(tmp_path: Path, **changes: str) -> Path:
    out = io.StringIO()
    writer = csv.DictWriter(out, HEADER.split(","))
    writer.writeheader()
    writer.writerow({**ROW, **changes})
    path = tmp_path / "points.csv"
    path.write_text(out.getvalue())
    return path


@pytest.mark.parametrize(("column", "value", "words"), [
    ("num_prompts", "1000000000000", "column 'num_prompts': must be at most 100,000,000"),
    ("isl", "1000000000000", "column 'isl': must be at most 1,000,000,000"),
    ("tp", "1000000", "column 'tp': must be at most 100,000"),
    ("licence", "x" * 10_000_000, "not a benchmark-point CSV: field larger than field limit"),
])
def test_a_points_csv_with_huge_values_names_its_line(tmp_path: Path, column: str, value: str, words: str) -> None:
    path = _points(tmp_path, **{column: value})
    run = run_in_process(["validate", "--points", str(path), "-o", str(tmp_path / "v.md")])
    run.assert_clean(1)
    assert f"{path}:2: {words}" in run.stderr, run.stderr


def test_a_points_csv_that_is_not_utf8_names_its_line(tmp_path: Path) -> None:
    path = _points(tmp_path)
    path.write_bytes(path.read_bytes().replace(b"gpt-oss", b"gpt\xff-oss", 1))
    run = run_in_process(["validate", "--points", str(path), "-o", str(tmp_path / "v.md")])
    run.assert_clean(1)
    assert f"{path}:2: not UTF-8 text" in run.stderr, run.stderr
