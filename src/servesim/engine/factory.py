"""Building a scheduler rank for a backend."""

from __future__ import annotations

from servesim.engine.interface import HandoffRank
from servesim.engine.pass_time import TimingModel
from servesim.engine.vllm.policy import VllmPolicy
from servesim.engine.rank import RankConfig
from servesim.engine.vllm.trtllm import TrtllmPolicy
from servesim.engine.vllm.core import VllmRank


def make_rank(config: RankConfig, timing: TimingModel, *, lazy_decode: bool = True,
              sampler_seed: int = 0) -> HandoffRank:
    """A rank running the scheduling core of `config.backend`: SGLang's, or vLLM's with vLLM's
    or TensorRT-LLM's admission policy.

    `lazy_decode=False` turns off the decode cohort (the plain algorithm); `sampler_seed` seeds
    the rank's speculative-decoding acceptance sampler.
    """
    if config.backend == "sglang":
        from servesim.engine.sglang.core import SglangRank  # imported when used: start-up time

        return SglangRank(config, timing, sampler_seed=sampler_seed)
    policy = TrtllmPolicy(config) if config.backend == "trtllm" else VllmPolicy(config)
    return VllmRank(config, timing, policy=policy, lazy_decode=lazy_decode, sampler_seed=sampler_seed)
