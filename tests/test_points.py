"""Benchmark points (`servesim.measured.points`, `servesim.measured.benchmark`): the CSV reader and
its bad rows, the servesim config a point maps to, version choice, coverage of the InferenceX
development points, and `--compat reference` left as it was."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import numpy as np
import pytest

from servesim.config.load import parse_config
from servesim.errors import TraceError
from servesim.measured.benchmark import nearest_first
from servesim.measured.points import image_version, lengths, point_config, read_points, write_trace

DEV = Path(__file__).resolve().parents[2] / "shared" / "data" / "inferencex-dev" / "points.csv"

HEADER = ("row_id,model,gpu,engine,engine_image,tp,ep,dp_attention,num_gpus,isl,osl,range_ratio,conc,"
          "num_prompts,warmup_requests,max_num_seqs,max_num_tokens,chunked_prefill_size,max_prefill_tokens,"
          "kv_mem_fraction,kv_cache_dtype,prefix_caching,max_model_len,mean_ttft_ms,mean_tpot_ms,tput_per_gpu")
VLLM = ("p-vllm,openai/gpt-oss-120b,h200,vllm,vllm/vllm-openai:v0.13.0,2,1,false,2,1024,1024,0.8,4,40,0,4,"
        "8192,,,0.9,auto(bf16),false,2068,58.7,4.91,786.3")
SGLANG = ("p-sgl,deepseek-ai/DeepSeek-R1,b200,sglang,lmsysorg/sglang:v0.5.12-cu130,8,8,false,8,8192,1024,0.8,"
          "16,160,32,128,,32768,16384,0.82,fp8_e4m3,false,,1500,30,2000")
TRTLLM = ("p-trt,deepseek-ai/DeepSeek-R1,b200,trtllm,nvcr.io/nvidia/tensorrt-llm/release:1.1.0rc2.post2,8,8,"
          "true,8,1024,1024,0.8,64,640,0,2048,8192,,,0.8,fp8,false,8192,300,20,3000")


def _csv(tmp_path: Path, *rows: str, header: str = HEADER) -> Path:
    path = tmp_path / "points.csv"
    path.write_text("\n".join((header, *rows)) + "\n")
    return path


def _edit(row: str, column: str, value: str) -> str:
    names = HEADER.split(",")
    cells = next(csv.reader(io.StringIO(row)))
    cells[names.index(column)] = value
    return ",".join(cells)


def test_reader_reads_every_field(tmp_path):
    vllm, sgl, trt = read_points(_csv(tmp_path, VLLM, SGLANG, TRTLLM))
    assert (vllm.gpu, vllm.backend, vllm.version, vllm.tp, vllm.ep) == ("h200_sxm", "vllm", "0.13.0", 2, 1)
    assert (vllm.max_num_tokens, vllm.max_model_len, vllm.kv_mem_fraction) == (8192, 2068, 0.9)
    assert vllm.line == 2 and sgl.line == 3 and trt.line == 4
    assert (sgl.version, sgl.chunked_prefill_size, sgl.max_prefill_tokens, sgl.max_num_tokens) == ("0.5.12", 32768, 16384, None)
    assert trt.dp_attention and trt.version == "1.1.0rc2.post2"
    assert (trt.mean_ttft_ms, trt.mean_tpot_ms, trt.tput_per_gpu) == (300.0, 20.0, 3000.0)


@pytest.mark.parametrize(("column", "value", "message"), [
    ("gpu", "k80", "column 'gpu': unknown GPU 'k80'"),
    ("tp", "two", "column 'tp': expected an integer, got 'two'"),
    ("tp", "0", "column 'tp': must be >= 1"),
    ("ep", "3", "column 'ep': ep 3 does not divide tp 2"),
    ("engine", "tgi", "column 'engine': unknown engine 'tgi'"),
    ("engine_image", "vllm/vllm-openai:latest", "column 'engine_image': no version"),
    ("range_ratio", "1.5", "column 'range_ratio': must be in (0, 1]"),
    ("dp_attention", "yes", "column 'dp_attention': expected true or false"),
    ("mean_ttft_ms", "", "column 'mean_ttft_ms': required, empty"),
    ("kv_mem_fraction", "x", "column 'kv_mem_fraction': expected a number"),
])
def test_bad_rows_name_file_line_and_column(tmp_path, column, value, message):
    path = _csv(tmp_path, SGLANG, _edit(VLLM, column, value))
    with pytest.raises(TraceError) as info:
        read_points(path)
    assert str(info.value).startswith(f"{path}:3: {message}")


def test_bad_header_and_repeats(tmp_path):
    with pytest.raises(TraceError, match=r":1: header: missing column 'conc'"):
        read_points(_csv(tmp_path, header=HEADER.replace(",conc,", ",concurrency,")))
    with pytest.raises(TraceError, match=r":3: column 'row_id': 'p-vllm' repeats line 2"):
        read_points(_csv(tmp_path, VLLM, VLLM))
    with pytest.raises(TraceError, match="no benchmark points"):
        read_points(_csv(tmp_path))
    with pytest.raises(TraceError, match="cannot read"):
        read_points(tmp_path / "absent.csv")


def test_image_versions():
    assert image_version("vllm/vllm-openai:v0.13.0") == "0.13.0"
    assert image_version("lmsysorg/sglang:v0.5.6-cu129-amd64") == "0.5.6"
    assert image_version("nvcr.io/nvidia/tensorrt-llm/release:1.3.0rc14") == "1.3.0rc14"
    assert image_version("x/y:latest") is None


def test_lengths_uniform_in_range_and_seeded(tmp_path):
    point = read_points(_csv(tmp_path, SGLANG))[0]
    inputs, outputs = lengths(point)
    assert len(inputs) == len(outputs) == 160
    assert inputs.min() >= int(0.8 * 8192) and inputs.max() <= 8192
    assert outputs.min() >= int(0.8 * 1024) and outputs.max() <= 1024
    assert len(set(inputs.tolist())) > 100  # drawn, not constant
    again = lengths(point, 10)
    assert np.array_equal(again[0], inputs[:10]) and np.array_equal(again[1], outputs[:10])


def test_configs_as_a_user_writes_them(tmp_path):
    vllm, sgl, trt = read_points(_csv(tmp_path, VLLM, SGLANG, TRTLLM))
    trace = write_trace(vllm, tmp_path / "t.jsonl", 12)
    assert len(trace.read_text().splitlines()) == 12
    config = parse_config(point_config(vllm, trace))
    engine = config.engine
    worker = engine.workers.aggregated
    assert (engine.backend, engine.backend_version, engine.context_length) == ("vllm", "0.13.0", 2068)
    assert (worker.parallelism.tensor, worker.parallelism.moe_tensor, worker.parallelism.moe_expert) == (2, 2, 1)
    assert (worker.scheduler.max_batched_tokens, worker.scheduler.max_sequences) == (8192, 4)
    assert worker.kv_cache.prefix_caching is False and worker.kv_cache.capacity.memory_fraction == 0.9
    assert (config.traffic.load.type, config.traffic.load.concurrency) == ("concurrency", 4)
    s = parse_config(point_config(sgl, trace, version="0.5.10")).engine
    sw = s.workers.aggregated
    assert s.backend_version == "0.5.10" and s.context_length == "max"
    assert (sw.scheduler.sglang.chunked_prefill_size, sw.scheduler.sglang.max_prefill_tokens) == (32768, 16384)
    assert (sw.parallelism.tensor, sw.parallelism.moe_tensor, sw.parallelism.moe_expert) == (8, 1, 8)
    tw = parse_config(point_config(trt, trace)).engine.workers.aggregated
    assert (tw.parallelism.tensor, tw.parallelism.attention_data, tw.parallelism.moe_expert) == (1, 8, 8)


def test_nearest_version_first():
    assert nearest_first(["0.14.0", "0.18.0", "0.19.0", "0.22.0"], "0.13.0")[0] == "0.14.0"
    assert nearest_first(["1.2.0rc5", "1.3.0rc10", "1.3.0rc15"], "1.3.0rc14")[:2] == ["1.3.0rc15", "1.3.0rc10"]
    assert nearest_first(["0.5.9", "0.5.10", "0.5.12"], "0.5.11")[0] == "0.5.10"  # a tie: the older


needs_data = pytest.mark.skipif(not DEV.is_file(), reason="../shared/data/inferencex-dev is absent")


@needs_data
@pytest.mark.slow
@pytest.mark.timeout(1200)  # 45 deployments, each built once (~1-2 min alone, more on a busy machine)
def test_every_dev_point_is_predicted():
    """Every development point runs under servesim's defaults with requests completed."""
    from servesim.measured.benchmark import validate_points

    points = read_points(DEV)
    assert len(points) == 45
    results = validate_points(points, requests=4, modes=("default",))
    empty = [r.point.row_id for r in results if r.predicted["default"]["completed"] < 1]
    assert not empty
    assert all(r.predicted["default"]["ttft"] > 0 and r.predicted["default"]["tpot"] > 0 for r in results)


