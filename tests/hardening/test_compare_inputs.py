"""`servesim compare` on damaged servesim output folders: a clear error naming FILE:LINE and
the rule (exit 1), never a traceback; the per-request records streamed, not held."""

from __future__ import annotations

import json
import shutil
import tracemalloc
from pathlib import Path

import pytest

from servesim.errors import TraceError
from servesim.report.html.compare import load_run
from servesim.report.html.compare_inputs import read_latency

from hostile import run_in_process, run_servesim

CONFIG = Path(__file__).parent / "data" / "calibrate.yaml"


@pytest.fixture(scope="module")
def captured(tmp_path_factory) -> Path:
    """A real servesim output folder with per-request records (prediction.json and requests.jsonl)."""
    out = tmp_path_factory.mktemp("run") / "out"
    run = run_servesim(["predict", "-c", str(CONFIG), "--output-dir", str(out), "--capture-per-request",
                        "--set", "traffic.stop.requests=30"], timeout=120)
    run.assert_clean(0)
    return out


def _copy(captured: Path, tmp_path: Path, *, records: bool = True) -> Path:
    folder = tmp_path / "run"
    shutil.copytree(captured, folder)
    if not records:
        (folder / "requests.jsonl").unlink()
    return folder


def _compare(tmp_path: Path, folder: Path) -> str:
    out = tmp_path / "compare.html"
    run = run_in_process(["compare", str(folder), "-o", str(out)])
    run.assert_clean(1)
    assert not out.exists()
    return run.stderr


def test_an_intact_folder_reads_the_same_from_either_file(captured, tmp_path):
    whole = load_run(captured)
    without = load_run(_copy(captured, tmp_path, records=False))
    assert whole.latency is not None and without.latency is not None
    assert list(whole.latency.ttft_ms) == list(without.latency.ttft_ms)
    assert whole.figures == without.figures and whole.figures["requests"] == 30


@pytest.mark.parametrize("change", ["missing", "string", "list", "null_figure", "number"])
def test_a_damaged_prediction_json(captured, tmp_path, change):
    folder = _copy(captured, tmp_path)
    path = folder / "prediction.json"
    doc = json.loads(path.read_text())
    if change == "missing":
        del doc["completed_requests"]
    elif change == "string":
        doc["p90_ttft_ms"] = "fast"
    elif change == "null_figure":
        doc["num_requests"] = None
    path.write_text(json.dumps([doc] if change == "list" else 7 if change == "number" else doc, indent=2))
    message = _compare(tmp_path, folder)
    assert f"{path}: " in message
    expected = {"missing": "completed_requests", "string": "p90_ttft_ms: must be a finite number", "list": "a JSON list",
                "null_figure": "num_requests: must be a finite number", "number": "a JSON int"}[change]
    assert expected in message, message


def test_non_utf8_prediction_json_names_the_line(captured, tmp_path):
    folder = _copy(captured, tmp_path)
    path = folder / "prediction.json"
    lines = path.read_bytes().split(b"\n")
    lines[2] = lines[2].replace(b'"', b'"\xff', 1)
    path.write_bytes(b"\n".join(lines))
    assert f"{path}:3: not UTF-8" in _compare(tmp_path, folder)


