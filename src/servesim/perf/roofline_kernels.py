"""The roofline of servesim's defaults (``timing.mixed_pass: fused``): what the kernels of
today's MoE checkpoints store and read, which the plain roofline (``sum`` mode, the roofline
as it was) leaves out. Measured against InferenceX's points in docs/accuracy.md.

* **MXFP4 experts** (gpt-oss): the expert weights are 4-bit with one 8-bit scale per 32 values,
  4.25 bits per parameter; attention, router, embedding and LM head stay 16-bit (the checkpoint's
  ``modules_to_not_convert``). The expert GEMMs run at the FP8 peak on GPUs with FP4 units
  (MXFP4 × MXFP8 kernels), else at the 16-bit peak (weight-only kernels).
* **Multi-head latent attention** (DeepSeek): the projections as they are (q down/up, kv down/up,
  output), prefill attention over the real head widths (QK ``nope + rope``, V ``v_head_dim``),
  and a decode step reading one compressed latent of ``kv_lora_rank + rope`` values per token
  and layer, the same on every tensor-parallel rank.
* **Shared experts and dense layers**: the ``n_shared_experts`` expert every token passes
  through (tensor-parallel), and the first ``first_k_dense_replace`` layers' dense MLP.
* **A per-step floor**: a tensor-parallel decode step on few requests costs at least its
  collectives' latencies: each of a layer's all-reduces costs `COLLECTIVE_FLOOR_US` whatever its
  size (kernels keep the roofline's 3 µs launch: a higher kernel floor made the single-GPU RTX
  4090 drain steps of the open vLLM runs too slow).
"""

from __future__ import annotations

from dataclasses import replace

from servesim.perf.hardware import GpuSpec
from servesim.perf.models import ModelSpec
from servesim.perf.roofline import RooflineParams, RooflineTiming, expected_distinct_experts

MXFP4_BYTES = 4.25 / 8
"""Bytes per MXFP4 parameter: 4 bits plus one E8M0 scale per 32 values."""
COLLECTIVE_FLOOR_US = 16.0
"""Latency of one small all-reduce across an NVLink node (custom all-reduce kernels), microseconds."""


