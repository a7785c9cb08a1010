"""`timing.mixed_pass: fused`, async scheduling and front-end latency."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servesim import simulate
from servesim.config import parse_config
from servesim.perf.hardware import resolve_gpu
from servesim.perf.models import resolve_model
from servesim.perf.roofline import RooflineTiming
from servesim.build.apply import default_frontend_ms
from servesim.perf.mixed import FusedAic, FusedRoofline, mixed_attention_factor

LLAMA = "meta-llama/Meta-Llama-3.1-8B"


def _config(timing: dict, *, hardware: str = "h200_sxm", backend: str = "vllm", scheduler: dict | None = None,
            requests: int = 30, rate: float = 20.0) -> dict:
    worker = {"scheduler": {"max_batched_tokens": 2048, "max_sequences": 64, **(scheduler or {})},
              "kv_cache": {"block_size": 16}, "timing": timing}
    return {"engine": {"model": LLAMA, "hardware": hardware, "backend": backend, "workers": {"aggregated": worker}},
            "traffic": {"source": {"type": "synthetic", "input_tokens": 900, "output_tokens": 60},
                        "load": {"type": "constant_rate", "requests_per_second": rate},
                        "stop": {"requests": requests}}}


def _roofline(tp: int = 1) -> RooflineTiming:
    return RooflineTiming(resolve_model(LLAMA), resolve_gpu("h200_sxm", None), tp=tp)


shapes = st.tuples(st.integers(1, 8), st.integers(1, 4000), st.integers(0, 3000), st.integers(1, 256),
                   st.integers(1, 4000))


@settings(max_examples=60, deadline=None)
@given(shape=shapes, factor=st.sampled_from([1.0, 1.75, 2.75]))
def test_roofline_fused_pass_lies_between_the_longer_phase_and_the_sum(shape, factor):
    batch, isl, prefix, n, ctx = shape
    prefix = min(prefix, isl - 1)
    fused = FusedRoofline(_roofline(), factor)
    p = fused.prefill(batch, isl, prefix)
    d = fused.decode(n, n * ctx, ctx, 10**7)
    m = fused.mixed(batch, isl, prefix, n, n * ctx, ctx, 10**7)
    assert max(p, d) <= m <= p + factor * d + 1e-9
    if factor == 1.0:
        assert m < p + d  # one weight read instead of two


def test_roofline_fused_pass_is_one_pass_over_all_tokens():
    rt = _roofline()
    # an analytic check: the fused pass equals one pass's dense work on T + n tokens plus each
    # phase's attention (here computed from the pieces directly)
    batch, isl, prefix, n, kv = 2, 700, 200, 40, 40 * 1500
    tokens = batch * (isl - prefix) + n
    expected = (rt.prefill_seconds(batch, isl, prefix) + rt.decode_seconds(n, kv)
                - rt._layers * (rt._layer_dense_part(batch * (isl - prefix)) + rt._layer_dense_part(n)
                                - rt._layer_dense_part(tokens))
                - (rt._per_pass(batch * (isl - prefix), batch) + rt._per_pass(n, n) - rt._per_pass(tokens, batch + n)))
    assert rt.mixed_seconds(batch, isl, prefix, n, kv) == pytest.approx(expected)
    assert rt.mixed_seconds(batch, isl, prefix, n, kv, 2.0) == pytest.approx(
        expected + rt._layers * rt._decode_attention(n, kv))


def test_aic_fused_pass_saves_the_decode_weight_read():
    from servesim.perf import aic
    from servesim.perf.hardware import ready_systems_dir, systems_dir

    systems, how = systems_dir(None)
    ready_systems_dir(systems, how, "h200_sxm")
    version = aic.resolve_version(systems, "h200_sxm", "vllm", None)
    key = aic.AicKey(model=LLAMA, system="h200_sxm", backend="vllm", version=version, tp=1, pp=1, attention_dp=1,
                     moe_tp=None, moe_ep=None, block_size=16, systems_path=str(systems))
    timing = aic.aic_timing(key, None)
    fused = FusedAic(timing)
    for batch, isl, prefix, n, ctx in [(1, 600, 512, 64, 700), (1, 2048, 0, 128, 1200), (3, 900, 0, 8, 3000)]:
        p, d = timing.prefill(batch, isl, prefix), timing.decode(n, n * ctx, ctx, 10**7)
        m = fused.mixed(batch, isl, prefix, n, n * ctx, ctx, 10**7)
        assert max(p, d) <= m < p + d
        # the saving is the decode step's non-attention work (its weight read), less the marginal
        # cost of the n extra tokens in the prefill GEMMs
        rest, _ = fused._generation_ms(n)
        assert p + d - m <= rest + 1e-6
    k = FusedAic(timing, 2.0).mixed(1, 600, 512, 64, 64 * 700, 700, 10**7)
    assert k > fused.mixed(1, 600, 512, 64, 64 * 700, 700, 10**7)


def test_attention_factor_follows_the_query_head_groups_and_the_gpu():
    assert mixed_attention_factor(1) == 1.0
    assert mixed_attention_factor(4) == pytest.approx(1.75)
    assert mixed_attention_factor(8) == pytest.approx(2.75)
    from servesim.config import parse_config as parse
    from servesim.build.apply import _mixed_attention_factor

    for hardware, backend, expected in [("rtx_pro_6000_server", "vllm", 1.75), ("h100_sxm", "vllm", 1.0),
                                        ("rtx_pro_6000_server", "trtllm", 1.0)]:
        config = parse(_config({"type": "roofline", "mixed_pass": "fused"}, hardware=hardware, backend=backend))
        assert _mixed_attention_factor(config.engine, config.engine.workers.aggregated) == expected


def test_sum_mode_and_defaults_are_the_reference():
    plain = simulate({**_config({"type": "roofline"}), "compat": "reference"}).to_dict()
    explicit = simulate(_config({"type": "roofline", "mixed_pass": "sum", "frontend_ms": 0},
                                scheduler={"async_scheduling": False})).reference_fields_only().to_dict()
    for key in ("wall_time_ms", "processed_tokens_per_s", "processed_output_tokens_per_s"):
        plain.pop(key), explicit.pop(key)
    assert plain == explicit


def test_fused_mode_is_faster_per_token_under_load():
    sum_ = simulate(_config({"type": "roofline", "mixed_pass": "sum"}, requests=60, rate=40))
    fused = simulate(_config({"type": "roofline", "mixed_pass": "fused", "frontend_ms": 0},
                             scheduler={"async_scheduling": False}, requests=60, rate=40))
    assert fused["mean_tpot_ms"] < sum_["mean_tpot_ms"]
    assert fused["mean_e2e_latency_ms"] < sum_["mean_e2e_latency_ms"]


def test_a_prompt_samples_its_first_token_from_the_prefill_forward():
    a = simulate(_config({"type": "roofline", "mixed_pass": "sum"}, requests=1))
    b = simulate(_config({"type": "roofline", "mixed_pass": "fused", "frontend_ms": 0}, requests=1))
    # a lone request: the reference charges its first pass prefill + a one-token decode step; a
    # fused pass is the prefill forward alone (of the kernel-aware roofline fused mode uses).
    from servesim.perf.roofline_kernels import kernel_aware

    rt, aware = _roofline(), kernel_aware(_roofline())
    assert a["mean_ttft_ms"] == pytest.approx(rt.prefill(1, 900, 0) + 1000 * rt.decode_seconds(1, 900), abs=1e-5)
    assert b["mean_ttft_ms"] == pytest.approx(aware.prefill(1, 900, 0), abs=1e-5)
    # later passes only decode, one token of a context growing from 901 to 959
    assert b["mean_tpot_ms"] == pytest.approx(1000 * aware.decode_seconds(1, 930), rel=1e-3)
    assert a["mean_tpot_ms"] == pytest.approx(1000 * rt.decode_seconds(1, 930), rel=1e-3)


def test_sglang_passes_are_not_fused():
    timing = {"type": "roofline", "frontend_ms": 0}
    a = simulate(_config(timing, backend="sglang", scheduler={"async_scheduling": False}))
    b = simulate(_config({**timing, "mixed_pass": "fused"}, backend="sglang", scheduler={"async_scheduling": False}))
    assert a["mean_e2e_latency_ms"] == b["mean_e2e_latency_ms"]


def test_front_end_latency_shifts_ttft_and_e2e_in_open_loop():
    base = {"type": "roofline", "mixed_pass": "fused", "frontend_ms": 0}
    a = simulate(_config(base), capture_per_request=True).per_request
    b = simulate(_config({**base, "frontend_ms": 7.5}), capture_per_request=True).per_request
    for x, y in zip(a, b, strict=True):
        assert y["ttft_ms"] == pytest.approx(x["ttft_ms"] + 7.5)
        assert y["e2e_latency_ms"] == pytest.approx(x["e2e_latency_ms"] + 7.5)
        assert y["itl_ms"] == pytest.approx(x["itl_ms"]) if x["itl_ms"] is not None else True


def test_front_end_latency_lengthens_a_closed_loop():
    def run(frontend: float):
        config = _config({"type": "roofline", "frontend_ms": frontend})
        config["traffic"]["load"] = {"type": "concurrency", "concurrency": 1}
        config["traffic"]["stop"] = {"requests": 5}
        return simulate(config, capture_per_request=True)

    a, b = run(0.0), run(10.0)
    # one request at a time: every send waits for the previous end, then 10 ms to reach the engine
    assert b["duration_ms"] == pytest.approx(a["duration_ms"] + 5 * 10.0)


def test_front_end_default_grows_with_the_gpus_of_a_worker():
    assert [default_frontend_ms(g) for g in (1, 2, 4, 8)] == [3.0, 8.0, 10.0, 12.0]
    from servesim.build import lower

    config = _config({"type": "roofline", "mixed_pass": "fused"})
    config["engine"]["workers"]["aggregated"]["parallelism"] = {"tensor": 2}
    assert lower(parse_config(config)).traffic.frontend_ms == 8.0
    config["engine"]["workers"]["aggregated"]["timing"]["frontend_ms"] = 1.5
    assert lower(parse_config(config)).traffic.frontend_ms == 1.5
    del config["engine"]["workers"]["aggregated"]["timing"]["frontend_ms"]
    config["engine"]["workers"]["aggregated"]["parallelism"] = {"attention_data": 2}
    assert lower(parse_config(config)).traffic.frontend_ms == 3.0  # DP ranks are engines of their own
    assert lower(parse_config(_config({"type": "roofline", "mixed_pass": "sum"}))).traffic.frontend_ms == 0.0
    assert lower(parse_config({**_config({"type": "roofline"}), "compat": "reference"})).traffic.frontend_ms == 0.0


def _fixed_two_requests(async_scheduling: bool):
    config = {"engine": {"model": "m", "hardware": "h200_sxm", "context_length": 4096, "workers": {"aggregated": {
        "scheduler": {"async_scheduling": async_scheduling},
        "kv_cache": {"block_size": 16, "capacity": {"type": "fixed", "blocks": 100}},
        "timing": {"type": "fixed", "prefill_ms": 10, "decode_ms": 10}}}},
        "traffic": {"source": {"type": "synthetic", "input_tokens": 32, "output_tokens": 8},
                    "load": {"type": "constant_rate", "requests_per_second": 200}, "stop": {"requests": 2}}}
    return simulate(config, capture_per_request=True).per_request


def test_async_scheduling_makes_a_request_reaching_a_busy_worker_wait_one_more_pass():
    plain, lagged = _fixed_two_requests(False), _fixed_two_requests(True)
    # request 0 starts at 0 on an idle worker in both; request 1 arrives at 5 ms, mid-pass
    assert plain[0]["first_admit_ms"] == lagged[0]["first_admit_ms"] == 0.0
    assert plain[1]["first_admit_ms"] == 20.0  # the next pass, after the 20 ms prefill + decode pass
    assert lagged[1]["first_admit_ms"] == 30.0  # the pass after next (the next one only decodes)
    assert lagged[1]["ttft_ms"] > plain[1]["ttft_ms"]


def test_fused_vllm_roofline_uses_the_gpus_measured_decode_attention():
    """On a GPU whose vLLM decode attention was measured (RTX 4090), fused mode's roofline decode
    step at a full KV cache is dearer than sum mode's; sum mode is the plain roofline; SGLang's
    fused workers keep the kernel-aware roofline's decode without vLLM's measured kernel (for a
    single-GPU bf16 dense model the plain one's)."""
    from servesim.build import lower

    def decode(timing: dict, backend: str = "vllm") -> float:
        pool = lower(parse_config(_config(timing, hardware="rtx_4090", backend=backend))).pools[0]
        return pool.timing.decode(37, 40_500, 1_095, 41_408)

    plain = RooflineTiming(resolve_model(LLAMA), resolve_gpu("rtx_4090", None)).decode(37, 40_500, 1_095, 41_408)
    assert decode({"type": "roofline", "mixed_pass": "sum"}) == plain
    fused = decode({"type": "roofline", "mixed_pass": "fused"})
    assert fused > plain + 0.8  # ~32 layers x (29 µs + the slower KV reads)
    from servesim.perf.roofline_kernels import kernel_aware

    aware = kernel_aware(RooflineTiming(resolve_model(LLAMA), resolve_gpu("rtx_4090", None)))
    assert decode({"type": "roofline", "mixed_pass": "fused"}, backend="sglang") == aware.decode(37, 40_500, 1_095, 41_408)
    assert aware.decode(37, 40_500, 1_095, 41_408) == pytest.approx(plain, abs=1e-6)  # TP1 bf16 dense: nothing to fix