@needs_data
def test_compat_reference_unchanged():
    """Under --compat reference the SGLang pool keeps the database's sizing (the reference's: no
    room for DeepSeek-R1 at TP4 on B200), and the roofline stays the plain one."""
    from servesim.api import simulate
    from servesim.build.lower import lower
    from servesim.measured.benchmark import summarise
    from servesim.perf.roofline_kernels import KernelAwareRoofline

    point = next(p for p in read_points(DEV) if p.row_id == "dsr1-b200-sglang-tp4ep1-8k1k-c32")
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        trace = write_trace(point, Path(folder) / "t.jsonl", 4)
        config = point_config(point, trace, "0.5.12")
        served = summarise(simulate(config, capture_per_request=True).per_request, 4)
        reference = simulate({**config, "compat": "reference"}, capture_per_request=True, unservable="reject")
        refused = summarise(reference.per_request, 4)
        default_timing = lower(parse_config(config)).pools[0].timing
        compat_timing = lower(parse_config({**config, "compat": "reference"}), unservable="reject").pools[0].timing
    assert served["completed"] == 4 and refused["completed"] == 0
    assert isinstance(getattr(default_timing, "_timing", None), KernelAwareRoofline)
    assert not any(isinstance(t, KernelAwareRoofline) for t in (compat_timing, getattr(compat_timing, "_timing", None)))


def test_validate_points_cli_errors(tmp_path, capsys):
    from servesim.cli import main

    bad = _csv(tmp_path, _edit(VLLM, "gpu", "k80"))
    assert main(["validate", "--points", str(bad)]) == 1
    assert f"{bad}:2: column 'gpu': unknown GPU 'k80'" in capsys.readouterr().err
    assert main(["validate", "--points", str(bad), "--max-requests", "0"]) == 2
    assert "--max-requests 0: must be >= 1" in capsys.readouterr().err
