"""`servesim.measured`, the one reader of measured runs (`compare` and `calibrate`): the three
formats, auto-detection, latency samples, and bad files (errors name file and line)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from servesim.errors import TraceError
from servesim.measured import load_measured

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "llmservingsim-vllm-validation"


def _lines(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def llmservingsim_row(queued: float, first: float, last: float, isl: int = 100, osl: int = 11) -> dict:
    return {"request_id": "bench-0", "input_toks": isl, "output_toks": osl, "arrival_time": 1.7e9 + queued,
            "queued_ts": queued, "scheduled_ts": queued, "first_token_ts": first, "last_token_ts": last}


def aiperf_row(start_ns: int, ttft_ms: float, latency_ms: float, isl: int = 50, osl: int = 5, error=None) -> dict:
    metrics = {} if error else {
        "input_sequence_length": {"value": isl, "unit": "tokens"},
        "time_to_first_token": {"value": ttft_ms, "unit": "ms"},
        "request_latency": {"value": latency_ms, "unit": "ms"},
        "output_sequence_length": {"value": osl, "unit": "tokens"},
    }
    return {"metadata": {"session_num": 0, "request_start_ns": start_ns, "request_end_ns": start_ns,
                         "was_cancelled": False}, "metrics": metrics, "error": error}


def test_llmservingsim_lines(tmp_path):
    path = _lines(tmp_path / "requests.jsonl", [llmservingsim_row(10.5, 10.6, 11.6),
                                                 llmservingsim_row(10.0, 10.2, 10.4, osl=1)])
    m = load_measured(path)
    assert m.format == "llmservingsim" and len(m) == 2 and m.failed == 0
    lat = m.latencies()
    assert lat["ttft"] == pytest.approx([200.0, 100.0])  # sorted by send time
    assert lat["e2e"] == pytest.approx([400.0, 1100.0])
    assert np.isnan(lat["tpot"][0]) and lat["tpot"][1] == pytest.approx(100.0)


def test_send_ts_overrides_queued_ts(tmp_path):
    row = {**llmservingsim_row(10.5, 10.6, 11.6), "send_ts": 10.4}
    m = load_measured(_lines(tmp_path / "r.jsonl", [row]))
    assert m.latencies()["ttft"] == pytest.approx([200.0])


def test_aiperf_export_with_a_failed_request(tmp_path):
    rows = [aiperf_row(2_000_000_000, 50.0, 90.0), aiperf_row(1_000_000_000, 20.0, 60.0),
            aiperf_row(1_500_000_000, 0, 0, error={"code": 499, "type": "RequestCancellationError", "message": "x"})]
    m = load_measured(_lines(tmp_path / "profile_export.jsonl", rows))
    assert m.format == "aiperf" and len(m) == 2 and m.failed == 1
    assert m.latencies()["ttft"] == pytest.approx([20.0, 50.0])
    assert m.latencies()["tpot"] == pytest.approx([10.0, 10.0])
    assert list(m.input_tokens) == [50, 50]


def test_vllm_bench_detailed_json(tmp_path):
    doc = {"completed": 2, "input_lens": [10, 20, 30], "output_lens": [3, 2, 0], "start_times": [5.0, 4.0, 4.5],
           "ttfts": [0.1, 0.2, 0.0], "itls": [[0.02, 0.04], [0.05], []], "errors": ["", "", "timeout"]}
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(doc, indent=2))
    m = load_measured(path)
    assert m.format == "vllm" and len(m) == 2 and m.failed == 1
    lat = m.latencies()
    assert lat["ttft"] == pytest.approx([200.0, 100.0])
    assert lat["e2e"] == pytest.approx([250.0, 160.0])
    assert lat["tpot"] == pytest.approx([50.0, 30.0])


@pytest.mark.parametrize("rows, where, message", [
    (["{not json"], ":1:", "invalid JSON"),
    ([llmservingsim_row(1, 2, 3), "[1, 2]"], ":2:", "must be a JSON object"),
    ([llmservingsim_row(1, 2, 3), {**llmservingsim_row(1, 2, 3), "first_token_ts": "soon"}], ":2:", "first_token_ts"),
    ([{**llmservingsim_row(1, 2, 3), "output_toks": -4}], ":1:", "output_toks"),
    ([llmservingsim_row(1, 2, 3), "", llmservingsim_row(5, 4, 6)], ":3:", "out of order"),
    ([{"first_token_ts": 1.0}], ":1:", "queued_ts"),
    ([{"hello": 1}], ":1:", "unrecognised record"),
    ([aiperf_row(1, 2.0, 3.0), {**aiperf_row(1, 2.0, 3.0), "metrics": {"time_to_first_token": {"value": 1}}}],
     ":2:", "request_latency"),
])
def test_bad_lines_name_file_and_line(tmp_path, rows, where, message):
    path = _lines(tmp_path / "bad.jsonl", rows)
    with pytest.raises(TraceError) as exc:
        load_measured(path)
    assert str(exc.value).startswith(f"{path}{where}") and message in str(exc.value)


@pytest.mark.parametrize("doc, message", [
    ({"ttfts": [0.1], "itls": [[]], "input_lens": [1], "output_lens": [1]}, "start_times: missing"),
    ({"ttfts": [0.1, 0.2], "itls": [[], []], "input_lens": [1], "output_lens": [1, 1], "start_times": [0, 1]},
     "input_lens: has 1 entries"),
    ({"ttfts": [0.1], "itls": [["a"]], "input_lens": [1], "output_lens": [2], "start_times": [0]}, "itls[0]"),
    ({"ttfts": [0.0], "itls": [[]], "input_lens": [1], "output_lens": [0], "start_times": [0]}, "no successful request"),
])
def test_bad_vllm_json_names_the_list(tmp_path, doc, message):
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(TraceError) as exc:
        load_measured(path, "vllm")
    assert str(exc.value).startswith(str(path)) and message in str(exc.value)


def test_unreadable_and_empty_files(tmp_path):
    with pytest.raises(TraceError, match="cannot read measurements"):
        load_measured(tmp_path / "missing.jsonl")
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(TraceError, match="empty measurement file"):
        load_measured(tmp_path / "empty.jsonl")


@pytest.mark.skipif(not DATA.is_dir(), reason="../shared/data is not present")
def test_open_runs_match_their_published_means():
    # SOURCE.md: TTFT / TPOT / E2E means of the four runs (queued_ts anchor)
    published = {"RTX4090/Llama-3.1-8B": (65457, 32.45, 86578), "RTXPRO6000/Llama-3.1-8B": (7097, 32.46, 28201),
                 "RTXPRO6000/Qwen3-32B": (36905, 80.31, 90408),
                 "RTXPRO6000/Qwen3-30B-A3B-Instruct-2507": (1086, 47.29, 32345)}
    for folder, means in published.items():
        m = load_measured(DATA / "examples" / folder / "vllm" / "requests.jsonl")
        lat = m.latencies()
        got = (np.mean(lat["ttft"]), np.nanmean(lat["tpot"]), np.mean(lat["e2e"]))
        assert len(m) == 300
        assert got == pytest.approx(means, rel=2e-4), folder


# --- generic per-request JSON lines, AIPerf gaps and vLLM results without send times (as `compare` reads them)


def test_per_request_lines_in_any_unit(tmp_path):
    seconds = _lines(tmp_path / "s.jsonl", [
        {"send_ts": 10.0, "first_token_ts": 10.25, "end_ts": 11.25, "output_tokens": 11},
        {"send_ts": 10.5, "first_token_ts": 10.6, "end_ts": 10.6, "output_tokens": 1},
        {"send_ts": 11.0, "error": "timeout", "end_ts": 12.0},
    ])
    run = load_measured(seconds, replayable=False)
    assert run.format == "llmservingsim" and run.num_requests == 3 and len(run) == 2 and run.failed == 1
    assert list(run.input_tokens) == [-1, -1]  # not recorded
    lat = run.latency()
    np.testing.assert_allclose(lat.ttft_ms, [250.0, 100.0])
    np.testing.assert_allclose(lat.e2e_ms, [1250.0, 100.0])
    np.testing.assert_allclose(lat.tpot_ms, [100.0])  # (1250 - 250) / (11 - 1); one token has no TPOT
    assert lat.itl_per_request
    np.testing.assert_allclose(lat.arrival_ms, [0.0, 500.0, 1000.0])  # the failed request arrived too
    nanos = _lines(tmp_path / "ns.jsonl", [{"send_ns": 10_000_000_000, "first_token_ms": 10_250.0,
                                            "end_time_ms": 11_250.0, "output_len": 11}])
    np.testing.assert_allclose(load_measured(nanos, replayable=False).latency().ttft_ms, [250.0])
    with pytest.raises(TraceError, match=r"s.jsonl:1: no input tokens count \(one of input_toks"):
        load_measured(seconds)  # a replay needs the prompt lengths


@pytest.mark.parametrize("row, message", [
    ({"first_token_ts": 2, "end_ts": 3}, ":2: no send time (one of send_ts, queued_ts"),
    ({"send_ts": "soon", "first_token_ts": 2, "end_ts": 3}, ":2: send_ts: must be a finite number (got 'soon')"),
    ({"send_ts": 1, "first_token_ts": float("inf"), "end_ts": 3}, ":2: Infinity is not a JSON number"),
    ({"send_ts": 1, "first_token_ts": True, "end_ts": 3}, ":2: first_token_ts: must be a finite number"),
    ({"send_ts": 1, "first_token_ts": 2}, ":2: no end time"),
    ({"send_ms": 1, "first_token_ms": 2, "end_ms": 1.5}, ":2: times out of order"),
])
def test_bad_generic_lines_name_the_file_and_line(tmp_path, row, message):
    path = _lines(tmp_path / "bad.jsonl", [{"send_ts": 1, "first_token_ts": 2, "end_ts": 3}, row])
    with pytest.raises(TraceError) as exc:
        load_measured(path, replayable=False)
    assert str(exc.value).startswith(f"{path}{message}")


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


def test_aiperf_export_folder_with_token_gaps(tmp_path):
    export = tmp_path / "run1"
    export.mkdir()
    _lines(export / "profile_export.jsonl", [
        _aiperf_record(1_000_000_000, 50.0, 80.0, [10.0, 10.0, 10.0]),
        _aiperf_record(1_100_000_000, 70.0, 90.0, [5.0, 15.0]),
        _aiperf_record(1_200_000_000, 0.0, 1.0, None, error=True),
    ])
    run = load_measured(export)  # a folder with the export in it
    assert run.format == "aiperf" and len(run) == 2 and run.failed == 1
    lat = run.latency()
    np.testing.assert_allclose(lat.ttft_ms, [50.0, 70.0])
    np.testing.assert_allclose(lat.e2e_ms, [80.0, 90.0])
    np.testing.assert_allclose(lat.tpot_ms, [10.0, 10.0])
    np.testing.assert_allclose(np.sort(lat.itl_ms), [5.0, 10.0, 10.0, 10.0, 15.0])
    assert not lat.itl_per_request
    assert run.throughput()["request_throughput_rps"] == pytest.approx(2 / 0.19)
    with pytest.raises(TraceError, match="no measurements in this folder"):
        load_measured(tmp_path)


def test_vllm_result_without_send_times_compares_but_does_not_replay(tmp_path):
    result = tmp_path / "bench.json"
    result.write_text(json.dumps({
        "request_throughput": 3.5, "output_throughput": 99.0,
        "ttfts": [0.1, 0.2, 0.0], "itls": [[0.01, 0.03], [0.02], []], "output_lens": [3, 2, 0],
        "input_lens": [100, 200, 300], "errors": ["", "", "connection reset"]}))
    run = load_measured(result, replayable=False)
    assert run.format == "vllm" and len(run) == 2 and run.failed == 1
    lat = run.latency()
    np.testing.assert_allclose(lat.ttft_ms, [100.0, 200.0])
    np.testing.assert_allclose(lat.e2e_ms, [140.0, 220.0])
    np.testing.assert_allclose(lat.tpot_ms, [20.0, 20.0])
    np.testing.assert_allclose(np.sort(lat.itl_ms), [10.0, 20.0, 30.0])
    assert run.throughput() == {"request_throughput_rps": 3.5, "output_throughput_tok_s": 99.0}
    with pytest.raises(TraceError, match="start_times: missing"):
        load_measured(result)
    bare = tmp_path / "summary.json"
    bare.write_text(json.dumps({"mean_ttft_ms": 3.0}))
    with pytest.raises(TraceError, match="--save-detailed"):
        load_measured(bare, replayable=False)
