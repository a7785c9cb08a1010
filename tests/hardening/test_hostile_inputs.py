"""Hostile config files and traces: clear errors (exit 2 for configs, 1 naming file:line for
traces), in bounded time and memory, never a traceback (issue 19)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from hostile import BASE_CONFIG, config_with, run_in_process, run_servesim, write_config


def _alias_bomb(levels: int = 9, width: int = 9) -> str:
    """A flow sequence of a few hundred bytes whose aliases expand to width**levels strings."""
    items = ["&l0 [" + ", ".join(["lol"] * width) + "]"]
    items += [f"&l{n} [" + ", ".join([f"*l{n - 1}"] * width) + "]" for n in range(1, levels)]
    return "[" + ", ".join(items) + "]"


def test_yaml_alias_bomb_is_refused_quickly(tmp_path):
    config = tmp_path / "bomb.yaml"
    body = yaml.safe_dump(BASE_CONFIG).replace("traffic:\n", f"traffic:\n  junk: {_alias_bomb()}\n", 1)
    config.write_text(body)
    assert len(_alias_bomb()) < 500
    run = run_servesim(["predict", "-c", str(config), "--output-dir", str(tmp_path / "o")],
                       timeout=30, memory_mb=1024)
    run.assert_clean(2)
    assert str(config) in run.stderr and "alias" in run.message(tmp_path).lower()
    assert run.seconds < 10


def test_yaml_alias_bomb_in_a_set_value_is_refused(tmp_path):
    config = write_config(tmp_path)
    run = run_servesim(["predict", "-c", str(config), "--output-dir", str(tmp_path / "o"),
                        "--set", f"traffic.junk={_alias_bomb()}"], timeout=30, memory_mb=1024)
    run.assert_clean(2)
    assert "alias" in run.message(tmp_path).lower() and run.seconds < 10


def test_anchors_aliases_and_merge_keys_of_reasonable_size_still_work(tmp_path):
    config = tmp_path / "anchors.yaml"
    text = yaml.safe_dump(config_with({"traffic.stop.requests": 2}), sort_keys=False)
    text = text.replace("max_batched_tokens: 512", "max_batched_tokens: &budget 512")
    text = text.replace("input_tokens: 100", "input_tokens: *budget")
    text = text.replace("    aggregated:\n", "    aggregated:\n      <<: {startup_seconds: 0}\n", 1)
    config.write_text(text)
    run = run_in_process(["predict", "-c", str(config), "--output-dir", str(tmp_path / "o"), "--format", "json"])
    run.assert_clean(0)
    assert json.loads(run.stdout)["total_input_tokens"] == 2 * 512


def test_duplicate_yaml_keys_are_an_error(tmp_path):
    config = tmp_path / "dup.yaml"
    lines = yaml.safe_dump(BASE_CONFIG, sort_keys=False).splitlines()
    index = next(i for i, line in enumerate(lines) if line.strip().startswith("decode_ms:"))
    lines.insert(index + 1, lines[index].replace("2", "3"))
    config.write_text("\n".join(lines) + "\n")
    run = run_in_process(["predict", "-c", str(config), "--output-dir", str(tmp_path / "o")])
    run.assert_clean(2)
    assert "duplicate key 'decode_ms'" in run.message(tmp_path)
    assert f"{config}:{index + 2}" in run.stderr


def test_duplicate_top_level_section_is_an_error(tmp_path):
    config = tmp_path / "dup.yaml"
    text = yaml.safe_dump(BASE_CONFIG, sort_keys=False)
    config.write_text(text + "engine:\n  model: other\n")
    run = run_in_process(["predict", "-c", str(config), "--output-dir", str(tmp_path / "o")])
    run.assert_clean(2)
    assert "duplicate key 'engine'" in run.message(tmp_path)


def test_duplicate_keys_in_a_set_value_are_an_error(tmp_path):
    config = write_config(tmp_path)
    run = run_in_process(["predict", "-c", str(config), "--output-dir", str(tmp_path / "o"),
                        "--set", "traffic.load={type: concurrency, concurrency: 2, concurrency: 3}"])
    run.assert_clean(2)
    assert "duplicate key 'concurrency'" in run.message(tmp_path)


def test_deeply_nested_yaml_is_a_config_error(tmp_path):
    config = tmp_path / "deep.yaml"
    config.write_text(yaml.safe_dump(BASE_CONFIG) + "junk: " + "[" * 100_000 + "]" * 100_000 + "\n")
    run = run_servesim(["predict", "-c", str(config), "--output-dir", str(tmp_path / "o")], timeout=30)
    run.assert_clean(2)
    assert str(config) in run.stderr


# -- traces ------------------------------------------------------------------------------------


def _trace_config(tmp_path: Path, rows: list[str], load: dict | None = None) -> tuple[Path, Path]:
    trace = tmp_path / "trace.jsonl"
    trace.write_text("\n".join(rows) + "\n")
    config = write_config(tmp_path, {"traffic": {
        "source": {"type": "trace", "paths": [str(trace)], "format": "mooncake"},
        "load": load or {"type": "trace_timestamps"}}})
    return config, trace


ROW = {"timestamp": 0, "input_length": 100, "output_length": 5, "hash_ids": [1, 2, 3, 4, 5, 6, 7]}


def test_deeply_nested_trace_line_names_file_and_line(tmp_path):
    rows = [json.dumps(ROW), '{"x": ' + "[" * 100_000 + "]" * 100_000 + "}", json.dumps(ROW)]
    config, trace = _trace_config(tmp_path, rows)
    run = run_servesim(["predict", "-c", str(config), "--output-dir", str(tmp_path / "o")], timeout=30)
    run.assert_clean(1)
    assert f"{trace}:2:" in run.stderr


def test_trace_row_without_timestamp_under_trace_timestamps(tmp_path):
    """A session starting without a timestamp arrives at the trace's start, as in the reference
    (its documented behaviour) — but not silently: a warning names the file and line."""
    later = {k: v for k, v in ROW.items() if k != "timestamp"}
    config, trace = _trace_config(tmp_path, [json.dumps({**ROW, "timestamp": 500}), json.dumps(later)])
    run = run_servesim(["predict", "-c", str(config), "--output-dir", str(tmp_path / "o"), "--format", "json",
                        "--capture-per-request"])  # a subprocess: the warning goes through logging to stderr
    run.assert_clean(0)
    assert f"{trace}:2:" in run.stderr and "1 session(s) start without a timestamp" in run.message(tmp_path)
    arrivals = {r["session_id"]: r["arrival_time_ms"] for r in json.loads(
        (tmp_path / "o" / "prediction.json").read_text())["per_request"]}
    assert arrivals == {"request_1": 0.0, "request_2": 0.0}


def test_rows_without_timestamps_are_fine_under_concurrency(tmp_path):
    row = {k: v for k, v in ROW.items() if k != "timestamp"}
    config, _ = _trace_config(tmp_path, [json.dumps(row)] * 3, load={"type": "concurrency", "concurrency": 2})
    run_in_process(["predict", "-c", str(config), "--output-dir", str(tmp_path / "o")]).assert_clean(0)


def test_timestamps_beyond_millisecond_precision_are_refused(tmp_path):
    """1e17 ms after the first row, a float cannot tell a millisecond apart (TTFT would be 0)."""
    config, trace = _trace_config(tmp_path, [json.dumps(ROW), json.dumps({**ROW, "timestamp": 1e17})])
    run = run_in_process(["predict", "-c", str(config), "--output-dir", str(tmp_path / "o")])
    run.assert_clean(1)
    assert f"{trace}:2:" in run.stderr and "timestamp" in run.message(tmp_path)


def test_delays_beyond_millisecond_precision_are_refused(tmp_path):
    rows = [json.dumps({**ROW, "session_id": "s"}),
            json.dumps({**{k: v for k, v in ROW.items() if k != "timestamp"}, "session_id": "s", "delay": 1e17})]
    config, trace = _trace_config(tmp_path, rows, load={"type": "concurrency", "concurrency": 1})
    run = run_in_process(["predict", "-c", str(config), "--output-dir", str(tmp_path / "o")])
    run.assert_clean(1)
    assert f"{trace}:2:" in run.stderr and "delay" in run.message(tmp_path)


def test_allow_duplicate_keys_lets_the_last_value_win(tmp_path):
    """The reference's behaviour, on request."""
    config = tmp_path / "dup.yaml"
    text = yaml.safe_dump(config_with({"traffic.stop.requests": 2}), sort_keys=False)
    config.write_text(text + "evaluation: {}\nevaluation: {sla: {e2e_ms: 5}}\n")
    run = run_in_process(["predict", "-c", str(config), "--output-dir", str(tmp_path / "o"), "--format", "json",
                          "--allow-duplicate-keys"])
    run.assert_clean(0)
    assert "goodput_completed_requests" in json.loads(run.stdout)


def test_an_endless_config_file_is_refused(tmp_path):
    """`-c /dev/zero` (or any huge file) is refused after a bounded read."""
    if not Path("/dev/zero").exists():
        pytest.skip("no /dev/zero")
    run = run_servesim(["predict", "-c", "/dev/zero", "--output-dir", str(tmp_path / "o")], timeout=30, memory_mb=1024)
    run.assert_clean(2)
    assert "/dev/zero" in run.stderr and "MiB" in run.stderr


def test_an_endless_trace_line_names_the_file_and_line(tmp_path):
    """A trace that is `/dev/zero` (one endless line) is refused before it is read: a device is
    not a regular file (issue 35's second audit: a named pipe as a trace waited for ever)."""
    if not Path("/dev/zero").exists():
        pytest.skip("no /dev/zero")
    config = write_config(tmp_path, {"traffic": {"source": {"type": "trace", "paths": ["/dev/zero"]},
                                                 "load": {"type": "concurrency", "concurrency": 1}}})
    run = run_servesim(["predict", "-c", str(config), "--output-dir", str(tmp_path / "o")], timeout=30, memory_mb=1024)
    run.assert_clean(1)
    assert "/dev/zero: cannot read trace: not a regular file" in run.stderr
