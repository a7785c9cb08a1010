"""Per-request records as Parquet, pandas and polars: every record, every field."""

from __future__ import annotations

import json

import pytest

import servesim
from servesim.cli import main
from servesim.report.tables import read_parquet

def _config(trace) -> dict:
    """Two replicas with 10 KV blocks of 64 tokens: every fifth request would outgrow the pool
    (600 + 100 tokens) and is rejected with a reason, the others complete."""
    rows = [{"timestamp": 20 * i, "input_length": 600 if i % 5 == 0 else 128, "output_length": 100 if i % 5 == 0 else 16,
             "hash_ids": list(range(100 * i, 100 * i + (10 if i % 5 == 0 else 2)))} for i in range(60)]
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return {
        "engine": {"model": "Qwen/Qwen3-8B", "hardware": "h200_sxm", "backend": "vllm", "context_length": 8192,
                   "workers": {"aggregated": {
                       "parallelism": {"replicas": 2, "tensor": 1},
                       "kv_cache": {"block_size": 64, "capacity": {"type": "fixed", "blocks": 10}},
                       "timing": {"type": "fixed", "prefill_ms": 20, "decode_ms": 7}}}},
        "traffic": {"source": {"type": "trace", "format": "mooncake", "paths": [str(trace)], "block_size": 64},
                    "load": {"type": "trace_timestamps"}},
    }


@pytest.fixture(scope="module")
def config(tmp_path_factory) -> dict:
    return _config(tmp_path_factory.mktemp("trace") / "trace.jsonl")


@pytest.fixture(scope="module")
def report(config):
    return servesim.simulate(config, capture_per_request=True)


def test_parquet_round_trip_keeps_every_field(report, tmp_path):
    pytest.importorskip("pyarrow")
    from servesim.report.tables import write_parquet

    rows = report.per_request
    assert any("rejection_reason" in r for r in rows) and not all("rejection_reason" in r for r in rows)
    write_parquet(rows, tmp_path / "requests.parquet")
    back = read_parquet(tmp_path / "requests.parquet")
    assert len(back) == len(rows)
    for original, read in zip(rows, back, strict=True):
        assert {k: v for k, v in read.items() if not (v is None and k not in original)} == original


def test_data_frames(report):
    pd = pytest.importorskip("pandas")
    frame = report.to_pandas()
    assert isinstance(frame, pd.DataFrame) and len(frame) == len(report.per_request)
    completed = frame[frame["terminal_status"] == "completed"]
    assert completed["ttft_ms"].mean() == pytest.approx(report["mean_ttft_ms"])
    assert frame["rejection_reason"].notna().sum() == sum("rejection_reason" in r for r in report.per_request)


def test_polars_frame(report):
    """Runs where the `polars` extra is installed (the `test` extra leaves polars out: 180 MB for
    a hand-over of the pyarrow Table, whose types the Parquet test proves)."""
    pl = pytest.importorskip("polars")
    frame = report.to_polars()
    assert isinstance(frame, pl.DataFrame) and frame.height == len(report.per_request)
    assert frame["admission_history"].dtype == pl.List
    for original, read in zip(report.per_request, frame.to_dicts(), strict=True):
        assert {k: v for k, v in read.items() if not (v is None and k not in original)} == original
    completed = frame.filter(pl.col("terminal_status") == "completed")
    assert completed["ttft_ms"].mean() == pytest.approx(report["mean_ttft_ms"])
    assert frame["rejection_reason"].is_not_null().sum() == sum("rejection_reason" in r for r in report.per_request)


def test_frames_need_captured_records(config):
    plain = servesim.simulate(config)
    with pytest.raises(ValueError, match="capture_per_request=True"):
        plain.to_pandas()


def test_cli_writes_parquet_instead_of_jsonl(config, tmp_path, capsys):
    pytest.importorskip("pyarrow")
    path = tmp_path / "c.json"  # JSON is YAML
    path.write_text(json.dumps(config))
    out = tmp_path / "out"
    assert main(["predict", "-c", str(path), "--output-dir", str(out), "--capture-per-request",
                 "--per-request-format", "parquet", "--format", "json"]) == 0
    assert (out / "requests.parquet").is_file() and not (out / "requests.jsonl").exists()
    rows = read_parquet(out / "requests.parquet")
    summary = json.loads(capsys.readouterr().out)
    assert len(rows) == summary["num_requests"]
    # `servesim compare` reads the Parquet records of an output directory.
    from servesim.report.html.compare import load_run

    run = load_run(out)
    assert run.latency is not None and len(run.latency.ttft_ms) == summary["completed_requests"]
    assert run.stats["ttft_ms"]["mean"] == summary["mean_ttft_ms"]