class KernelAwareRoofline(RooflineTiming):
    """`RooflineTiming` that knows MXFP4 experts, MLA, shared experts, dense layers and the
    per-step floor (module docstring)."""

    FIXES = frozenset({"mxfp4", "mla", "moe", "floor"})
    """The fixes applied (all; docs/accuracy.md measures each one alone by narrowing this)."""

    def __init__(self, model: ModelSpec, gpu: GpuSpec, *, tp: int = 1, pp: int = 1, attention_dp: int = 1,
                 moe_tp: int = 1, moe_ep: int = 1, params: RooflineParams | None = None) -> None:
        params = params or RooflineParams.for_gpu(gpu)
        if "floor" in self.FIXES:
            params = replace(params, collective_latency_us=max(params.collective_latency_us, COLLECTIVE_FLOOR_US))
        super().__init__(model, gpu, tp=tp, pp=pp, attention_dp=attention_dp, moe_tp=moe_tp, moe_ep=moe_ep,
                         params=params)
        self.label = f"roofline {model.name} on {gpu.name} (kernel-aware)"
        cfg = {**model.config, **(model.config.get("text_config") or {})}
        p = self.params
        self._expert_bytes, self._expert_peak = self._wbytes, self._wpeak
        if model.quant == "mxfp4" and "mxfp4" in self.FIXES:
            self._wbytes, self._wpeak = 2.0, gpu.bf16_flops * p.gemm_efficiency
            self._expert_bytes = MXFP4_BYTES
            self._expert_peak = ((gpu.fp8_flops if gpu.fp4_flops and gpu.fp8_flops else None) or gpu.bf16_flops) \
                * p.gemm_efficiency
        moe = model.is_moe and "moe" in self.FIXES
        self._shared = int(cfg.get("n_shared_experts") or 0) * model.moe_intermediate_size // tp if moe else 0
        self._dense_layers = min(int(cfg.get("first_k_dense_replace") or 0), model.num_layers) if moe else 0
        self._mla = model.mla and "mla" in self.FIXES
        if self._mla:
            heads = model.num_heads // tp
            self._dqk = int(cfg.get("qk_nope_head_dim", 128)) + int(cfg.get("qk_rope_head_dim", 64))
            self._dv = int(cfg.get("v_head_dim", 128))
            self._q_lora = int(cfg.get("q_lora_rank") or 0)
            self._kv_lora = int(cfg.get("kv_lora_rank", 512))
            self._rope = int(cfg.get("qk_rope_head_dim", 64))
            self._heads = heads
            self._q = heads * (self._dqk + self._dv) // 2  # attention width: 4·q = 2·heads·(dqk + dv)
            self._kv_token_bytes = (self._kv_lora + self._rope) * model.kv_cache_bytes

    def _attention_projections(self, tokens: int) -> float:
        h = self._h
        if not self._mla:
            t = self._gemm(tokens, self._q + 2 * self._kv, h, self._wbytes, self._wpeak)
            return t + self._gemm(tokens, h, self._q, self._wbytes, self._wpeak)
        t = 0.0
        if self._q_lora:
            t += self._gemm(tokens, self._q_lora, h, self._wbytes, self._wpeak)
            t += self._gemm(tokens, self._heads * self._dqk, self._q_lora, self._wbytes, self._wpeak)
        else:
            t += self._gemm(tokens, self._heads * self._dqk, h, self._wbytes, self._wpeak)
        t += self._gemm(tokens, self._kv_lora + self._rope, h, self._wbytes, self._wpeak)
        t += self._gemm(tokens, self._heads * (self._dqk - self._rope + self._dv), self._kv_lora,
                        self._wbytes, self._wpeak)
        return t + self._gemm(tokens, h, self._heads * self._dv, self._wbytes, self._wpeak)

    def _experts(self, tokens: int) -> float:
        m, h, inter = self.model, self._h, self._moe_inter
        t = self._gemm(tokens, m.num_experts, h, 2.0, self._bf16)
        pairs = tokens * m.experts_per_token * self.attention_dp / max(self.moe_ep, 1)
        touched = expected_distinct_experts(self._local_experts, pairs)
        flops = 2.0 * pairs * 3 * h * inter
        traffic = touched * 3 * h * inter * self._expert_bytes + 2.0 * pairs * (3 * inter + 2 * h)
        t += max(flops / self._expert_peak, traffic / self._bw, self._floor) + 2 * self._launch
        t += self._memory(tokens * (3 * inter + 2 * h) * 2.0)
        if self._shared:
            t += self._gemm(tokens, 2 * self._shared, h, self._wbytes, self._wpeak)
            t += self._gemm(tokens, h, self._shared, self._wbytes, self._wpeak)
        if self.moe_ep > 1:
            t += 2 * self._collective(pairs * h * 2.0, self.moe_ep)
        return t

    def _dense_mlp(self, tokens: int) -> float:
        h, inter = self._h, self._inter
        t = self._gemm(tokens, 2 * inter, h, self._wbytes, self._wpeak)
        t += self._gemm(tokens, h, inter, self._wbytes, self._wpeak)
        return t + self._memory(tokens * 3 * inter * 2.0)

    def _layer_dense_part(self, tokens: int) -> float:
        """The mean over the layers of the per-layer GEMMs, MLP/MoE, elementwise and collectives."""
        t = self._attention_projections(tokens)
        if self.model.is_moe:
            dense = self._dense_layers
            t += ((self._layers - dense) * self._experts(tokens) + dense * self._dense_mlp(tokens)) / self._layers
        else:
            t += self._dense_mlp(tokens)
        t += self._memory(tokens * 8 * self._h * 2.0, kernels=3)
        if self.tp > 1:
            t += 2 * self._collective(tokens * self._h * 2.0, self.tp)
        return t


def kernel_aware(timing: RooflineTiming) -> RooflineTiming:
    """`timing` as `KernelAwareRoofline` (its model, GPU, split and parameters)."""
    if isinstance(timing, KernelAwareRoofline):
        return timing
    return KernelAwareRoofline(timing.model, timing.gpu, tp=timing.tp, pp=timing.pp, attention_dp=timing.attention_dp,
                               moe_tp=timing.moe_tp, moe_ep=timing.moe_ep, params=timing.params)
