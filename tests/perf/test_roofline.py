"""`timing.type: roofline`: analytic pass times, their shape, and their accuracy against AIC."""

from __future__ import annotations

import statistics
from dataclasses import replace

import pytest

from servesim.config import parse_config

from servesim.perf import aic
from servesim.perf.hardware import package_systems_dir, resolve_gpu
from servesim.perf.models import resolve_model
from servesim.perf.roofline import RooflineParams, RooflineTiming, expected_distinct_experts
from servesim.perf.timing import quantize_ms
from servesim.errors import ConfigError, RunError
from servesim.build.perf import timing_model
from servesim import simulate

SYSTEMS = package_systems_dir()  # vLLM 0.24.0 data: the package has it too


def roofline(model: str = "meta-llama/Meta-Llama-3.1-8B", gpu: str = "h200_sxm", **kw) -> RooflineTiming:
    return RooflineTiming(resolve_model(model), resolve_gpu(gpu, SYSTEMS), **kw)


def test_shape() -> None:
    r = roofline()
    # more work costs more time; cached prefix saves time; decode grows with the KV read
    assert r.prefill(1, 2048, 0) > r.prefill(1, 1024, 0) > r.prefill(1, 128, 0) > 0
    assert r.prefill(1, 2048, 1024) < r.prefill(1, 2048, 0)
    assert r.prefill(4, 2048, 0) > r.prefill(1, 2048, 0)
    assert r.decode(64, 64 * 4096, 4096, 0) > r.decode(64, 64 * 512, 512, 0) > r.decode(1, 512, 512, 0)
    # decode is memory bound: 1 -> 8 requests at short context costs far less than 8x
    assert r.decode(8, 8 * 128, 128, 0) < 1.5 * r.decode(1, 128, 128, 0)
    # tensor parallelism splits the work
    assert roofline(tp=2).decode(32, 32 * 2048, 2048, 0) < r.decode(32, 32 * 2048, 2048, 0)
    # values are quantised like every phase, and memoised
    assert r.prefill(1, 2048, 0) == quantize_ms(1000 * r.prefill_seconds(1, 2048, 0))
    assert r.decode(3, 999, 333, 0) is r.decode(3, 999, 333, 0)


def test_knobs_and_quantised_models() -> None:
    base = roofline("Qwen/Qwen3-32B-FP8")
    floored = roofline("Qwen/Qwen3-32B-FP8", params=RooflineParams(gemm_floor_us=60.0))
    assert floored.decode(1, 2048, 2048, 0) > 1.5 * base.decode(1, 2048, 2048, 0)
    overhead = roofline(params=RooflineParams(pass_overhead_ms=5.0))
    assert overhead.decode(1, 100, 100, 0) == pytest.approx(roofline().decode(1, 100, 100, 0) + 5.0, abs=1e-6)
    # FP8 weights halve the weight traffic of a memory-bound decode step
    assert base.decode(1, 128, 128, 0) < 0.7 * roofline("Qwen/Qwen3-32B").decode(1, 128, 128, 0)
    moe = roofline("Qwen/Qwen3-30B-A3B", tp=2, moe_tp=2)
    assert 0 < moe.decode(1, 128, 128, 0) < moe.decode(64, 64 * 128, 128, 0)
    assert expected_distinct_experts(128, 1) == pytest.approx(1.0)
    assert expected_distinct_experts(128, 10**6) == pytest.approx(128.0)


def ratios(model: str, system: str, tp: int = 1) -> list[float]:
    engine = aic.aic_engine(aic.AicKey(model=model, system=system, backend="vllm", version="0.24.0", tp=tp, pp=1,
                                       attention_dp=1, moe_tp=None, moe_ep=None, block_size=64,
                                       systems_path=str(SYSTEMS)))
    r = roofline(model, system, tp=tp)
    out = [r.prefill_seconds(bs, isl, p) * 1000 / engine.predict_prefill_latency(bs, isl, p)
           for bs, isl, p in [(1, 512, 0), (1, 2048, 0), (1, 8192, 0), (4, 2048, 0), (1, 4096, 2048)]]
    out += [r.decode_seconds(bs, bs * ctx) * 1000 / engine.predict_decode_latency(bs, ctx, 2)
            for bs, ctx in [(1, 2048), (8, 2048), (64, 2048), (256, 2048), (32, 8192)]]
    return out


@pytest.mark.parametrize("model, system, tp", [("meta-llama/Meta-Llama-3.1-8B", "h200_sxm", 1),
                                               ("Qwen/Qwen3-32B", "h200_sxm", 2)])
def test_bf16_dense_models_are_within_20_percent_of_aic(model: str, system: str, tp: int) -> None:
    found = ratios(model, system, tp)
    assert all(0.8 <= x <= 1.2 for x in found), found
    assert 0.9 <= statistics.median(found) <= 1.12


def config(timing: dict, hardware: str = "h200_sxm") -> dict:
    return {"engine": {"model": "Qwen/Qwen3-8B", "hardware": hardware, "context_length": 8192,
                       "workers": {"aggregated": {"timing": timing}}},
            "traffic": {"source": {"type": "synthetic", "input_tokens": 500, "output_tokens": 20},
                        "load": {"type": "concurrency", "concurrency": 4}, "stop": {"requests": 8}}}


