"""A run returns its memory when it ends: no reference cycle keeps its objects alive until a
full garbage collection (SGLang's radix tree, the fleet's worker factory)."""

from __future__ import annotations

import copy
import gc

import pytest

from servesim.api import simulate
from servesim.config import parse_config

BASE = {
    "engine": {"model": "Qwen/Qwen3-32B-FP8", "hardware": "h200_sxm", "backend": "sglang", "context_length": 32768,
               "workers": {"aggregated": {"parallelism": {"replicas": 2, "tensor": 1},
                                          "scheduler": {"max_batched_tokens": 8192, "max_sequences": 256},
                                          "kv_cache": {"block_size": 1}}}},
    "traffic": {"source": {"type": "synthetic", "input_tokens": 1024, "output_tokens": 64},
                "load": {"type": "poisson", "requests_per_second": 8, "seed": 1}, "stop": {"requests": 80}},
    "evaluation": {"sla": {"ttft_ms": 500, "itl_ms": 50}},
}


def _cyclic_garbage_after(config: dict) -> list[str]:
    """Type names of servesim objects that only the cyclic collector would free after one run."""
    simulate(parse_config(copy.deepcopy(config)))  # warm caches (timing, modules)
    gc.collect()
    flags = gc.get_debug()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        simulate(parse_config(copy.deepcopy(config)))
        gc.collect()
        found = [type(o).__module__ + "." + type(o).__qualname__ for o in gc.garbage]
    finally:
        gc.set_debug(flags)
        gc.garbage.clear()
    return [name for name in found if name.startswith("servesim.")]


@pytest.mark.parametrize("backend,block", [("sglang", 1), ("vllm", 64)])
@pytest.mark.parametrize("mode", ["aggregated", "disaggregated"])
def test_a_run_leaves_no_cycles(backend: str, block: int, mode: str) -> None:
    config = copy.deepcopy(BASE)
    engine = config["engine"]
    engine["backend"] = backend
    worker = engine["workers"].pop("aggregated")
    worker["kv_cache"]["block_size"] = block
    if mode == "disaggregated":
        engine["mode"] = "disaggregated"
        engine["workers"] = {"prefill": copy.deepcopy(worker), "decode": copy.deepcopy(worker)}
    else:
        engine["workers"] = {"aggregated": worker}
    assert _cyclic_garbage_after(config) == []


def test_kv_router_run_leaves_no_cycles() -> None:
    assert _cyclic_garbage_after({**BASE, "router": {"policy": "kv_router"}}) == []


def test_caller_gc_settings_untouched() -> None:
    before = (gc.isenabled(), gc.get_threshold(), gc.get_debug())
    simulate(parse_config(copy.deepcopy(BASE)))
    assert (gc.isenabled(), gc.get_threshold(), gc.get_debug()) == before


@pytest.mark.slow
def test_five_in_process_sglang_runs_end_within_100_mb_of_the_first() -> None:
    """Issue 29's bound, as a caller's loop would see it (no explicit gc.collect)."""
    from servesim.search.executors import resident_mb

    config = copy.deepcopy(BASE)
    config["traffic"]["stop"]["requests"] = 3000
    config["traffic"]["load"]["requests_per_second"] = 16
    after = []
    for _ in range(5):
        report = simulate(parse_config(copy.deepcopy(config)))
        assert report.summary["completed_requests"] == 3000
        del report
        after.append(resident_mb())
    assert after[-1] - after[0] < 100, f"resident MB after each run: {after}"
