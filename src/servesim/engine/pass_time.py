"""What the schedulers ask of a timing model: the duration of the two phases of a pass.

This protocol is the engine's only view of the performance model (`servesim.perf` implements
it; `servesim.build` picks the implementation). Both answers are milliseconds already quantised
to whole nanoseconds. The engine never asks with an empty batch, nor for prefill when
``mean_isl == mean_prefix``.
"""

from __future__ import annotations

from typing import Protocol


class TimingModel(Protocol):
    """Pass-phase durations of one worker role."""

    def prefill(self, batch: int, mean_isl: int, mean_prefix: int) -> float:
        """Prefill of `batch` prompt chunks ending at `mean_isl` with `mean_prefix` already cached."""
        ...

    def decode(self, batch: int, active_kv_tokens: int, mean_ctx: int, total_kv_tokens: int) -> float:
        """One decode step of `batch` sequences holding `active_kv_tokens` of `total_kv_tokens`."""
        ...
