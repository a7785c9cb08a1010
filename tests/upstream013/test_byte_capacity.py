"""Byte-sized KV capacity (issue 34): `capacity.bytes`, `kv_cache.bytes_per_token` and
`capacity.cuda_graph_reserved_bytes`, checked against AISimulate 0.13's recorded behaviour
(`tests/cases/upstream013/`, recorded by `benchmarks/record_013_capacity.py`; the reference is
never run here)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from cases013 import recorded, assert_verdict_matches
from conftest import CASES, canonical

from servesim import simulate
from servesim.build.perf import num_blocks
from servesim.config.engine import FixedCapacity
from servesim.config.load import parse_config

HERE = CASES / "upstream013"
CAPACITY = recorded("capacity")["cases"]
VERDICTS = recorded("capacity-verdicts")
CASE02 = CASES / "engine" / "02-vllm-preemption"
TRACE = HERE / "one-request.jsonl"


def _engine_config(engine: dict[str, Any], trace: Path = TRACE) -> dict[str, Any]:
    return {"engine": copy.deepcopy(engine),
            "traffic": {"source": {"type": "trace", "paths": [str(trace)], "format": "mooncake", "block_size": 512},
                        "load": {"type": "trace_timestamps"}}}


def _blocks(engine: dict[str, Any]) -> int:
    config = parse_config(_engine_config(engine))
    return num_blocks(config.engine, config.engine.workers.aggregated, "aggregated")


def _reserved(row: dict[str, Any]) -> int:
    return row["config"]["workers"]["aggregated"]["kv_cache"]["capacity"]["cuda_graph_reserved_bytes"]


@pytest.mark.parametrize("row", [r for r in CAPACITY if r["config"]["backend"] != "sglang"],
                         ids=lambda r: f"{r['config']['backend']}-{r['config']['model']}-{_reserved(r)}")
def test_default_capacity_with_graph_reservation_matches_013(row: dict[str, Any]) -> None:
    """vLLM and TRT-LLM: the same block count as 0.13's estimate, reservation or not."""
    assert _blocks(row["config"]) == row["estimated_num_gpu_blocks"]


def _sglang_pairs() -> list[tuple[dict[str, Any], dict[str, Any]]]:
    rows = [r for r in CAPACITY if r["config"]["backend"] == "sglang"]
    bare = {json.dumps(r["config"]["workers"]["aggregated"]["parallelism"]) + str(
        r["config"]["workers"]["aggregated"]["kv_cache"]["capacity"].get("memory_fraction")): r
        for r in rows if _reserved(r) == 0}
    return [(bare[json.dumps(r["config"]["workers"]["aggregated"]["parallelism"]) + str(
        r["config"]["workers"]["aggregated"]["kv_cache"]["capacity"].get("memory_fraction"))], r)
        for r in rows if _reserved(r)]


@pytest.mark.parametrize("pair", _sglang_pairs(), ids=lambda p: str(_reserved(p[1])))
def test_sglang_graph_reservation_takes_as_many_blocks_as_in_013(pair) -> None:
    """SGLang: 0.13's estimate before its native adjustments is not 0.1.0.dev2's pool (servesim
    keeps 0.1.0.dev2's, exact on its parity cases), but the reservation removes the same blocks."""
    bare, reserved = pair
    assert _reserved(reserved) > 0
    expected = bare["estimated_num_gpu_blocks"] - reserved["estimated_num_gpu_blocks"]
    assert expected > 0
    assert _blocks(bare["config"]) - _blocks(reserved["config"]) == expected