def test_a_truncated_requests_jsonl_names_the_line(captured, tmp_path):
    folder = _copy(captured, tmp_path)
    path = folder / "requests.jsonl"
    text = path.read_text()
    path.write_text(text[: len(text) - len(text.splitlines()[-1]) // 2 - 1])
    assert f"{path}:30: invalid JSON" in _compare(tmp_path, folder)


@pytest.mark.parametrize(("key", "value"), [("arrival_time_ms", "soon"), ("ttft_ms", [1]), ("terminal_status", 3)])
def test_a_bad_record_names_its_line_and_key(captured, tmp_path, key, value):
    folder = _copy(captured, tmp_path)
    path = folder / "requests.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    rows[4][key] = value
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert f"{path}:5: {key}: must be" in _compare(tmp_path, folder)


def test_a_truncated_per_request_array(captured, tmp_path):
    folder = _copy(captured, tmp_path, records=False)
    path = folder / "prediction.json"
    text = path.read_text()
    path.write_text(text[: text.index('"per_request": [') + 2000])
    message = _compare(tmp_path, folder)
    assert str(path) in message and ("truncated" in message or "invalid JSON" in message), message


@pytest.mark.parametrize("damage", ["garbage", "truncated", "empty"])
def test_a_corrupt_parquet_file(captured, tmp_path, damage):
    pytest.importorskip("pyarrow")
    folder = _copy(captured, tmp_path)
    path = folder / "requests.parquet"
    from servesim.report.tables import write_parquet

    write_parquet([json.loads(line) for line in (folder / "requests.jsonl").read_text().splitlines()], path)
    assert load_run(folder).latency is not None
    data = path.read_bytes()
    path.write_bytes({"garbage": b"PAR1" + b"\x00\x17" * 500, "truncated": data[: len(data) // 2], "empty": b""}[damage])
    message = _compare(tmp_path, folder)
    assert f"{path}: not a readable Parquet file" in message, message


def test_records_are_streamed_not_held(tmp_path):
    """~40 bytes per request of arrays, not a parsed record (~8.5 KB) per request."""
    folder = tmp_path / "big"
    folder.mkdir()
    row = {"arrival_time_ms": 1.0, "terminal_status": "completed", "ttft_ms": 5.0, "terminal_time_ms": 20.0,
           "e2e_latency_ms": 19.0, "itl_ms": 1.5, "routing_history": [{"pool": "agg", "x": list(range(50))}] * 4}
    count = 50_000
    line = json.dumps(row) + "\n"
    (folder / "requests.jsonl").write_text(line * count)
    tracemalloc.start()
    latency = read_latency(folder, False)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert latency is not None and len(latency.ttft_ms) == count
    assert peak < 40 << 20, f"{peak / count:.0f} bytes per request"  # one 4096-line chunk of text, plus arrays


def test_a_folder_that_is_not_servesims(tmp_path):
    folder = tmp_path / "odd"
    folder.mkdir()
    (folder / "prediction.json").write_text('{"a":\n' + "[" * 100 + "]" * 100 + "}")
    with pytest.raises(TraceError, match=r"prediction.json:2: nested deeper"):
        load_run(folder)


def test_lines_after_the_skipped_records_keep_their_numbers(captured, tmp_path):
    folder = _copy(captured, tmp_path)
    path = folder / "prediction.json"
    lines = path.read_text().splitlines(keepends=True)
    number = next(i for i, line in enumerate(lines) if line.startswith('  "prefill_gpus_per_worker"'))
    lines[number] = lines[number].replace(": ", ": NaN, \"x\": ", 1)
    path.write_text("".join(lines))
    assert f"{path}:{number + 1}: NaN is not a JSON number" in _compare(tmp_path, folder)


def test_a_bad_byte_inside_a_record_of_prediction_json_names_its_line(captured, tmp_path):
    folder = _copy(captured, tmp_path, records=False)
    path = folder / "prediction.json"
    lines = path.read_bytes().split(b"\n")
    number = next(i for i, line in enumerate(lines) if line.startswith(b'      "uuid"'))
    lines[number] = lines[number].replace(b'": "', b'": "\xff', 1)
    path.write_bytes(b"\n".join(lines))
    assert f"{path}:{number + 1}: not UTF-8" in _compare(tmp_path, folder)


@pytest.mark.parametrize("key", ["ttft_ms", "arrival_time_ms"])
def test_a_bad_value_inside_a_record_of_prediction_json_names_its_line(captured, tmp_path, key):
    folder = _copy(captured, tmp_path, records=False)
    path = folder / "prediction.json"
    lines = path.read_text().splitlines(keepends=True)
    number = [i for i, line in enumerate(lines) if line.startswith(f'      "{key}": ')][3]
    lines[number] = f'      "{key}": "late",\n'
    path.write_text("".join(lines))
    record_start = max(i for i in range(number) if lines[i] == "    {\n")
    assert f"{path}:{record_start + 1}: {key}: must be a finite number" in _compare(tmp_path, folder)
