"""Long sessions whose every turn extends the one before: the KV work of a turn is what is new.

An `applied_compute_agentic` session of 100,000 one-token turns re-keyed and re-walked its whole
growing prompt on every turn (issue 35: past 20 s, quadratic in the turns). A turn of
consecutive trace ids now takes its blocks' keys from the session's kept chain
(`servesim.engine.cache.blocks.RANGE_KEYS`) and a release joins the consecutive cached spans
it frees, so the history stays one span. Neither may change a result: checked here against
runs with both turned off."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

import servesim
from servesim.engine.cache.blocks import RangeKeys, chain_keys
from servesim.engine.cache.kv import BlockPool
from servesim.engine.request import EngineRequest
from servesim.traffic.workload import Turn, expand_hash_ids, output_runs


def _row(turns: int, answer: int = 1, tool: int = 1, prompt: int = 1) -> dict[str, Any]:
    return {"num_turns": turns, "input_prompt_length": prompt, "assistant_response_length": [answer] * turns,
            "tool_call_output_length": [tool] * turns, "tool_call_latency": [0] * turns,
            "final_assistant_response_length": 1}


def _config(trace: Path, blocks: int, block_size: int = 32, backend: str = "vllm",
            context: int = 400_000) -> dict[str, Any]:
    return {
        "engine": {"model": "Qwen/Qwen3-8B", "hardware": "h200_sxm", "backend": backend,
                   "context_length": context, "workers": {"aggregated": {
                       "scheduler": {"max_batched_tokens": 8192, "max_sequences": 64},
                       "kv_cache": {"block_size": block_size, "prefix_caching": True,
                                    "capacity": {"type": "fixed", "blocks": blocks}},
                       "timing": {"type": "fixed", "prefill_ms": 3.3, "decode_ms": 0.7}}}},
        "traffic": {"source": {"type": "trace", "format": "applied_compute_agentic", "paths": [str(trace)],
                               "block_size": 16},
                    "load": {"type": "concurrency", "concurrency": 3}},
    }


@pytest.mark.parametrize(("trace_block", "block_size"), [(16, 32), (16, 16), (16, 24), (1, 16), (32, 16), (5, 7)])
def test_range_keys_equal_the_keys_of_the_whole_prompt(trace_block: int, block_size: int) -> None:
    keys = RangeKeys(1 << 20)
    values = range(1000, 5000)
    for blocks in (0, 1, 2, 3, 7, 8, 30, 31, 64, 200, 201):
        runs = expand_hash_ids(values, trace_block, blocks * block_size)
        assert keys.keys(values[:blocks * block_size // trace_block + 1], trace_block, block_size, blocks)[:blocks] \
            == chain_keys(runs, block_size, blocks, memo=None), blocks


@pytest.mark.parametrize(("length", "generated"), [(100, 0), (100, 29), (96, 1), (1000, 70), (33, 40)])
def test_a_turns_keys_past_its_prompt_are_those_of_its_whole_sequence(length: int, generated: int) -> None:
    values = range(77, 77 + 1000)
    turn = Turn(values[:-(-length // 16)], 16, length, 100)
    request = EngineRequest(1, turn, length, 100, output_base=-(1 << 59))
    blocks = (length + generated) // 32
    runs = turn.input_runs() + output_runs(-(1 << 59), generated, None)
    request.generated = generated
    assert request.full_block_keys(blocks // 2, 32) == chain_keys(runs, 32, blocks // 2, memo=None)
    assert request.full_block_keys(blocks, 32) == chain_keys(runs, 32, blocks, memo=None)


def _records(config: dict[str, Any]) -> tuple[str, list[str]]:
    report = servesim.simulate(config, capture_per_request=True)
    summary = {k: v for k, v in report.to_dict().items() if k != "per_request" and "wall" not in k
               and not k.startswith("processed_")}
    return json.dumps(summary, sort_keys=True), [json.dumps(r, sort_keys=True) for r in report.per_request]


@pytest.mark.parametrize(("blocks", "backend_block"), [(150, 32), (60, 16), (5000, 32)])
def test_kept_keys_and_joined_spans_change_no_result(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     blocks: int, backend_block: int) -> None:
    """Three sessions side by side, under KV pressure (history evicted and recomputed, requests
    preempted) and without: the records are those of a run that keys every prompt afresh and
    never joins spans."""
    trace = tmp_path / "agentic.jsonl"
    trace.write_text("".join(json.dumps(row) + "\n" for row in (_row(400), _row(300, 3, 40, 50), _row(250, 2, 7))))
    config = _config(trace, blocks, backend_block, context=8192)
    fast = _records(config)
    monkeypatch.setattr(BlockPool, "join_spans", False)
    monkeypatch.setattr(EngineRequest, "_range_keys", lambda self, n, bs, g: False)
    assert _records(config) == fast


def test_100000_one_token_turns_take_time_in_proportion(tmp_path: Path) -> None:
    """Issue 35: 10^5 one-token turns (prompts growing to 200,001 tokens) ran past 20 s; the
    keying and span walking was quadratic in the turns. CPU time, so a loaded machine does not
    fail it."""
    trace = tmp_path / "agentic.jsonl"
    trace.write_text(json.dumps(_row(100_000)) + "\n")
    started = time.process_time()
    report = servesim.simulate(_config(trace, 40_000))
    assert time.process_time() - started < 20
    assert report.to_dict()["completed_requests"] == 100_001