def test_reservation_is_counted_once_per_rank_not_scaled_by_the_fraction() -> None:
    """vLLM: 2 GiB of graphs at 147456 bytes per token and 64-token blocks take 228 blocks."""
    rows = [r for r in CAPACITY if r["config"]["backend"] == "vllm" and r["config"]["workers"]["aggregated"]
            ["kv_cache"]["capacity"].get("memory_fraction") is None]
    by_reserved = {_reserved(r): r["estimated_num_gpu_blocks"] for r in rows}
    assert by_reserved[0] - by_reserved[2 << 30] == 228 == -(-(2 << 30) // (147456 * 64))


def _case02(kv_cache: dict[str, Any]) -> dict[str, Any]:
    import yaml

    config = yaml.safe_load((CASE02 / "config.yaml").read_text())
    config["engine"]["workers"]["aggregated"]["kv_cache"] = copy.deepcopy(kv_cache)
    config["traffic"]["source"]["paths"] = [str(CASE02 / "trace.jsonl")]
    return config


@pytest.mark.parametrize("name", sorted(VERDICTS["pairs"]))
def test_byte_pool_runs_like_the_block_pool_013_equates_it_with(name: str) -> None:
    """0.13's report for the byte pool equals its report for the block pool and not the next
    larger one; servesim's reports relate the same way (under a preempting tiny pool)."""
    pair = VERDICTS["pairs"][name]
    assert pair["same_as_first"] == [True, True, False]
    reports = [canonical(simulate(parse_config(_case02(kv)), capture_per_request=True).to_dict())
               for kv in pair["configs"]]
    assert reports[0] == reports[1]
    assert reports[0] != reports[2]
    cap = parse_config(_case02(pair["configs"][0])).engine.workers.aggregated.kv_cache.capacity
    assert isinstance(cap, FixedCapacity) and cap.bytes is not None
    assert cap.blocks_for(16, 1000) == pair["configs"][1]["capacity"]["blocks"]


# the key each refusal must name (0.13's messages are pydantic's; servesim names the key and rule)
NAMED = {
    "blocks-and-bytes": "capacity.bytes: not allowed together with 'blocks'",
    "bytes-without-bytes-per-token": "kv_cache.bytes_per_token: must be given explicitly",
    "bytes-without-block-size": "kv_cache.block_size: must be given explicitly",
    "bytes-below-one-block": "capacity.bytes: must hold at least one block",
    "bytes-zero": "capacity.bytes: must be > 0",
    "bytes-over-u64": "capacity.bytes: must be <= 18446744073709551615",
    "bytes-float": "capacity.bytes: must be an integer",
    "bytes-per-token-zero": "kv_cache.bytes_per_token: must be a positive integer or 'auto'",
    "bytes-per-token-float": "kv_cache.bytes_per_token: must be a positive integer or 'auto'",
    "block-bytes-over-u64": "block_size x bytes_per_token overflows an unsigned 64-bit integer",
    "default-with-bytes": "capacity.bytes: not allowed when type is 'default'",
    "fixed-with-reserved": "capacity.cuda_graph_reserved_bytes: must be 0",
    "reserved-over-2-53": "capacity.cuda_graph_reserved_bytes: must be <= 9007199254740992",
    "reserved-negative": "capacity.cuda_graph_reserved_bytes: must be >= 0",
    "reserved-float": "capacity.cuda_graph_reserved_bytes: must be an integer",
}


@pytest.mark.parametrize("name", sorted(VERDICTS["verdicts"]))
def test_config_verdict_matches_013(name: str) -> None:
    """Accepted where 0.13 exits 0; refused (exit 2) where it does, naming the key and the rule."""
    verdict = VERDICTS["verdicts"][name]
    config = copy.deepcopy(verdict["config"])
    config["traffic"]["source"]["paths"] = [str(CASE02 / "trace.jsonl")]
    assert_verdict_matches(verdict["exit_code"], config, NAMED.get(name))


def test_cli_exits_2_naming_the_key(tmp_path: Path) -> None:
    import subprocess
    import sys

    import yaml

    config = _case02({"block_size": 16, "capacity": {"type": "fixed", "bytes": 160_000}})
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(config))
    done = subprocess.run([sys.executable, "-m", "servesim", "predict", "-c", str(tmp_path / "c.yaml"),
                           "--output-dir", str(tmp_path / "out")], capture_output=True, text=True)
    assert done.returncode == 2
    assert "kv_cache.bytes_per_token" in done.stderr and "capacity.bytes" in done.stderr
