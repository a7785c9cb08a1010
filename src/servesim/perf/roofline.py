"""`timing.type: roofline` (servesim extension) — analytic pass times from an HF config and GPU peaks.

For models or GPUs the AIConfigurator database lacks. Each operation of a pass costs
``max(FLOPs / (peak x eta_compute), bytes / (bandwidth x eta_memory)) + launch`` (a GEMM at least
`gemm_floor_us`), summed over the layers (docs/timing.md, 'Roofline against the database'):

* per layer, on T tokens: the q/k/v, o, gate+up and down GEMMs (weights in the checkpoint's
  format, FP8/FP4 peaks where the GPU has them), or for a mixture of experts a 16-bit router
  plus the experts the T x top-k routed tokens touch (expected distinct experts of the rank);
  attention (prefill: causal over the chunk with its cached prefix; decode: memory-bound reads
  of every request's KV); norms, residuals and the gated activation as memory traffic; two
  all-reduces over the GPU interconnect when tensor-parallel (an all-to-all pair for expert
  parallelism);
* once per pass: the embedding gather and the 16-bit LM head for one row per sequence, plus
  `pass_overhead_ms`.

The two questions of the timing protocol are answered like the reference's AIC composition:
``prefill(bs, isl, prefix)`` is one pass of bs requests each computing ``isl - prefix`` new
tokens after ``prefix`` cached ones; ``decode(bs, active_kv, ...)`` is one decode step of bs
requests reading ``active_kv`` KV tokens in total. Results are memoised and quantised to whole
nanoseconds. Accuracy against the database: docs/timing.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from servesim.perf.hardware import MIB, GpuSpec
from servesim.perf.models import ModelSpec
from servesim.perf.timing import quantize_ms


@dataclass(frozen=True)
class RooflineParams:
    """Efficiency knobs of the roofline (defaults: the analytic model's uncalibrated values; a GPU
    whose efficiencies were measured gets those, `for_gpu`)."""

    gemm_efficiency: float = 0.7
    attention_efficiency: float = 0.5
    memory_efficiency: float = 0.8
    launch_us: float = 3.0
    gemm_floor_us: float = 0.0
    pass_overhead_ms: float = 0.0
    collective_latency_us: float = 10.0
    decode_attention_latency_us: float = 0.0
    """Per-layer latency of a decode attention call beyond its KV reads, reached once the
    layer's KV outgrows `l2_bytes` (before that in proportion to it)."""
    decode_attention_efficiency: float | None = None
    """Fraction of the bandwidth decode attention reads KV at (None: `memory_efficiency`)."""
    l2_bytes: float = 0.0

    @classmethod
    def for_gpu(cls, gpu: GpuSpec, **given: float) -> RooflineParams:
        """The parameters for `gpu`: `given` ones, else the GPU's measured efficiencies
        (`GpuSpec.efficiency`, from servesim's GPU table), else the generic defaults."""
        measured = {f"{kind}_efficiency": value for kind, value in gpu.efficiency.items()}
        return cls(**{**measured, **given})


