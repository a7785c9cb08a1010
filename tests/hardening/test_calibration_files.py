"""Hostile calibration files (`timing.calibration`): read strictly, every number checked; a bad
file named by a config is a configuration error (exit 2) naming the key that names it."""

from __future__ import annotations

import pytest

from servesim.errors import ConfigError, TraceError
from servesim.perf.calibration import load_calibration

from hostile import run_in_process, run_servesim, write_config

HEAD = "servesim_calibration: 1\n"


@pytest.mark.parametrize(("body", "line", "words"), [
    ("prefill_scale: .inf\n", None, "prefill_scale: must be a finite number"),
    ("decode_scale: .nan\n", None, "decode_scale: must be a finite number"),
    ("decode_scale: null\n", None, "decode_scale: must be a finite number"),  # fuzzer, seed 21 case 398
    ("prefill_scale: null\n", None, "prefill_scale: must be a finite number"),
    ("frontend_ms: 1e400\n", None, "frontend_ms: must be a finite number"),
    ("frontend_ms: 2000000000000\n", None, "frontend_ms: must be a finite number in [0, 1e+12]"),
    ("prefill_scale: 1e300\n", None, "prefill_scale: must be a finite number in"),
    ("kv_tokens: 0\n", None, "kv_tokens: must be an integer in [1, 1000000000]"),
    ("kv_tokens: 10000000000000000000000\n", None, "kv_tokens: must be an integer in [1, 1000000000]"),
    ("kv_tokens: true\n", None, "kv_tokens: must be an integer"),
    ("mixed_pass: [fused]\n", None, "mixed_pass: must be 'sum' or 'fused'"),
    ("decode_scale: 1\ndecode_scale: 2\n", 3, "duplicate key 'decode_scale'"),
    ("fitted_on: " + "[" * 200 + "]" * 200 + "\n", 2, "nested deeper than"),
    ("fitted_on: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"b{i}: &b{i} [" + ", ".join([f"*{'a' if i == 0 else f'b{i - 1}'}"] * 10) + "]\n" for i in range(6)),
     None, "aliases expand"),
    ("fitted_with: {timing: {dp_sync_ms: .inf}}\n", None, "fitted_with.timing.dp_sync_ms"),
    ("fitted_with: {timing: {type: [1]}}\n", None, "fitted_with.timing.type"),
    ("fitted_with: {engine: {model: {a: 1}}}\n", None, "fitted_with.engine.model"),
    ("fitted_with: {[1]: 2}\n", None, "fitted_with"),
    ("{[1]: 2}\n", None, ""),
])
def test_bad_calibration_files(tmp_path, body, line, words):
    path = tmp_path / "cal.yaml"
    path.write_text(HEAD + body)
    with pytest.raises(TraceError) as caught:
        load_calibration(str(path))
    where = f"{path}:{line}: " if line is not None else f"{path}"
    assert str(caught.value).startswith(where) and words in str(caught.value), str(caught.value)


def test_non_utf8_calibration_file(tmp_path):
    path = tmp_path / "cal.yaml"
    path.write_bytes(HEAD.encode() + b"frontend_ms: \xff\n")
    with pytest.raises(TraceError) as caught:
        load_calibration(str(path))
    assert str(path) in str(caught.value) and "UTF-8" in str(caught.value)


def test_a_good_calibration_file_still_reads(tmp_path):
    path = tmp_path / "cal.yaml"
    path.write_text(HEAD + "prefill_scale: 1.1\ndecode_scale: 0.9\nfrontend_ms: 12.5\nkv_tokens: 41408\n"
                    "fitted_with: {timing: {type: default, dp_sync_ms: 0.0}, scheduler: {async_scheduling: true}}\n")
    cal = load_calibration(str(path))
    assert (cal.prefill_scale, cal.decode_scale, cal.frontend_ms, cal.kv_tokens) == (1.1, 0.9, 12.5, 41408)


@pytest.mark.parametrize("body", ["kv_tokens: 0\n", "prefill_scale: .inf\n", "decode_scale: 1\ndecode_scale: 2\n",
                                  "x: " + "[" * 300 + "]" * 300 + "\n"])
def test_a_config_naming_a_bad_calibration_file_is_a_config_error(tmp_path, body):
    cal = tmp_path / "cal.yaml"
    cal.write_text(HEAD + body)
    timing = {"type": "roofline", "calibration": str(cal)}
    config = write_config(tmp_path, {"engine.workers.aggregated.timing": timing})
    with pytest.raises(ConfigError) as caught:
        from servesim.config import load_config

        load_config(str(config))
    assert "engine.workers.aggregated.timing.calibration" in str(caught.value) and str(cal) in str(caught.value)
    run = run_in_process(["predict", "-c", str(config), "--output-dir", str(tmp_path / "out")])
    run.assert_clean(2)
    assert "engine.workers.aggregated.timing.calibration" in run.stderr


def test_a_missing_calibration_file_is_a_config_error(tmp_path):
    timing = {"type": "roofline", "calibration": str(tmp_path / "nowhere.yaml")}
    config = write_config(tmp_path, {"engine.workers.aggregated.timing": timing})
    run = run_servesim(["predict", "-c", str(config), "--output-dir", str(tmp_path / "out")], timeout=60)
    run.assert_clean(2)
    assert "engine.workers.aggregated.timing.calibration" in run.stderr and "nowhere.yaml" in run.stderr
