"""servesim's own default-KV-capacity formula against the reference's block counts.

Expected values: the reference's own (its `estimate_num_gpu_blocks`, identical for
vLLM 0.19.0 and 0.24.0) and the cases' lowered specs (replay 03: 12,226; engine 07: 3,904;
timing 01: 11,528; timing 02: 15,510). The system constants come from the installed
aiconfigurator-core package's system files (same constants as the reference's copy).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from servesim import load_config
from servesim.config import parse_config
from servesim.build import lower
from servesim.perf.capacity import Parallel, estimate, weight_bytes
from servesim.perf.hardware import package_systems_dir, resolve_gpu
from servesim.perf.models import ModelNotFound, bundled_configs_dir, model_context_length, resolve_model
from servesim.errors import RunError

CASES = Path(__file__).parents[1] / "cases"
SYSTEMS = package_systems_dir()  # the GPU constants are the same in the reference's database

# model: (h200 TP1, TP2, TP4), (h100 TP1, TP2, TP4) — engine.md §6.4 (block 64, F 0.9, 8192 tokens)
TABLE = {
    "Qwen/Qwen3-8B": ((12226, 26176, 54108), (5979, 13683, 29122)),
    "Qwen/Qwen3-32B-FP8": ((11528, 27205, 58573), (4501, 13151, 30465)),
    "Qwen/Qwen3-32B": ((3904, 11742, 27426), (390, 4715, 13372)),
    "meta-llama/Meta-Llama-3.1-8B": ((13792, 29486, 60910), (6765, 15432, 32801)),
    "Qwen/Qwen3-30B-A3B": ((11218, 32118, 73934), (1849, 13379, 36455)),
}


def blocks(model: str, system: str, par: Parallel, backend: str = "vllm", *, block: int = 64,
           tokens: int = 8192, fraction: float = 0.9) -> int:
    return estimate(resolve_model(model), resolve_gpu(system, SYSTEMS), backend, par, block_size=block,
                    max_batched_tokens=tokens, fraction=fraction).blocks


@pytest.mark.parametrize("model", sorted(TABLE))
@pytest.mark.parametrize("system_index, system", [(0, "h200_sxm"), (1, "h100_sxm")])
def test_block_counts_match_the_reference_table(model: str, system_index: int, system: str) -> None:
    for tp, want in zip((1, 2, 4), TABLE[model][system_index], strict=True):
        moe = resolve_model(model).is_moe
        par = Parallel(tp=tp, moe_tp=tp if moe else 1)
        assert blocks(model, system, par) == want, (model, system, tp)


def test_hand_check_of_qwen3_32b() -> None:
    """engine.md §6.4: 151397597184·0.9 − (65522892800 + 1476395008 + 3758096384) B → 3904 blocks."""
    c = estimate(resolve_model("Qwen/Qwen3-32B"), resolve_gpu("h200_sxm", SYSTEMS), "vllm", Parallel(),
                 block_size=64, max_batched_tokens=8192, fraction=0.9)
    assert (c.weights, c.activations, c.others, c.nccl) == (65522892800, 1476395008, 3758096384, 0)
    assert (c.kv_bytes_per_token, c.tokens, c.blocks, c.method) == (262144, 249864, 3904, "servesim")


def test_fp8_checkpoints_get_an_fp8_kv_cache() -> None:
    assert resolve_model("Qwen/Qwen3-32B-FP8").kv_bytes_per_token(1) == 131072
    assert resolve_model("Qwen/Qwen3-32B").kv_bytes_per_token(1) == 262144
    assert resolve_model("nvidia/Llama-3.1-70B-Instruct-FP8").kv_cache_bytes == 1


@pytest.mark.parametrize("model, par, want_weights", [
    # values of the database's own memory model (aiconfigurator-core 0.12.0)
    ("Qwen/Qwen3-30B-A3B", Parallel(tp=1, attention_dp=2, moe_ep=2), 31450464256),
    ("Qwen/Qwen3-8B", Parallel(tp=2, pp=2), 4095213568),
    ("Qwen/Qwen3-8B", Parallel(tp=16), 1061552128),
    ("nvidia/Qwen3-235B-A22B-NVFP4", Parallel(tp=4, moe_tp=4), 33287700480),
    ("Qwen/Qwen3-30B-A3B-FP8", Parallel(tp=1), 30544494592),
    ("mistralai/Mixtral-8x7B-v0.1", Parallel(tp=2, moe_ep=2), 46572503040),
    ("nvidia/Llama-3.1-70B-Instruct-FP8", Parallel(tp=8), 9081716736),
])
def test_weights_per_rank(model: str, par: Parallel, want_weights: int) -> None:
    assert weight_bytes(resolve_model(model), par) == want_weights


def test_other_backends_and_knobs() -> None:
    # SGLang (of_total 0.88, its own coefficients) and TRT-LLM (of_free) as the database computes them
    assert blocks("Qwen/Qwen3-8B", "h200_sxm", Parallel(), "sglang", block=1, tokens=4096, fraction=0.88) == 758186
    assert blocks("Qwen/Qwen3-30B-A3B", "h200_sxm", Parallel(tp=2, moe_tp=2), "sglang", block=1, tokens=4096,
                  fraction=0.88) == 1983077
    assert blocks("Qwen/Qwen3-8B", "h200_sxm", Parallel(), "trtllm", block=32, tokens=4096) == 24965
    assert blocks("meta-llama/Meta-Llama-3.1-8B", "h200_sxm", Parallel(tp=4), "trtllm", block=32, tokens=4096) == 122777
    # a small token budget shrinks the activation term to its 70 MiB floor; the fraction scales the pool
    assert blocks("Qwen/Qwen3-8B", "h200_sxm", Parallel(), block=1, tokens=256) == 786983
    assert blocks("Qwen/Qwen3-8B", "h200_sxm", Parallel(), block=1, fraction=0.5) == 371783


def test_refusals_match_the_database() -> None:
    with pytest.raises(RunError, match="should be divisible by tp_size 3"):
        blocks("Qwen/Qwen3-8B", "h200_sxm", Parallel(tp=3))
    with pytest.raises(RunError, match="Parallelism width mismatch"):
        blocks("Qwen/Qwen3-30B-A3B", "h200_sxm", Parallel(tp=2))
    with pytest.raises(RunError, match="Invalid quantized MoE configuration"):
        blocks("Qwen/Qwen3-30B-A3B-FP8", "h200_sxm", Parallel(tp=4, moe_tp=4))
    with pytest.raises(RunError, match="no KV budget"):
        blocks("meta-llama/Meta-Llama-3.1-70B", "h100_sxm", Parallel())


@pytest.mark.parametrize("case, want", [
    ("replay/03-default-timing-aic/config.yaml", 12226),
    ("engine/07-default-aic-timing/config.yaml", 3904),
    ("timing/01-qwen32fp8-h200-vllm024/config.yaml", 11528),
    ("timing/02-llama8b-h100-tp2-vllm024/config.yaml", 15510),
])
def test_cases_lower_to_the_reference_block_counts(case: str, want: int) -> None:
    from servesim.build.lower import _num_blocks  # the seam build uses for every role

    config = load_config(CASES / case)
    assert _num_blocks(config.engine, config.engine.workers.aggregated, "aggregated") == want


def test_default_capacity_runs_with_fixed_timing_without_importing_aic(tmp_path: Path) -> None:
    config = {
        "engine": {"model": "Qwen/Qwen3-8B", "hardware": "h200_sxm", "context_length": 4096,
                   "workers": {"aggregated": {"timing": {"type": "fixed", "prefill_ms": 5, "decode_ms": 2}}}},
        "traffic": {"source": {"type": "synthetic", "input_tokens": 64, "output_tokens": 4},
                    "load": {"type": "concurrency", "concurrency": 2}, "stop": {"requests": 4}},
    }
    script = ("import json, sys, servesim\n"
              f"r = servesim.simulate(json.loads({json.dumps(json.dumps(config))}))\n"
              "print(r['completed_requests'], 'aiconfigurator_core' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["4", "False"]
    assert lower(parse_config(config)).pools[0].rank_config.num_blocks == 12226


def test_model_resolution(tmp_path: Path) -> None:
    assert resolve_model("Qwen/Qwen3-8B").source == "bundled"
    assert model_context_length("Qwen/Qwen3-32B-FP8") == 40960
    assert model_context_length("meta-llama/Meta-Llama-3.1-8B") == 131072
    bundled = bundled_configs_dir() / "Qwen--Qwen3-8B_config.json"
    (tmp_path / "config.json").write_text(bundled.read_text())
    local = resolve_model(str(tmp_path))
    assert local.source == "local" and local.family == "dense"
    assert blocks(str(tmp_path), "h200_sxm", Parallel()) == 12226
    with pytest.raises(ModelNotFound, match="bundled model configs, and no config.json from the Hugging Face Hub"):
        resolve_model("someone/not-a-bundled-model")
    with pytest.raises(RunError, match="context_length"):
        model_context_length("someone/not-a-bundled-model")


def test_unknown_gpus_use_servesim_table_and_user_specs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = resolve_gpu("rtx_4090", SYSTEMS)
    assert gpu.source == "servesim table" and gpu.mem_capacity == 24 << 30 and not gpu.has_aic_data
    assert resolve_gpu("h200_sxm", SYSTEMS).has_aic_data
    with pytest.raises(RunError, match="unknown GPU"):
        resolve_gpu("no_such_gpu", SYSTEMS)
    specs = tmp_path / "gpus.yaml"
    specs.write_text("my_gpu: {memory_gib: 48, memory_bandwidth_gb_s: 1000, bf16_tflops: 200}\n")
    monkeypatch.setenv("SERVESIM_GPU_SPECS", str(specs))
    mine = resolve_gpu("my_gpu", SYSTEMS)
    assert (mine.source, mine.mem_capacity, mine.mem_bw) == (str(specs), 48 << 30, 1e12)
    assert blocks("Qwen/Qwen3-8B", "my_gpu", Parallel()) > 0
