"""Hostile measurement files (`servesim.measured`, read by compare and calibrate): a clear
`TraceError` naming FILE:LINE (or the list and index) and the rule, never a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servesim.errors import TraceError
from servesim.measured import load_measured

from hostile import run_in_process


def _row(send: float = 1.0, first: float = 1.1, last: float = 1.5, isl: object = 100, osl: object = 11) -> dict:
    return {"input_toks": isl, "output_toks": osl, "queued_ts": send, "first_token_ts": first, "last_token_ts": last}


def _aiperf(ttft: object = 20.0, unit: object = "ms", isl: object = 50, gaps: object = None) -> dict:
    metrics = {"input_sequence_length": {"value": isl, "unit": "tokens"},
               "time_to_first_token": {"value": ttft, "unit": unit},
               "request_latency": {"value": 60.0, "unit": "ms"},
               "output_sequence_length": {"value": 5, "unit": "tokens"}}
    if gaps is not None:
        metrics["inter_chunk_latency"] = gaps
    return {"metadata": {"request_start_ns": 1_000_000_000}, "metrics": metrics, "error": None}


def _vllm(**changes: object) -> dict:
    doc = {"input_lens": [10, 20], "output_lens": [3, 2], "start_times": [5.0, 4.0], "ttfts": [0.1, 0.2],
           "itls": [[0.02, 0.04], [0.05]], "errors": ["", ""]}
    doc.update(changes)
    return doc


def _refused(path: Path, fmt: str = "auto") -> str:
    with pytest.raises(TraceError) as caught:
        load_measured(path, fmt)
    return str(caught.value)


def _lines(path: Path, *lines: str) -> Path:
    path.write_text("".join(line + "\n" for line in lines))
    return path


@pytest.mark.parametrize(("second", "words"), [
    (json.dumps(_row()).replace("1.1", "NaN"), "NaN"),
    (json.dumps(_row()).replace("1.5", "Infinity"), "Infinity"),
    (json.dumps(_row(isl=10**30)), "at most ±9223372036854775807"),
    (json.dumps(_row(isl=2_000_000_000)), "1000000000"),
    (json.dumps(_row(osl=10**12)), "1000000000"),
    (json.dumps(_row(last=2.0)).replace("2.0", "1e999"), "largest float"),
    (json.dumps(_row(last=1e300)), "longer than 1e+12 ms"),
    ('{"queued_ts": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested deeper"),
    ('{"queued_ts": 1, "x": ' + "[" * 100 + "]" * 100 + "}", "nested deeper than 64"),
    ('{"queued_ts": 1, "input_toks": ' + "9" * 5000 + "}", "digits"),
])
def test_request_lines(tmp_path, second, words):
    path = _lines(tmp_path / "requests.jsonl", json.dumps(_row()), second)
    message = _refused(path)
    assert message.startswith(f"{path}:2: ") and words in message, message


@pytest.mark.parametrize(("record", "words"), [
    (_aiperf(unit=["ms"]), "metrics.time_to_first_token.unit"),
    (_aiperf(unit={"a": 1}), "metrics.time_to_first_token.unit"),
    (_aiperf(unit=7), "metrics.time_to_first_token.unit"),
    (_aiperf(isl=5e9), "metrics.input_sequence_length"),
    (_aiperf(ttft=1e308), "times out of order"),
    (_aiperf(gaps={"value": [1.0], "unit": ["ms"]}), "metrics.inter_chunk_latency"),
    (_aiperf(gaps={"value": [1.0, 1e308], "unit": "s"}), "metrics.inter_chunk_latency"),
])
def test_aiperf_lines(tmp_path, record, words):
    path = _lines(tmp_path / "profile_export.jsonl", json.dumps(_aiperf()), json.dumps(record))
    message = _refused(path)
    assert message.startswith(f"{path}:2: ") and words in message, message


@pytest.mark.parametrize(("text", "words"), [
    (json.dumps(_vllm()).replace("0.05", "Infinity"), "Infinity"),
    (json.dumps(_vllm(itls=[[0.02], [1e308, 1e308]])), "itls[1]: the gaps add up beyond"),
    (json.dumps(_vllm(itls=[[0.02, 1e308], [0.1]])), "request 0: request lasts"),
    (json.dumps(_vllm(ttfts=[0.1, [1]])), "ttfts[1]"),
    (json.dumps(_vllm(ttfts=[0.1, 1e308])), "request 1: request lasts"),
    (json.dumps(_vllm(input_lens=[10, 10**10])), "input_lens[1]"),
    (json.dumps(_vllm(input_lens=[10, 10**30])), "at most ±9223372036854775807"),
    (json.dumps(_vllm(start_times=[5.0, 1e300])), "the run spans"),
    (json.dumps(_vllm(start_times=[5.0, "1"])), "start_times[1]"),
])
def test_vllm_bench(tmp_path, text, words):
    path = tmp_path / "bench.json"
    path.write_text(text)
    message = _refused(path)
    assert message.startswith(f"{path}") and words in message, message


def test_non_utf8_measurements_name_the_line(tmp_path):
    path = tmp_path / "requests.jsonl"
    path.write_bytes(json.dumps(_row()).encode() + b'\n{"queued_ts": "\xff"}\n')
    message = _refused(path)
    assert message.startswith(f"{path}:2: ") and "UTF-8" in message


def test_deep_vllm_json_names_the_line(tmp_path):
    path = tmp_path / "bench.json"
    path.write_text('{"ttfts":\n' + "[" * 100_000 + "]" * 100_000 + "}")
    message = _refused(path)
    assert message.startswith(f"{path}:2: ") and "nested deeper" in message


def test_vllm_bench_with_infinity_is_refused_by_calibrate(tmp_path):
    config = Path(__file__).parent / "data" / "calibrate.yaml"
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps(_vllm(itls=[[0.02, 0.04], [0.05]])).replace("0.04", "Infinity"))
    run = run_in_process(["calibrate", "-c", str(config), "-m", str(bench), "-o", str(tmp_path / "c.yaml")])
    run.assert_clean(1)
    assert f"{bench}:1: Infinity" in run.stderr and not (tmp_path / "c.yaml").exists()
