"""The default KV pool under `compat: upstream-0.13` (issue 34): SGLang's static fraction as
AISimulate 0.13 applies it, and vLLM / TensorRT-LLM unchanged, against 0.13's recorded block
counts (`tests/cases/upstream013/pool.json`, recorded by `benchmarks/record_013_pool.py`; the
reference is never run here). The defaults and `compat: reference` keep servesim's numbers."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from cases013 import COMPAT, recorded
from conftest import CASES

from servesim.build.lower import lower
from servesim.config.load import parse_config
from servesim.errors import RunError

POOL = recorded("pool")["cases"]
SIZED = [r for r in POOL if "error" not in r]
NO_BUDGET = [r for r in POOL if "error" in r]
TRACE = CASES / "upstream013" / "one-request.jsonl"
QWEN8_H200 = {"model": "Qwen/Qwen3-8B", "hardware": "h200_sxm", "backend": "sglang",
              "workers": {"aggregated": {"kv_cache": {"capacity": {"type": "default"}}}}}


def _blocks(engine: dict[str, Any], compat: str | None) -> int:
    """The KV blocks per rank the run builds for the aggregated role (fixed timing: capacity only)."""
    engine = copy.deepcopy(engine)
    engine["workers"]["aggregated"]["timing"] = {"type": "fixed", "prefill_ms": 1, "decode_ms": 1}
    config: dict[str, Any] = {
        "engine": engine,
        "traffic": {"source": {"type": "trace", "paths": [str(TRACE)], "format": "mooncake", "block_size": 512},
                    "load": {"type": "trace_timestamps"}}}
    if compat is not None:
        config["compat"] = compat
    return lower(parse_config(config)).pool("aggregated").rank_config.num_blocks


def _id(row: dict[str, Any]) -> str:
    worker = row["config"]["workers"]["aggregated"]
    split = "-".join(f"{k}{v}" for k, v in worker["parallelism"].items())
    extras = "-".join(f"{k}{v}" for k, v in worker["kv_cache"]["capacity"].items() if k != "type")
    return "-".join(p for p in (row["config"]["backend"], row["config"]["model"].split("/")[-1],
                                row["config"]["hardware"], split, extras) if p)


def test_the_records_cover_what_the_issue_asks() -> None:
    """At least six SGLang pools (dense, MoE and MLA; several GPUs, splits, fractions, CUDA-graph
    reservations) and vLLM / TRT-LLM pools; every row has a block count or 0.13's "no KV budget"."""
    sglang = [r for r in SIZED if r["config"]["backend"] == "sglang"]
    assert len(sglang) >= 6
    assert {r["config"]["backend"] for r in SIZED} == {"sglang", "vllm", "trtllm"}
    assert {r["config"]["hardware"] for r in sglang} >= {"h100_sxm", "h200_sxm", "b200_sxm"}
    assert any("DeepSeek" in r["config"]["model"] for r in sglang)
    assert all(isinstance(r["estimated_num_gpu_blocks"], int) for r in SIZED)
    assert all("no KV budget" in r["error"] for r in NO_BUDGET)


@pytest.mark.parametrize("row", SIZED, ids=_id)
def test_default_pool_matches_013_exactly(row: dict[str, Any]) -> None:
    """servesim under the switch builds 0.13's block count, to the block."""
    assert _blocks(row["config"], COMPAT) == row["estimated_num_gpu_blocks"]


@pytest.mark.parametrize("row", NO_BUDGET, ids=_id)
def test_no_budget_where_013_finds_none(row: dict[str, Any]) -> None:
    """Where 0.13 finds no room for the KV pool, servesim's run fails the same way."""
    with pytest.raises(RunError, match="no KV budget"):
        _blocks(row["config"], COMPAT)


def test_qwen3_8b_h200_sglang_pool_per_compat() -> None:
    """The issue's example: 0.13 sizes it at 765,519 tokens (page size 1); the defaults keep
    servesim's static fraction of the whole GPU and `compat: reference` the reference's sizing."""
    assert _blocks(QWEN8_H200, COMPAT) == 765_519
    assert _blocks(QWEN8_H200, None) == 792_433
    assert _blocks(QWEN8_H200, "reference") == 754_522


def test_013_formula_by_hand() -> None:
    """(capacity − runtime reserve × 1.2 − NCCL) × fraction − weights − graphs, over 147,456 bytes
    per token: the runtime and NCCL reserves scale with the fraction, the graphs do not."""
    capacity, others, weights, per_token = 151_397_597_184, 3_758_096_384 * 1.2, 16_380_854_272, 147_456
    engine = copy.deepcopy(QWEN8_H200)
    engine["workers"]["aggregated"]["kv_cache"]["capacity"].update(memory_fraction=0.6,
                                                                   cuda_graph_reserved_bytes=5 << 30)
    want = int(((capacity - others) * 0.6 - weights - (5 << 30)) // per_token)
    assert _blocks(engine, COMPAT) == want
    assert want != int((capacity * 0.6 - weights - (5 << 30)) // per_token)


def test_no_room_is_a_clear_run_error() -> None:
    """Weights that fill the static share: the run fails naming the budget and the way out."""
    engine = {"model": "Qwen/Qwen3-32B", "hardware": "h100_sxm", "backend": "sglang",
              "workers": {"aggregated": {"kv_cache": {"capacity": {"type": "default", "memory_fraction": 0.4}}}}}
    with pytest.raises(RunError, match=r"no KV budget.*memory_fraction"):
        _blocks(engine, COMPAT)


def test_default_sglang_pool_takes_the_cuda_graph_reservation_off_once() -> None:
    """servesim's own SGLang sizing (the defaults) honours `cuda_graph_reserved_bytes`: the pool
    shrinks by the reservation over the KV bytes per token, not scaled by the fraction."""
    engine = copy.deepcopy(QWEN8_H200)
    engine["workers"]["aggregated"]["kv_cache"]["capacity"]["cuda_graph_reserved_bytes"] = 1 << 30
    without, with_graphs = _blocks(QWEN8_H200, None), _blocks(engine, None)
    assert without - with_graphs in ((1 << 30) // 147_456, (1 << 30) // 147_456 + 1)
