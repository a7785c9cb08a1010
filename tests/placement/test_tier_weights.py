"""The KV router's host- and disk-tier hit weights (Dynamo 1.6.1's `host_cache_hit_weight`,
`disk_cache_hit_weight`; issue 34): prefix blocks a rank holds in its host tier right after its
GPU overlap, and on disk right after those, are credited at their weights."""

from __future__ import annotations

import pytest

from servesim.placement.base import RouteRequest
from servesim.placement.routers import KvRouter, KvRouterSettings


def _kv(workers: int = 2, **settings: float) -> KvRouter:
    router = KvRouter(1, KvRouterSettings(block_size=64, **settings))
    for w in range(workers):
        router.worker_added(w)
    return router


def _req(rid: int, keys: list[int]) -> RouteRequest:
    return RouteRequest(rid, "s", 64 * len(keys), list(keys), 0)


def test_host_and_disk_blocks_after_the_gpu_overlap_are_credited() -> None:
    """Worker 0: 1 GPU block, 2 host blocks after it, 1 disk block after those: credit
    1 + 0.75 x 2 + 0.25 x 1 = 2.75 blocks off its 4 prompt blocks (+ 4 decode blocks)."""
    router = _kv()
    router.on_kv_events((0, 0), [("stored", 1), ("host_stored", 2), ("host_stored", 3), ("disk_stored", 4)], 0.0)
    costs = router.costs(_req(1, [1, 2, 3, 4]), 0.0)
    assert costs[(0, 0)] == (pytest.approx((4 - 2.75) + 4), 1)  # the reported overlap stays the GPU's
    assert costs[(1, 0)] == (pytest.approx(4 + 4), 0)


def test_a_gap_ends_each_tier_run_and_removals_count() -> None:
    router = _kv(host_weight=0.5, disk_weight=0.0)
    router.on_kv_events((0, 0), [("host_stored", 1), ("host_stored", 3), ("disk_stored", 2)], 0.0)
    assert router.costs(_req(1, [1, 2, 3]), 0.0)[(0, 0)][0] == pytest.approx(3 - 0.5 + 3)
    router.on_kv_events((0, 0), [("host_removed", 1)], 1.0)
    assert router.costs(_req(2, [1, 2, 3]), 0.0)[(0, 0)][0] == pytest.approx(3 + 3)


def test_weights_of_zero_change_nothing() -> None:
    router = _kv(host_weight=0.0, disk_weight=0.0)
    router.on_kv_events((0, 0), [("host_stored", 1), ("disk_stored", 2)], 0.0)
    costs = router.costs(_req(1, [1, 2]), 0.0)
    assert costs[(0, 0)] == costs[(1, 0)]


def test_removing_a_worker_clears_its_tier_blocks() -> None:
    router = _kv()
    router.on_kv_events((0, 0), [("host_stored", 1), ("disk_stored", 2)], 0.0)
    router.worker_removed(0)
    assert router.tiers == {"host": {}, "disk": {}}


def _run(tmp_path, seed: int, host_weight: float) -> int:
    """Session 1 computes A then two other prompts on its worker (session affinity), pushing A
    out of that worker's 8-block GPU pool into its host tier; session 2 then asks for A. Returns
    the host tokens session 2's A reused."""
    import json

    from servesim import simulate
    from servesim.config.load import parse_config

    def row(t: float, ids: list[int], session: str) -> dict:
        return {"timestamp": t, "input_length": 512, "output_length": 4, "hash_ids": ids, "session_id": session}

    rows = [row(100, [1, 2, 3, 4], "one"), row(200, [11, 12, 13, 14], "one"), row(300, [21, 22, 23, 24], "one"),
            row(400, [1, 2, 3, 4], "two")]
    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    kv = {"block_size": 128, "bytes_per_token": 1000, "capacity": {"type": "fixed", "blocks": 8},
          "host_offload": {"num_host_blocks": 100}}
    config = {"traffic": {"source": {"type": "trace", "paths": [str(trace)], "format": "mooncake", "block_size": 128},
                          "load": {"type": "trace_timestamps"}},
              "engine": {"model": "Qwen/Qwen3-32B", "hardware": "h200_sxm", "backend": "vllm", "context_length": 32768,
                         "workers": {"aggregated": {"parallelism": {"replicas": 2}, "kv_cache": kv,
                                                    "scheduler": {"max_batched_tokens": 8192, "max_sequences": 256},
                                                    "timing": {"type": "fixed", "prefill_ms": 10, "decode_ms": 5}}}},
              "router": {"policy": "kv_router", "session_affinity": True, "seed": seed,
                         "host_cache_hit_weight": host_weight}}
    report = simulate(parse_config(config, stack="dynamo"), capture_per_request=True).to_dict()
    last = max(report["per_request"], key=lambda r: r["arrival_time_ms"])
    return last["first_admission_host_reused_input_tokens"]


def test_a_prompt_in_host_memory_draws_its_request(tmp_path) -> None:
    """With the host weight, session 2's A goes to the worker holding A in host memory whatever
    the seed (cost 4 - 0.75 x 3 + 4 against 8); without it, the two workers tie and the seed decides."""
    assert [_run(tmp_path, seed, 0.75) for seed in range(6)] == [384] * 6
    assert 0 in [_run(tmp_path, seed, 0.0) for seed in range(6)]


@pytest.mark.parametrize("key, value", [("host_cache_hit_weight", 1.5), ("disk_cache_hit_weight", -0.1)])
def test_weights_outside_zero_to_one_are_refused(key: str, value: float) -> None:
    from servesim.config.dynamo import RouterConfig
    from servesim.errors import ConfigError

    with pytest.raises((ConfigError, ValueError)) as info:
        RouterConfig.model_validate({"policy": "kv_router", key: value})
    assert key in str(info.value)
