"""A small recommend config with fixed timing and fixed KV pools (no timing database)."""

from __future__ import annotations

import copy
from typing import Any

BASE: dict[str, Any] = {
    "engine": {
        "mode": "aggregated",
        "model": "Qwen/Qwen3-32B-FP8",
        "hardware": "h200_sxm",
        "backend": "vllm",
        "backend_version": "0.24.0",
        "context_length": 4096,
        "workers": {"aggregated": {
            "parallelism": {"preset": "default"},
            "scheduler": {"max_batched_tokens": 4096, "max_sequences": {"choices": [4, 16]}},
            "kv_cache": {"block_size": 16, "capacity": {"type": "fixed", "blocks": 2000}},
            "timing": {"type": "fixed", "prefill_ms": 30, "decode_ms": 12},
        }},
    },
    "traffic": {"source": {"type": "synthetic", "input_tokens": 512, "output_tokens": 32},
                "load": {"type": "concurrency", "concurrency": 8}, "stop": {"requests": 24}},
    "evaluation": {"sla": {"ttft_ms": 400, "itl_ms": 20}},
    "optimization": {"target": "throughput_per_gpu", "constraints": {"max_candidate_gpus": 4},
                     "sla_attainment": None},  # the search's mechanics; the gate has tests of its own
    "optimizer": {"algorithm": "grid", "max_trials": 40, "parallelism": 2, "seed": 3},
}

DISAGG_WORKER = {"parallelism": {"preset": "default"},
                 "scheduler": {"max_batched_tokens": 4096, "max_sequences": 8},
                 "kv_cache": {"block_size": 16, "capacity": {"type": "fixed", "blocks": 2000}},
                 "timing": {"type": "fixed", "prefill_ms": 30, "decode_ms": 12}}


def config(base: dict[str, Any] | None = None, **changes: Any) -> dict[str, Any]:
    """`base` (default BASE) with dotted-path changes; None deletes a key."""
    data = copy.deepcopy(base if base is not None else BASE)
    for path, value in changes.items():
        node = data
        keys = path.split(".")
        for key in keys[:-1]:
            node = node.setdefault(key, {})
        if value is None:
            node.pop(keys[-1], None)
        else:
            node[keys[-1]] = copy.deepcopy(value)
    return data


def disaggregated(**changes: Any) -> dict[str, Any]:
    """BASE as a disaggregated deployment (one prefill and one decode pool), with changes."""
    data = config(**{"engine.mode": "disaggregated",
                     "engine.workers": {"prefill": DISAGG_WORKER, "decode": DISAGG_WORKER}})
    return config(data, **changes)


def without_timing_fields(ledger: dict[str, Any]) -> dict[str, Any]:
    """A ledger minus its wall-clock fields (what may differ between identical searches)."""
    out = copy.deepcopy(ledger)
    out.pop("wall_seconds", None)
    out.pop("screen_seconds", None)
    out.pop("workers", None)  # resident memory of the worker processes
    for entry in out["candidates"]:
        entry.pop("eval_seconds", None)
    return out
