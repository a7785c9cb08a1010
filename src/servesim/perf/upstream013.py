"""Upstream AISimulate 0.13's AIC decode steps (`compat: upstream-0.13`): one token less of
context, and the per-head Q/K RMSNorm.

0.13 builds the same AIC operations as 0.1.0.dev2 and times them the same, except that it asks
for a decode step at the mean context of its sequences without the token the step adds (one
less than 0.1.0.dev2), and that for the architectures whose attention normalises Q and K per head (Qwen3, Qwen3-MoE, MiniMax-M2) its
`generation_attention` op adds the norms' latency to every decode step; its energy stays the
op's measured energy. Measured on 0.13 as a black box (docs/timing.md): the addition is the
same for every batch and context, per layer 26.4 µs plus 1408 bytes per attention head on the
GPU (query heads / TP + KV heads / TP) at the GPU's peak memory bandwidth — Qwen3-0.6B to -32B,
TP 1 and 2, H100, H200 and B200, vLLM, SGLang and TensorRT-LLM; prefill passes are untouched.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from servesim.engine.pass_time import TimingModel, decode_durations
from servesim.perf.timing import quantize_ms

QK_NORM_ARCHITECTURES = frozenset({"Qwen3ForCausalLM", "Qwen3MoeForCausalLM", "MiniMaxM2ForCausalLM"})
"""The architectures 0.13 gives per-head Q/K normalisation."""
LAYER_MS = 0.0264
"""The norms' fixed latency per layer and decode step (ms)."""
BYTES_PER_HEAD = 1408.0
"""Bytes per attention head the norms' latency grows by, at peak memory bandwidth."""


def qk_norm_ms(architecture: str, layers: int, heads: int, kv_heads: int, tp: int, mem_bw: float) -> float:
    """What 0.13 adds to one decode step of a model (0 for an architecture without Q/K norms);
    `mem_bw` in bytes/s."""
    if architecture not in QK_NORM_ARCHITECTURES:
        return 0.0
    per_gpu = heads // tp + max(1, kv_heads // tp)
    return layers * (LAYER_MS + per_gpu * BYTES_PER_HEAD / mem_bw * 1000.0)


class Upstream013Decode:
    """An AIC timing model asked 0.13's way: decode steps at one token less of mean context
    and `extra_ms` longer (Q/K norms); every other answer unchanged."""

    def __init__(self, timing: TimingModel, extra_ms: float) -> None:
        self._timing = timing
        self.extra_ms = extra_ms

    def __getattr__(self, name: str) -> Any:
        return getattr(self._timing, name)

    def prefill(self, batch: int, mean_isl: int, mean_prefix: int) -> float:
        return self._timing.prefill(batch, mean_isl, mean_prefix)

    def decode(self, batch: int, active_kv_tokens: int, mean_ctx: int, total_kv_tokens: int) -> float:
        ms = self._timing.decode(batch, max(0, active_kv_tokens - batch), max(0, mean_ctx - 1), total_kv_tokens)
        return quantize_ms(ms + self.extra_ms) if self.extra_ms else ms

    def decode_series(self, batch: int, active: range, total_kv_tokens: int) -> Sequence[float]:
        """`decode` at each active-token count of `active`."""
        if not active or active.start < batch:
            return [self.decode(batch, a, a // batch, total_kv_tokens) for a in active]
        shifted = range(active.start - batch, active.stop - batch, active.step)
        series = decode_durations(self._timing, batch, shifted, total_kv_tokens)
        extra = self.extra_ms
        return [quantize_ms(ms + extra) for ms in series] if extra else series
