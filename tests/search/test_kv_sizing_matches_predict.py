"""recommend sizes a candidate's KV pool exactly as `predict` sizes the same config: SGLang by its
static memory fraction by default, by the reference's rule under `compat: reference`."""

from __future__ import annotations

import pytest

from servesim.build import lower
from servesim.config import parse_config
from servesim.search import facts


def _config(backend: str, compat: str | None):
    block = 64 if backend == "vllm" else 1
    mapping = {
        "engine": {"model": "Qwen/Qwen3-32B-FP8", "hardware": "h200_sxm", "backend": backend,
                   "context_length": 32768,
                   "workers": {"aggregated": {"parallelism": {"replicas": 1, "tensor": 1},
                                              "scheduler": {"max_batched_tokens": 8192, "max_sequences": 256},
                                              "kv_cache": {"block_size": block}}}},
        "traffic": {"source": {"type": "synthetic", "input_tokens": 128, "output_tokens": 8},
                    "load": {"type": "poisson", "requests_per_second": 1, "seed": 1}, "stop": {"requests": 1}},
    }
    if compat is not None:
        mapping["compat"] = compat
    return parse_config(mapping)


@pytest.mark.parametrize("backend", ["sglang", "vllm"])
@pytest.mark.parametrize("compat", [None, "reference"])
def test_recommend_and_predict_size_the_same_pool(backend, compat):
    config = _config(backend, compat)
    rank = lower(config).pools[0].rank_config
    assert facts.kv_tokens_per_rank(config, "aggregated") == rank.num_blocks * rank.block_size


def test_sglang_default_and_reference_pools_differ():
    """The two SGLang rules give different pools here, so the test above tells them apart."""
    tokens = {compat: facts.kv_tokens_per_rank(_config("sglang", compat), "aggregated") for compat in (None, "reference")}
    assert tokens[None] != tokens["reference"]
