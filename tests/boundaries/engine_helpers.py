"""Small builders of vLLM and SGLang ranks for the boundary tests (fixed timing: prefill 10 ms,
decode 5 ms)."""

from __future__ import annotations

from servesim.engine.rank import RankConfig, SglangSettings
from servesim.engine.request import EngineRequest
from servesim.engine.sglang.core import SglangRank
from servesim.engine.vllm.core import VllmRank
from servesim.perf.timing import FixedTiming
from servesim.traffic.workload import GENERATED_BASE, expand_hash_ids


def vllm_request(rid: int, length: int, output: int, values: list[int] | None = None, block: int = 16) -> EngineRequest:
    """A request whose prompt is `length` tokens of private (or the given) block values."""
    values = values if values is not None else [1000 * rid + i for i in range(-(-length // block))]
    return EngineRequest(rid, expand_hash_ids(values, block, length), length, output, GENERATED_BASE + 10_000 * rid)


def vllm_rank(lazy: bool = False, **overrides) -> VllmRank:
    config = RankConfig(**{"block_size": 16, "num_blocks": 1000, "max_batched_tokens": 8192, **overrides})
    return VllmRank(config, FixedTiming(10, 5), lazy_decode=lazy)


def sglang_request(rid: int, n: int, output: int) -> EngineRequest:
    """A request with `n` private prompt tokens."""
    return EngineRequest(rid, [(10_000_000 * (rid + 1), -n)], n, output, GENERATED_BASE + 100_000 * rid)


def sglang_rank(num_blocks: int = 1000, page: int = 1, max_sequences: int = 256, **knobs) -> SglangRank:
    config = RankConfig(block_size=page, num_blocks=num_blocks, max_sequences=max_sequences, prefix_caching=True,
                        backend="sglang", reject_unservable=True, sglang=SglangSettings(**knobs))
    return SglangRank(config, FixedTiming(10, 5))
