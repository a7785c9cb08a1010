"""`timing.mixed_pass: fused` — a pass holding prompt chunks and decode tokens is one forward pass.

The reference times such a vLLM pass as ``prefill(...) + decode(...)``: two forward passes, each
reading every weight and paying every per-pass cost. vLLM runs one forward over all scheduled
tokens. A fused model answers a third question,

    mixed(batch, mean_isl, mean_prefix, n, active_kv, mean_ctx, total_kv) -> ms

for a pass whose prefill part is ``prefill(batch, mean_isl, mean_prefix)`` and whose decode part
is ``decode(n, active_kv, mean_ctx, total_kv)``:

* AIConfigurator data — ``P + [S(T + n) − S(T)] + (D − G(n)) + (k − 1)·A(n)`` with P and D the
  two phases as the database gives them, T = batch·(isl − prefix) the prompt tokens, S(t) the
  non-attention work of the context operations (GEMMs, norms, activation, communication; no
  logits) on t tokens, G(n) the non-attention work of the generation operations on n tokens
  (logits excluded) and A(n) = D − G(n) − logits(n) the decode attention. The GEMMs and
  collectives run once for all T + n tokens, the prompt chunks keep their attention and their
  logits rows, the decode tokens theirs;
* roofline — one pass of the analytic model over T + n tokens: the per-layer dense work and the
  per-pass work once, each phase's attention (`RooflineTiming.mixed_seconds`).

``k`` is the cost of decode attention inside a mixed pass relative to a decode-only pass.
On GPUs where vLLM's attention backend is FlashAttention-2 (Ampere, Ada and workstation
Blackwell: `FA2_GPUS`), a mixed batch's attention is one variable-length prefill kernel, which
reads each KV head once per query head of its group; a decode-only batch packs the group into
one read. In vLLM 0.19's own operator measurements on such a GPU (LLMServingSim's profiles,
docs/timing.md) about a quarter of the repeated reads reach memory, so
``k = 1 + 0.25·(G − 1)`` with G the query heads per KV head (1 for multi-head attention, 4 for
Llama-3-8B, 8 for Qwen3-32B). Elsewhere k = 1: FlashAttention-3 on Hopper packs the group for
paged KV in mixed batches too, FlashInfer (datacenter Blackwell) and TensorRT-LLM run the two
phases' attention as separate kernels.

The result is clamped to [max(P, D), P + D·k] and rounded to whole nanoseconds.
"""

from __future__ import annotations

from typing import Any

from servesim.engine.pass_time import MixedPassTiming, TimingModel
from servesim.perf.timing import quantize_ms

FA2_GPUS = frozenset({"a100_sxm", "a100_pcie", "a100_40gb", "a10", "a30", "l4", "l40", "l40s", "rtx_a6000",
                      "rtx_6000_ada", "rtx_4090", "rtx_5090", "rtx_pro_6000_server"})
"""GPUs on which vLLM's default attention backend is FlashAttention-2."""

REREAD_SHARE = 0.25
"""Share of a mixed pass's repeated per-query-head KV reads that reach memory (docs/timing.md)."""


def mixed_attention_factor(query_heads_per_kv_head: float) -> float:
    """k: decode attention in a vLLM mixed pass relative to a decode-only pass."""
    return 1.0 + REREAD_SHARE * max(query_heads_per_kv_head - 1.0, 0.0)


def clamp_fused(fused: float, prefill_ms: float, decode_ms: float, factor: float) -> float:
    """`fused` within [max(prefill, decode), prefill + factor·decode], in whole nanoseconds."""
    return quantize_ms(min(prefill_ms + factor * decode_ms, max(fused, prefill_ms, decode_ms)))


SHARED_KEY = -1
"""Batch slot of a ``(SHARED_KEY, tokens, 0)`` prefill key in the timing cache: S(tokens)."""
GENERATION_KEY, LOGITS_KEY = -1, -2
"""Batch slots of ``(slot, n)`` decode keys in the timing cache: G(n) and logits(n)."""


class _Fused:
    """A timing whose mixed passes are fused: prefill and decode passes as `timing`'s."""

    def __init__(self, timing: Any, attention_factor: float = 1.0) -> None:
        self._timing = timing
        self._factor = attention_factor
        self.prefill = timing.prefill
        self.decode = timing.decode
        _series_of(self, timing)
        self.label = f"{timing.label}, fused mixed passes"