class RooflineTiming:
    """Analytic step times for one worker role (per scheduler rank)."""

    def __init__(self, model: ModelSpec, gpu: GpuSpec, *, tp: int = 1, pp: int = 1, attention_dp: int = 1,
                 moe_tp: int = 1, moe_ep: int = 1, params: RooflineParams | None = None) -> None:
        self.model, self.gpu = model, gpu
        self.tp, self.pp, self.attention_dp, self.moe_tp, self.moe_ep = tp, pp, attention_dp, moe_tp, moe_ep
        self.params = p = params or RooflineParams.for_gpu(gpu)
        self.label = f"roofline {model.name} on {gpu.name}"
        m = model
        self._bw = gpu.mem_bw * p.memory_efficiency
        self._launch = p.launch_us * 1e-6
        self._floor = p.gemm_floor_us * 1e-6
        self._bf16 = gpu.bf16_flops * p.gemm_efficiency
        wpeak = gpu.bf16_flops
        if m.quant in ("fp8", "fp8_block") and gpu.fp8_flops:
            wpeak = gpu.fp8_flops
        elif m.quant == "nvfp4":
            wpeak = gpu.fp4_flops or gpu.fp8_flops or gpu.bf16_flops
        self._wpeak = wpeak * p.gemm_efficiency
        self._attn_peak = gpu.bf16_flops * p.attention_efficiency
        self._wbytes = m.weight_bytes
        h, hd = m.hidden_size, m.head_dim
        self._q = m.num_heads // tp * hd
        self._kv = m.kv_heads_per_rank(tp) * hd
        self._kv_token_bytes = 2 * self._kv * m.kv_cache_bytes  # one layer, K and V
        kv_efficiency = p.decode_attention_efficiency
        self._kv_bw = self._bw if kv_efficiency is None else gpu.mem_bw * kv_efficiency
        self._kv_latency = p.decode_attention_latency_us * 1e-6
        self._inter = m.intermediate_size // tp
        self._moe_inter = m.moe_intermediate_size // max(moe_tp, 1)
        self._local_experts = m.num_experts // max(moe_ep, 1) if m.is_moe else 0
        self._layers = m.num_layers
        self._h = h
        self._prefill_memo: dict[tuple[int, int, int], float] = {}
        self._decode_memo: dict[tuple[int, int], float] = {}
        self._measured: RooflineTiming | None = None

    # -- operations (seconds) -------------------------------------------------------------------

    def _gemm(self, m: int, n: int, k: int, weight_bytes: float, peak: float) -> float:
        flops = 2.0 * m * n * k
        traffic = n * k * weight_bytes + 2.0 * m * (n + k)
        return max(flops / peak, traffic / self._bw, self._floor) + self._launch

    def _memory(self, nbytes: float, kernels: int = 1) -> float:
        return nbytes / self._bw + kernels * self._launch

    def _collective(self, nbytes: float, ranks: int) -> float:
        if ranks <= 1:
            return 0.0
        wire = 2.0 * (ranks - 1) / ranks * nbytes / self.gpu.interconnect_bw
        return self.params.collective_latency_us * 1e-6 + wire

    def _layer_dense_part(self, tokens: int) -> float:
        """Per-layer GEMMs, MLP/MoE, elementwise and collectives for `tokens` tokens."""
        h = self._h
        t = self._gemm(tokens, self._q + 2 * self._kv, h, self._wbytes, self._wpeak)
        t += self._gemm(tokens, h, self._q, self._wbytes, self._wpeak)
        m = self.model
        if m.is_moe:
            t += self._gemm(tokens, m.num_experts, h, 2.0, self._bf16)
            pairs = tokens * m.experts_per_token * self.attention_dp / max(self.moe_ep, 1)
            touched = expected_distinct_experts(self._local_experts, pairs)
            inter = self._moe_inter
            flops = 2.0 * pairs * 3 * h * inter
            traffic = touched * 3 * h * inter * self._wbytes + 2.0 * pairs * (3 * inter + 2 * h)
            t += max(flops / self._wpeak, traffic / self._bw, self._floor) + 2 * self._launch
            t += self._memory(tokens * (3 * inter + 2 * h) * 2.0)
            if self.moe_ep > 1:
                t += 2 * self._collective(pairs * h * 2.0, self.moe_ep)
        else:
            t += self._gemm(tokens, 2 * self._inter, h, self._wbytes, self._wpeak)
            t += self._gemm(tokens, h, self._inter, self._wbytes, self._wpeak)
            t += self._memory(tokens * 3 * self._inter * 2.0)
        t += self._memory(tokens * 8 * h * 2.0, kernels=3)
        if self.tp > 1:
            t += 2 * self._collective(tokens * h * 2.0, self.tp)
        return t

    def _per_pass(self, tokens: int, sequences: int) -> float:
        m = self.model
        t = self._memory(tokens * self._h * 2.0)
        t += self._gemm(sequences, m.vocab_size // self.tp, self._h, 2.0, self._bf16)
        if self.pp > 1:
            t += (self.pp - 1) * (self.params.collective_latency_us * 1e-6
                                  + tokens * self._h * 2.0 / self.gpu.interconnect_bw)
        return t + self.params.pass_overhead_ms * 1e-3

    # -- the timing protocol ---------------------------------------------------------------------

    def prefill_seconds(self, batch: int, mean_isl: int, mean_prefix: int) -> float:
        new = max(mean_isl - mean_prefix, 0)
        tokens = batch * new
        if tokens == 0:
            return 0.0
        heads_dim = self._q
        flops = 4.0 * heads_dim * batch * (new * mean_prefix + new * new / 2.0)
        traffic = batch * ((mean_prefix + new) * self._kv_token_bytes + 2.0 * new * heads_dim * 2.0)
        attention = max(flops / self._attn_peak, traffic / self._bw) + self._launch
        per_layer = self._layer_dense_part(tokens) + attention
        return self._layers * per_layer + self._per_pass(tokens, batch)

    def _decode_attention(self, batch: int, active_kv_tokens: int) -> float:
        """One layer's decode attention: memory-bound reads of the batch's KV (plus the measured
        kernel latency, when the parameters carry one)."""
        heads_dim = self._q
        flops = 4.0 * heads_dim * active_kv_tokens
        traffic = active_kv_tokens * self._kv_token_bytes + 2.0 * batch * heads_dim * 2.0
        seconds = max(flops / self._attn_peak, traffic / self._kv_bw) + self._launch
        if self._kv_latency:
            l2 = self.params.l2_bytes
            seconds += self._kv_latency * (min(1.0, traffic / l2) if l2 > 0 else 1.0)
        return seconds

    def with_measured_decode_attention(self) -> RooflineTiming:
        """This timing with vLLM's decode attention as measured on the GPU
        (`GpuSpec.decode_attention`; `timing.mixed_pass: fused`), or itself when not measured."""
        measured = self.gpu.decode_attention
        if not measured:
            return self
        if self._measured is not None:
            return self._measured
        params = replace(self.params, decode_attention_latency_us=measured["latency_us"],
                         decode_attention_efficiency=measured["efficiency"], l2_bytes=measured["l2_mib"] * MIB)
        self._measured = type(self)(self.model, self.gpu, tp=self.tp, pp=self.pp, attention_dp=self.attention_dp,
                                    moe_tp=self.moe_tp, moe_ep=self.moe_ep, params=params)
        return self._measured

    def decode_seconds(self, batch: int, active_kv_tokens: int) -> float:
        per_layer = self._layer_dense_part(batch) + self._decode_attention(batch, active_kv_tokens)
        return self._layers * per_layer + self._per_pass(batch, batch)

    def prefill(self, batch: int, mean_isl: int, mean_prefix: int) -> float:
        key = (batch, mean_isl, mean_prefix)
        ms = self._prefill_memo.get(key)
        if ms is None:
            ms = self._prefill_memo[key] = quantize_ms(1000.0 * self.prefill_seconds(batch, mean_isl, mean_prefix))
        return ms

    def decode(self, batch: int, active_kv_tokens: int, mean_ctx: int, total_kv_tokens: int) -> float:
        key = (batch, active_kv_tokens)
        ms = self._decode_memo.get(key)
        if ms is None:
            ms = self._decode_memo[key] = quantize_ms(1000.0 * self.decode_seconds(batch, active_kv_tokens))
        return ms

    def mixed_seconds(self, batch: int, mean_isl: int, mean_prefix: int, decode_batch: int,
                      active_kv_tokens: int, decode_attention_factor: float = 1.0) -> float:
        """One forward pass over a prefill and `decode_batch` decode tokens (`mixed_pass: fused`).

        The per-layer dense work and the per-pass work are done once for all the pass's tokens
        (one read of the weights); each phase keeps its own attention, the decode tokens' costing
        `decode_attention_factor` times what it costs in a decode-only pass.
        """
        prefill_tokens = batch * max(mean_isl - mean_prefix, 0)
        tokens = prefill_tokens + decode_batch
        dense = self._layer_dense_part
        shared = self._layers * (dense(prefill_tokens) + dense(decode_batch) - dense(tokens))
        once = (self._per_pass(prefill_tokens, batch) + self._per_pass(decode_batch, decode_batch)
                - self._per_pass(tokens, batch + decode_batch))
        separate = self.prefill_seconds(batch, mean_isl, mean_prefix) + self.decode_seconds(decode_batch, active_kv_tokens)
        excess = (decode_attention_factor - 1.0) * self._layers * self._decode_attention(decode_batch, active_kv_tokens)
        return separate - shared - once + excess


def expected_distinct_experts(local_experts: int, pairs: float) -> float:
    """Expected distinct experts hit by `pairs` uniformly routed token-expert pairs."""
    if local_experts <= 0:
        return 0.0
    return local_experts * (1.0 - math.pow(1.0 - 1.0 / local_experts, pairs))
