"""Measurement files: the three formats, auto-detection, and bad files (errors name file and line)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from servesim.errors import TraceError
from servesim.fidelity.measured import load_measured

DATA = Path(__file__).resolve().parents[3] / "shared" / "data" / "llmservingsim-vllm-validation"


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