def test_roofline_config_runs_end_to_end() -> None:
    report = simulate(config({"type": "roofline"}))
    assert report["completed_requests"] == 8 and report["mean_ttft_ms"] > 0
    # a GPU only servesim's table knows, and a user's inline GPU
    assert simulate(config({"type": "roofline"}, hardware="rtx_4090"))["completed_requests"] == 8
    custom = {"type": "roofline", "gpu_spec": {"memory_gib": 40, "memory_bandwidth_gb_s": 500, "bf16_tflops": 100}}
    slow = simulate(config(custom, hardware="my_gpu"))
    assert slow["mean_tpot_ms"] > report["mean_tpot_ms"]
    engine = parse_config(config({"type": "roofline", "gpu": "b200_sxm", "gemm_efficiency": 0.5})).engine
    timing = timing_model(engine, engine.workers.aggregated, "aggregated")
    assert isinstance(timing, RooflineTiming) and timing.gpu.name == "b200_sxm"
    assert timing.params.gemm_efficiency == 0.5


def test_roofline_config_rules() -> None:
    with pytest.raises(ConfigError, match="prefill_ms"):
        parse_config(config({"type": "roofline", "prefill_ms": 3}))
    with pytest.raises(ConfigError, match="gemm_efficiency"):
        parse_config(config({"type": "roofline", "gemm_efficiency": 1.5}))
    with pytest.raises(RunError, match="unknown GPU"):
        simulate(config({"type": "roofline"}, hardware="nope_gpu"))


def test_measured_gpu_efficiencies_replace_the_generic_ones(tmp_path, monkeypatch) -> None:
    gpu = resolve_gpu("rtx_4090", SYSTEMS)
    assert gpu.efficiency == {"gemm": 0.96, "attention": 0.67, "memory": 0.91}  # vLLM's own profiles
    assert resolve_gpu("rtx_pro_6000_server", SYSTEMS).efficiency["gemm"] == 0.79  # peaks from the system file
    assert resolve_gpu("h200_sxm", SYSTEMS).efficiency == {}
    r = roofline(gpu="rtx_4090")
    assert (r.params.gemm_efficiency, r.params.attention_efficiency, r.params.memory_efficiency) == (0.96, 0.67, 0.91)
    generic = roofline(gpu="rtx_4090", params=RooflineParams())
    assert r.decode(1, 512, 512, 0) < 0.92 * generic.decode(1, 512, 512, 0)  # 0.91 vs 0.8 of the bandwidth
    assert r.prefill(1, 2048, 0) < 0.8 * generic.prefill(1, 2048, 0)  # 0.96 vs 0.7 of the tensor peak
    # through a config: the GPU's values unless the timing section sets one
    engine = parse_config(config({"type": "roofline", "memory_efficiency": 0.5}, hardware="rtx_4090")).engine
    params = timing_model(engine, engine.workers.aggregated, "aggregated").params
    assert (params.gemm_efficiency, params.memory_efficiency) == (0.96, 0.5)
    # a user's GPU file may carry them too, and a bad entry is named
    specs = tmp_path / "gpus.yaml"
    specs.write_text("my_gpu: {memory_gib: 24, memory_bandwidth_gb_s: 900, bf16_tflops: 100, efficiency: {gemm: 0.9}}\n"
                     "bad_gpu: {memory_gib: 24, memory_bandwidth_gb_s: 900, bf16_tflops: 100, efficiency: {gemm: 1.2}}\n")
    monkeypatch.setenv("SERVESIM_GPU_SPECS", str(specs))
    with pytest.raises(RunError, match=r"gpus.yaml: GPU 'bad_gpu': efficiency must map gemm, attention, memory"):
        resolve_gpu("my_gpu", SYSTEMS)


def test_measured_decode_attention_is_a_separate_opt_in(tmp_path, monkeypatch) -> None:
    """The RTX 4090's measured vLLM decode attention (latency + KV reads) changes nothing until
    asked for (fused mode asks); then a call costs its latency once the layer's KV fills the L2,
    in proportion below."""
    gpu = resolve_gpu("rtx_4090", SYSTEMS)
    assert gpu.decode_attention == {"latency_us": 29, "efficiency": 0.93, "l2_mib": 72}
    assert resolve_gpu("rtx_pro_6000_server", SYSTEMS).decode_attention["l2_mib"] == 128  # peaks from the system file
    plain = roofline(gpu="rtx_4090")
    assert plain.params.decode_attention_latency_us == 0 and plain.params.decode_attention_efficiency is None
    measured = plain.with_measured_decode_attention()
    assert measured is plain.with_measured_decode_attention()  # built once
    assert roofline().with_measured_decode_attention().params == roofline().params  # no data: unchanged
    kv_bytes = 2 * 8 * 128 * 2  # Llama-3.1-8B, one layer
    for tokens in (512, 8_000, 40_000):
        assert measured.decode(32, tokens, tokens // 32, 0) > plain.decode(32, tokens, tokens // 32, 0)
    # the latency term alone: full from the L2 size up, in proportion below
    l2 = 72 * 2**20
    latency = roofline(gpu="rtx_4090", params=replace(plain.params, decode_attention_latency_us=30, l2_bytes=l2))
    for tokens, share in ((l2 // kv_bytes // 4, 0.25), (l2 // kv_bytes * 3, 1.0)):
        extra = latency._decode_attention(8, tokens) - plain._decode_attention(8, tokens)
        assert extra == pytest.approx(30e-6 * share, rel=0.01)  # (the query and output add a little traffic)
    # a user's GPU file may carry it; a bad entry is named
    specs = tmp_path / "gpus.yaml"
    specs.write_text("bad_gpu: {memory_gib: 24, memory_bandwidth_gb_s: 900, bf16_tflops: 100, "
                     "decode_attention: {latency_us: 20, efficiency: 1.3, l2_mib: 64}}\n")
    monkeypatch.setenv("SERVESIM_GPU_SPECS", str(specs))
    with pytest.raises(RunError, match=r"GPU 'bad_gpu': decode_attention must map each of latency_us, efficiency, l2_mib"):
        resolve_gpu("rtx_4090", SYSTEMS)
