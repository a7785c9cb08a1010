"""Disaggregated dispatch rules (cluster/disaggregated.py), through whole small runs: a prompt
needing exactly a decode rank's KV blocks is decoded, one token more fails at the decode route
with the block counts named; the KV transfer takes prompt × bytes per token over the bandwidth,
from the source's hold to the destination's activation."""

from __future__ import annotations

import pytest

from servesim.api import simulate
from servesim.config import parse_config


def _config(isl: int, decode_blocks: int, bandwidth: float = 20, bytes_per_token: int = 50_000) -> dict:
    def worker(blocks: int) -> dict:
        return {"parallelism": {"replicas": 1}, "scheduler": {"max_batched_tokens": 8192, "max_sequences": 8},
                "kv_cache": {"block_size": 16, "prefix_caching": False, "capacity": {"type": "fixed", "blocks": blocks}},
                "timing": {"type": "fixed", "prefill_ms": 3, "decode_ms": 1}}

    return {"engine": {"mode": "disaggregated", "model": "m", "hardware": "h200_sxm", "context_length": 4096,
                       "workers": {"prefill": worker(400), "decode": worker(decode_blocks)},
                       "kv_transfer": {"bytes_per_token": bytes_per_token, "bandwidth_gb_per_second": bandwidth,
                                       "timing_mode": "full_prompt"}},
            "traffic": {"source": {"type": "synthetic", "input_tokens": isl, "output_tokens": 1},
                        "load": {"type": "concurrency", "concurrency": 1}, "stop": {"requests": 1}}}


def _request(config: dict) -> dict:
    report = simulate(parse_config(config), capture_per_request=True).to_dict()
    (request,) = report["per_request"]
    return request


@pytest.mark.parametrize(("isl", "blocks"), [(64, 4), (48, 3), (49, 4)])
def test_a_prompt_filling_the_decode_pool_exactly_is_decoded(isl, blocks):
    assert _request(_config(isl, blocks))["terminal_status"] == "completed"


@pytest.mark.parametrize(("isl", "blocks", "needed"), [(65, 4, 5), (49, 3, 4)])
def test_one_block_more_than_the_decode_pool_fails_naming_the_counts(isl, blocks, needed):
    request = _request(_config(isl, blocks))
    assert request["terminal_status"] == "failed"
    assert request["rejection_reason"] == (f"its prompt of {isl} tokens needs {needed} KV blocks, "
                                           f"more than the {blocks} of a decode rank's pool")


def test_the_transfer_takes_the_prompts_bytes_over_the_bandwidth():
    request = _request(_config(64, 8, bandwidth=20, bytes_per_token=50_000))
    # 64 × 50 kB = 3.2 MB at 20 GB/s = 0.16 ms, after the 3 ms prefill
    assert request["source_held_ms"] == 3.0 and request["destination_reserved_ms"] == 3.0
    assert request["destination_activated_ms"] == pytest.approx(3.16)
    assert request["source_released_ms"] == pytest.approx(3.16)
