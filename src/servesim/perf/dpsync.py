"""`timing.dp_sync_ms` — the per-pass cost of keeping a worker's data-parallel ranks in step.

In vLLM the data-parallel ranks of a MoE model are separate engine-core processes whose forward
passes must line up (the MoE layers exchange tokens between them). Before every forward each rank
all-reduces its token count, its CUDA-graph size and mode with the others
(``coordinate_batch_across_dp`` in ``vllm/v1/worker/dp_utils.py``), over the DP group's CPU
(gloo) process group when async scheduling is on (vLLM's default, and the open runs'); every
rank then pads to the largest rank's count when CUDA graphs are in use, an idle rank runs a
dummy pass, every 32 steps a second all-reduce asks whether any rank still has requests, and a
step that changed the rank's request counts publishes them towards the DP coordinator. That is a host-side
rendezvous of two processes per step, which a TP-only deployment does not have; a dense model's
DP ranks are independent engines in vLLM (it runs them as DP = 1) and have none of it either.

servesim already models what the rendezvous decides: a DP worker's pass ends with its slowest
rank (`servesim.engine.worker`), and AIConfigurator prices a rank's MoE layers on the tokens of
all ranks (its attention-DP scaling, the padding to the largest rank). What it lacks is the time
of the rendezvous itself. `dp_synced` adds it to every pass the role's timing model answers, so a
DP worker's pass — the slowest of its ranks' passes, each paying it once — pays it once. (In
`sum` mode a mixed pass is a prefill pass plus a decode pass, and each of the two pays it.)

Default, `DEFAULT_MS` (fused mode, vLLM, a MoE model, attention-DP > 1; 0 otherwise, and always
0 in `sum` mode): the only open measurement of a DP deployment is the Qwen3-30B-A3B DP2 + EP2
run on RTX PRO 6000 GPUs (vLLM 0.19.0, LLMServingSim's bench). Its pure-decode steps in the
drain are 3.0–6.5 ms longer than the timing model in every load band from 1 to 256 running
requests, where the two dense runs on the same GPU are within −0.5…+2.3 ms. The per-step cost
that every band carries is at most its smallest band value: 3.0 ms, at 1–4 sequences (a 7.5 ms
step, where the kernel prices are least in doubt) — also the lower quartile of the 24 drain
seconds (median 4.35 ms). The rest of the excess changes with the batch and is no constant.
docs/timing.md and docs/validation.md have the numbers.
"""

from __future__ import annotations

from servesim.engine.pass_time import MixedPassTiming, TimingModel
from servesim.perf.timing import quantize_ms

DEFAULT_MS = 3.0
"""Fused-mode per-pass cost of a vLLM MoE worker's DP step synchronisation (ms)."""


def dp_synced(timing: TimingModel, sync_ms: float) -> TimingModel:
    """`timing` with `sync_ms` added to every pass (fused mixed passes too when it has them)."""
    if isinstance(timing, MixedPassTiming):
        return DpSyncedMixedTiming(timing, sync_ms)
    return DpSyncedTiming(timing, sync_ms)


class DpSyncedTiming:
    """A timing model whose every pass phase pays the DP ranks' step synchronisation."""

    def __init__(self, timing: TimingModel, sync_ms: float) -> None:
        self._timing = timing
        self._sync = sync_ms
        self.label = f"{getattr(timing, 'label', type(timing).__name__)}, DP sync {sync_ms:g} ms"

    def prefill(self, batch: int, mean_isl: int, mean_prefix: int) -> float:
        return quantize_ms(self._timing.prefill(batch, mean_isl, mean_prefix) + self._sync)

    def decode(self, batch: int, active_kv_tokens: int, mean_ctx: int, total_kv_tokens: int) -> float:
        return quantize_ms(self._timing.decode(batch, active_kv_tokens, mean_ctx, total_kv_tokens) + self._sync)


class DpSyncedMixedTiming(DpSyncedTiming):
    """A DP-synchronised model of fused mixed passes: one forward pass, one synchronisation."""

    def __init__(self, timing: MixedPassTiming, sync_ms: float) -> None:
        super().__init__(timing, sync_ms)
        self._mixed = timing

    def mixed(self, batch: int, mean_isl: int, mean_prefix: int, n: int, active_kv_tokens: int,
              mean_ctx: int, total_kv_tokens: int) -> float:
        ms = self._mixed.mixed(batch, mean_isl, mean_prefix, n, active_kv_tokens, mean_ctx, total_kv_tokens)
        return quantize_ms(ms + self._sync)