class FusedAic(_Fused):
    """AIConfigurator timing whose mixed passes run the shared operations once.

    The operation sums S(t), G(n) and logits(n) are kept with the engine's raw answers in its
    timing-cache memo (`servesim.perf.timingcache`), under batch slots no real question uses
    (negative), so a run whose questions were all asked before compiles no engine."""

    def __init__(self, timing: Any, attention_factor: float = 1.0) -> None:
        super().__init__(timing, attention_factor)
        memo = getattr(timing, "_memo", None)
        self._memo = memo
        self._raw_prefill: dict[tuple[int, int, int], float] = memo.prefill if memo is not None else {}
        self._raw_decode: dict[tuple[int, int], float] = memo.decode if memo is not None else {}
        self._ops: tuple[list[int], list[int], list[int]] | None = None
        self._shared: dict[int, float] = {0: 0.0}
        self._generation: dict[int, tuple[float, float]] = {}

    def _op_indices(self) -> tuple[list[int], list[int], list[int]]:
        """(context non-attention, generation non-attention, logits) operation indices."""
        if self._ops is None:
            context, generation = self._timing.engine.run_static_per_op(1, 1, 128, 2, 0, 1.0, 1.0, "static", 32)
            names = [op[0] for op in generation]
            self._ops = (_non_attention([op[0] for op in context]), _non_attention(names),
                         [i for i, name in enumerate(names) if "logits" in name])
        return self._ops

    def _shared_ms(self, tokens: int) -> float:
        ms = self._shared.get(tokens)
        if ms is None:
            key = (SHARED_KEY, tokens, 0)
            ms = self._raw_prefill.get(key)
            if ms is None:
                ops = self._timing.engine.evaluate_context_ops(self._op_indices()[0], 1, tokens, 0)
                ms = self._raw_prefill[key] = float(sum(op[1] for op in ops))
                if self._memo is not None:
                    self._memo.fresh_prefill.append(key)
            self._shared[tokens] = ms
        return ms

    def _generation_ms(self, n: int) -> tuple[float, float]:
        """(non-attention work without logits, logits) of a decode step of n tokens."""
        found = self._generation.get(n)
        if found is None:
            rest, logits = self._raw_decode.get((GENERATION_KEY, n)), self._raw_decode.get((LOGITS_KEY, n))
            if rest is None or logits is None:
                engine = self._timing.engine
                _, generation, logits_ops = self._op_indices()
                rest = float(sum(op[1] for op in engine.evaluate_generation_ops(generation, n, 2)))
                logits = float(sum(op[1] for op in engine.evaluate_generation_ops(logits_ops, n, 2))) if logits_ops else 0.0
                self._raw_decode[(GENERATION_KEY, n)], self._raw_decode[(LOGITS_KEY, n)] = rest, logits
                if self._memo is not None:
                    self._memo.fresh_decode += [(GENERATION_KEY, n), (LOGITS_KEY, n)]
            found = self._generation[n] = (rest, logits)
        return found

    def mixed(self, batch: int, mean_isl: int, mean_prefix: int, n: int, active_kv_tokens: int,
              mean_ctx: int, total_kv_tokens: int) -> float:
        p = self.prefill(batch, mean_isl, mean_prefix)
        d = self.decode(n, active_kv_tokens, mean_ctx, total_kv_tokens)
        tokens = batch * (mean_isl - mean_prefix)
        rest, logits = self._generation_ms(n)
        attention = max(d - rest - logits, 0.0)
        fused = p + (self._shared_ms(tokens + n) - self._shared_ms(tokens)) + logits + self._factor * attention
        return clamp_fused(fused, p, d, self._factor)


def _series_of(wrapper: Any, timing: Any) -> None:
    """Give `wrapper` the `decode_series` of `timing`, when it has one: decode-only passes are
    `timing`'s own, so the whole series is asked at once (`pass_time.decode_durations`)."""
    series = getattr(timing, "decode_series", None)
    if series is not None:
        wrapper.decode_series = series


def _non_attention(names: list[str]) -> list[int]:
    """Indices of the operations that do not depend on the context length, logits excluded."""
    return [i for i, name in enumerate(names) if not name.endswith("attention") and "logits" not in name]


class FusedRoofline(_Fused):
    """Roofline timing whose mixed passes are one analytic forward pass."""

    def mixed(self, batch: int, mean_isl: int, mean_prefix: int, n: int, active_kv_tokens: int,
              mean_ctx: int, total_kv_tokens: int) -> float:
        p = self.prefill(batch, mean_isl, mean_prefix)
        d = self.decode(n, active_kv_tokens, mean_ctx, total_kv_tokens)
        seconds = self._timing.mixed_seconds(batch, mean_isl, mean_prefix, n, active_kv_tokens, self._factor)
        return clamp_fused(1000.0 * seconds, p, d, self._factor)


def fused(model: TimingModel, attention_factor: float = 1.0, vllm: bool = False) -> MixedPassTiming:
    """`model` (AIConfigurator or roofline timing) with fused mixed passes whose decode attention
    costs `attention_factor` times a decode-only pass's. With `vllm` a roofline times decode
    attention as vLLM's kernel measured on the GPU, where it was (`GpuSpec.decode_attention`).
    A roofline becomes the kernel-aware one (`servesim.perf.roofline_kernels`)."""
    from servesim.perf.roofline import RooflineTiming
    from servesim.perf.roofline_kernels import kernel_aware

    if isinstance(model, RooflineTiming):
        model = kernel_aware(model)
        return FusedRoofline(model.with_measured_decode_attention() if vllm else model, attention_factor)
    return FusedAic(model, attention_factor)
