"""Readers of measured runs: per-request JSONL, AIPerf exports, vLLM benchmark JSON."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from servesim.errors import ConfigError
from servesim.measured import read_measured

VALIDATION = Path(__file__).resolve().parents[3] / "shared" / "data" / "llmservingsim-vllm-validation"


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_per_request_jsonl_in_any_unit(tmp_path):
    seconds = _jsonl(tmp_path / "s.jsonl", [
        {"send_ts": 10.0, "first_token_ts": 10.25, "end_ts": 11.25, "output_tokens": 11},
        {"send_ts": 10.5, "first_token_ts": 10.6, "end_ts": 10.6, "output_tokens": 1},
        {"send_ts": 11.0, "error": "timeout", "end_ts": 12.0},
    ])
    run = read_measured(seconds)
    assert run.source == "jsonl" and run.num_requests == 3
    assert run.completed.tolist() == [True, True, False]
    lat = run.latency()
    np.testing.assert_allclose(lat.ttft_ms, [250.0, 100.0])
    np.testing.assert_allclose(lat.e2e_ms, [1250.0, 100.0])
    np.testing.assert_allclose(lat.tpot_ms, [100.0])  # (1250 - 250) / (11 - 1); one token has no TPOT
    assert lat.itl_per_request
    np.testing.assert_allclose(lat.arrival_ms, [0.0, 500.0, 1000.0])
    nanos = _jsonl(tmp_path / "ns.jsonl", [{"send_ns": 10_000_000_000, "first_token_ms": 10_250.0,
                                            "end_time_ms": 11_250.0, "output_len": 11}])
    np.testing.assert_allclose(read_measured(nanos).latency().ttft_ms, [250.0])


def test_bad_lines_name_the_file_and_line(tmp_path):
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"send_ts": 1, "first_token_ts": 2, "end_ts": 3}\n{not json\n')
    with pytest.raises(ConfigError, match=r"broken.jsonl:2: not valid JSON"):
        read_measured(broken)
    missing = _jsonl(tmp_path / "missing.jsonl", [{"send_ts": 1, "first_token_ts": 2, "end_ts": 3},
                                                  {"first_token_ts": 2, "end_ts": 3}])
    with pytest.raises(ConfigError, match=r"missing.jsonl:2: no send time"):
        read_measured(missing)
    text = _jsonl(tmp_path / "text.jsonl", [{"send_ts": "soon", "first_token_ts": 2, "end_ts": 3}])
    with pytest.raises(ConfigError, match=r"text.jsonl:1: send_ts must be a number"):
        read_measured(text)
    with pytest.raises(ConfigError, match="no such file"):
        read_measured(tmp_path / "absent.jsonl")


def _aiperf_record(start_ns: int, ttft: float, latency: float, gaps: list[float] | None, error=None) -> dict:
    metrics = None if error else {
        "input_sequence_length": {"value": 550, "unit": "tokens"},
        "time_to_first_token": {"value": ttft, "unit": "ms"},
        "request_latency": {"value": latency, "unit": "ms"},
        "output_sequence_length": {"value": len(gaps or []) + 1, "unit": "tokens"},
    }
    if gaps is not None and metrics:
        metrics["inter_chunk_latency"] = {"value": gaps, "unit": "ms"}
    return {"metadata": {"session_num": 0, "request_start_ns": start_ns, "request_end_ns": start_ns + int(latency * 1e6),
                         "benchmark_phase": "profiling", "was_cancelled": bool(error)},
            "metrics": metrics or {"error_isl": {"value": 550, "unit": "tokens"}},
            "error": {"code": 499, "type": "RequestCancellationError", "message": "cancelled"} if error else None}


def test_aiperf_profile_export(tmp_path):
    export = tmp_path / "run1"
    export.mkdir()
    _jsonl(export / "profile_export.jsonl", [
        _aiperf_record(1_000_000_000, 50.0, 80.0, [10.0, 10.0, 10.0]),
        _aiperf_record(1_100_000_000, 70.0, 90.0, [5.0, 15.0]),
        _aiperf_record(1_200_000_000, 0.0, 1.0, None, error=True),
    ])
    run = read_measured(export)  # a directory with the export in it
    assert run.source == "aiperf" and run.completed.tolist() == [True, True, False]
    lat = run.latency()
    np.testing.assert_allclose(lat.ttft_ms, [50.0, 70.0])
    np.testing.assert_allclose(lat.e2e_ms, [80.0, 90.0])
    np.testing.assert_allclose(lat.tpot_ms, [10.0, 10.0])
    np.testing.assert_allclose(np.sort(lat.itl_ms), [5.0, 10.0, 10.0, 10.0, 15.0])
    assert not lat.itl_per_request
    assert run.throughput()["request_throughput_rps"] == pytest.approx(2 / 0.19)


def test_vllm_bench_result(tmp_path):
    result = tmp_path / "bench.json"
    result.write_text(json.dumps({
        "request_throughput": 3.5, "output_throughput": 99.0,
        "ttfts": [0.1, 0.2, 0.0], "itls": [[0.01, 0.03], [0.02], []], "output_lens": [3, 2, 0],
        "input_lens": [100, 200, 300], "errors": ["", "", "connection reset"]}))
    run = read_measured(result)
    assert run.source == "vllm-bench" and run.completed.tolist() == [True, True, False]
    lat = run.latency()
    np.testing.assert_allclose(lat.ttft_ms, [100.0, 200.0])
    np.testing.assert_allclose(lat.e2e_ms, [140.0, 220.0])
    np.testing.assert_allclose(lat.tpot_ms, [20.0, 20.0])
    np.testing.assert_allclose(np.sort(lat.itl_ms), [10.0, 20.0, 30.0])
    assert run.throughput() == {"request_throughput_rps": 3.5, "output_throughput_tok_s": 99.0}
    bare = tmp_path / "summary.json"
    bare.write_text(json.dumps({"mean_ttft_ms": 3.0}))
    with pytest.raises(ConfigError, match="--save-detailed"):
        read_measured(bare)


@pytest.mark.skipif(not VALIDATION.is_dir(), reason="../shared/data is not present")
def test_a_real_vllm_run_reads_to_its_published_figures():
    """LLMServingSim's RTX PRO 6000 Llama-3.1-8B run: mean TTFT 7,097 ms, TPOT 32.46 ms,
    E2E 28,201 ms over 300 requests (SOURCE.md, anchored at queued_ts)."""
    run = read_measured(VALIDATION / "examples" / "RTXPRO6000" / "Llama-3.1-8B" / "vllm" / "requests.jsonl")
    lat = run.latency()
    assert run.num_requests == 300 and run.completed.all()
    assert np.mean(lat.ttft_ms) == pytest.approx(7097, abs=1)
    assert np.mean(lat.tpot_ms) == pytest.approx(32.46, abs=0.01)
    assert np.mean(lat.e2e_ms) == pytest.approx(28201, abs=1)
