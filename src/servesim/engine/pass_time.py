"""What the schedulers ask of a timing model: the duration of the two phases of a pass.

This protocol is the engine's only view of the performance model (`servesim.perf` implements
it; `servesim.build` picks the implementation). Every answer is milliseconds already quantised
to whole nanoseconds. The engine never asks with an empty batch, nor for prefill when
``mean_isl == mean_prefix``.

A model that also satisfies `MixedPassTiming` (servesim extension, ``timing.mixed_pass:
fused``) times a vLLM-core pass holding both prompt chunks and decode tokens as one forward
pass instead of the reference's prefill + decode.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable


class TimingModel(Protocol):
    """Pass-phase durations of one worker role."""

    def prefill(self, batch: int, mean_isl: int, mean_prefix: int) -> float:
        """Prefill of `batch` prompt chunks ending at `mean_isl` with `mean_prefix` already cached."""
        ...

    def decode(self, batch: int, active_kv_tokens: int, mean_ctx: int, total_kv_tokens: int) -> float:
        """One decode step of `batch` sequences holding `active_kv_tokens` of `total_kv_tokens`."""
        ...


@runtime_checkable
class MixedPassTiming(TimingModel, Protocol):
    """A timing model whose mixed passes are one forward pass (`servesim.perf.mixed`)."""

    def mixed(self, batch: int, mean_isl: int, mean_prefix: int, decode_batch: int, active_kv_tokens: int,
              mean_ctx: int, total_kv_tokens: int) -> float:
        """One forward pass over the prompt chunks `prefill(batch, mean_isl, mean_prefix)` times
        and the decode tokens `decode(decode_batch, active_kv_tokens, mean_ctx, total_kv_tokens)`
        times."""
        ...


def constant_phases(timing: TimingModel) -> tuple[float, float] | None:
    """(prefill, decode) when `timing` answers the same whatever the batch (a model may say so
    with a ``constant_phases`` attribute), else None."""
    return getattr(timing, "constant_phases", None)


def decode_durations(timing: TimingModel, batch: int, active: range, total_kv_tokens: int) -> Sequence[float]:
    """`timing.decode` of `batch` sequences at each active-token count of `active` (the passes
    of a steady decode batch); a model may answer the whole series at once with
    ``decode_series(batch, active, total_kv_tokens)``."""
    series = getattr(timing, "decode_series", None)
    if series is not None:
        return series(batch, active, total_kv_tokens)
    decode = timing.decode
    return [decode(batch, a, a // batch, total_kv_tokens) for a in active]
