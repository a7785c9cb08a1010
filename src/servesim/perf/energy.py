"""Active forward-pass power and energy (`power_w`, `power_coverage`; upstream AISimulate 0.13).

AISimulate 0.13 reports, per GPU, the power of the forward passes a run executed: every pass's
operations are priced from the AIConfigurator database's measured op power (``power`` column,
W), which gives each operation an energy (W·ms) next to its latency; an operation with no
positive energy evidence is *uncovered*. Over all passes of all roles

    power_w        = Σ energy / Σ latency          (W per GPU, active forward passes only)
    power_coverage = Σ covered latency / Σ latency (the share of pass time with energy data)

and ``power_w`` is published only when ``power_coverage >= 0.9`` (else null: *withheld*). A role
timed without the database (fixed, polynomial or roofline timing) has no energy provider: both
fields are then null (*unsupported*).

servesim meters the passes its own timing model answers (`EnergyMeter`, wrapped around an AIC
role's timing): each answer's milliseconds are recorded under the pass shape it was asked with,
and at the end each shape is priced once from AIC's per-op values of that shape, scaled to the
milliseconds the pass took (so a calibrated or DP-synchronised pass keeps the shape's power).
A fused mixed pass (servesim's `timing.mixed_pass: fused`) takes the power of its prompt chunks'
and decode tokens' operations together. Decode passes timed ahead of the horizon and then not
run (`engine.vllm.ahead`) are metered too: they weigh in the ratios, which is why energy per
token is derived from the workers' busy time, not from the metered milliseconds.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servesim.engine.pass_time import MixedPassTiming, TimingModel

COVERAGE_GATE = 0.9
"""Smallest `power_coverage` at which `power_w` is published (0.13's gate)."""
UNSUPPORTED = "one or more replay roles have no timing provider"
"""0.13's reason when a role is not timed from the database."""


@dataclass(frozen=True, slots=True)
class ShapeEnergy:
    """AIC's per-op totals of one pass shape: latency, energy and the latency that has energy."""

    latency_ms: float
    energy_wms: float
    covered_ms: float

    @classmethod
    def of_ops(cls, ops: Iterable[Sequence[Any]]) -> "ShapeEnergy":
        """Totals of AIC per-op tuples ``(name, latency_ms, energy_wms, source, ...)``."""
        latency = energy = covered = 0.0
        for op in ops:
            latency += float(op[1])
            if float(op[2]) > 0.0:
                energy += float(op[2])
                covered += float(op[1])
        return cls(latency, energy, covered)

    def plus(self, other: "ShapeEnergy") -> "ShapeEnergy":
        """Both shapes' operations together."""
        return ShapeEnergy(self.latency_ms + other.latency_ms, self.energy_wms + other.energy_wms,
                           self.covered_ms + other.covered_ms)


NO_ENERGY = ShapeEnergy(1.0, 0.0, 0.0)
"""A shape priced from tables without op power: every operation uncovered."""


class AicEnergy:
    """Per-shape energy of one AIC engine, memoised: a prefill shape is the context phase of
    ``run_static_per_op(batch, isl, osl=2, prefix)``, a decode shape its generation phase at
    ``(batch, ctx)`` — the same questions `perf.aic.AicTiming` asks for the latencies. When
    the database's tables for the engine have no ``power`` column at all, no shape is priced
    (and the engine is not compiled for it): every operation is uncovered."""

    def __init__(self, timing: Any, *, decode_extra_ms: float = 0.0, decode_ctx_shift: int = 0) -> None:
        self._timing = timing
        """The role's `AicTiming` (its engine is compiled only when a shape is first priced)."""
        self.decode_extra_ms = decode_extra_ms
        """Latency upstream 0.13 adds to a decode step's `generation_attention` op, without
        energy (`servesim.perf.upstream013`)."""
        self.decode_ctx_shift = decode_ctx_shift
        """Tokens less of context a decode shape is priced at (0.13: 1)."""
        self._prefill: dict[tuple[int, int, int], ShapeEnergy] = {}
        self._decode: dict[tuple[int, int], ShapeEnergy] = {}
        key = getattr(timing, "_key", None)
        self.priced = key is None or power_data_possible(key.systems_path, key.system, key.backend, key.version)

    def _static(self, batch: int, isl: int, prefix: int) -> tuple[ShapeEnergy, ShapeEnergy]:
        context, generation = self._timing.engine.run_static_per_op(batch, 1, isl, 2, prefix, 1.0, 1.0, "static", 32)
        return ShapeEnergy.of_ops(context), ShapeEnergy.of_ops(self._with_extra(generation))

    def _with_extra(self, ops: Iterable[Sequence[Any]]) -> list[Sequence[Any]]:
        """Generation ops with `decode_extra_ms` more latency in `generation_attention`."""
        extra = self.decode_extra_ms
        if not extra:
            return list(ops)
        return [(op[0], float(op[1]) + extra, *op[2:]) if op[0] == "generation_attention" else op for op in ops]

    def prefill(self, batch: int, isl: int, prefix: int) -> ShapeEnergy:
        """The prefill of `batch` chunks ending at `isl` with `prefix` cached."""
        if not self.priced:
            return NO_ENERGY
        key = (batch, isl, prefix)
        found = self._prefill.get(key)
        if found is None:
            found = self._prefill[key] = self._static(batch, isl, prefix)[0]
        return found

    def decode(self, batch: int, ctx: int) -> ShapeEnergy:
        """One decode step of `batch` sequences at mean context `ctx`."""
        if not self.priced:
            return NO_ENERGY
        key = (batch, ctx)
        found = self._decode.get(key)
        if found is None:
            found = self._decode[key] = self._static(batch, max(1, ctx - self.decode_ctx_shift), 0)[1]
        return found


_POWER_DATA: dict[tuple[str, str, str, str], bool] = {}


def power_data_possible(systems_path: str | None, system: str, backend: str, version: str) -> bool:
    """Whether any table `version` of `backend` on `system` reads (its own, those it reuses
    from other versions, collective-communication tables) has a ``power`` column; True when
    that cannot be told."""
    if not systems_path:
        return True
    key = (systems_path, system, backend, version)
    found = _POWER_DATA.get(key)
    if found is None:
        found = _POWER_DATA[key] = _scan_power(Path(systems_path), system, backend, version)
    return found


def _scan_power(systems: Path, system: str, backend: str, version: str) -> bool:
    try:
        import yaml
    except ImportError:  # pragma: no cover - a dependency
        return True
    data = systems / "data" / system
    try:
        manifest = yaml.safe_load((systems / f"{system}.yaml").read_text()) or {}
        data = systems / str(manifest.get("data_dir", f"data/{system}"))
    except (OSError, yaml.YAMLError):
        pass
    versions, todo = set(), [version]
    while todo:
        v = todo.pop()
        if v in versions:
            continue
        versions.add(v)
        for reuse in data.glob(f"*/{backend}/{v}/reuse.yaml"):
            try:
                entries = (yaml.safe_load(reuse.read_text()) or {}).get("reuse") or []
            except (OSError, yaml.YAMLError):
                return True
            todo += [str(e["from_version"]) for e in entries if isinstance(e, dict) and "from_version" in e]
    files = [f for v in versions for f in data.glob(f"*/{backend}/{v}/*.parquet")]
    files += [f for comm in ("nccl", "oneccl") for f in data.glob(f"comm/{comm}/*/*.parquet")]
    return any(_has_power_column(f) for f in files)


def _has_power_column(path: Path) -> bool:
    """Whether the Parquet file's schema (its Thrift footer) names a column ``power``: the
    footer holds each name as its length then its bytes. True when the file cannot be read."""
    try:
        with path.open("rb") as f:
            f.seek(-8, 2)
            tail = f.read(8)
            if tail[4:] != b"PAR1":
                return True
            size = int.from_bytes(tail[:4], "little")
            f.seek(-8 - size, 2)
            footer = f.read(size)
    except OSError:
        return True
    return b"\x05power" in footer


@dataclass(slots=True)
class PhaseTotals:
    """Metered totals of one phase (prefill, decode or fused mixed passes)."""

    latency_ms: float = 0.0
    energy_wms: float = 0.0
    covered_ms: float = 0.0

    def add(self, ms: float, shape: ShapeEnergy) -> None:
        """`ms` of passes of `shape` (its power and coverage, scaled to `ms`)."""
        self.latency_ms += ms
        if shape.latency_ms > 0.0:
            self.energy_wms += ms * shape.energy_wms / shape.latency_ms
            self.covered_ms += ms * shape.covered_ms / shape.latency_ms


class EnergyMeter:
    """A timing model that records the milliseconds of every answer under its pass shape.

    Only `prefill` and `decode` (and, in the subclasses `make_meter` picks, `decode_series` and
    `mixed`) are metered; every other attribute is the wrapped model's."""

    def __init__(self, timing: TimingModel, energy: AicEnergy | None) -> None:
        self._timing = timing
        self.energy = energy
        self.prefill_ms: defaultdict[tuple[int, int, int], float] = defaultdict(float)
        self.decode_ms: defaultdict[tuple[int, int], float] = defaultdict(float)
        self.mixed_ms: defaultdict[tuple[int, int, int, int, int], float] = defaultdict(float)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._timing, name)

    def prefill(self, batch: int, mean_isl: int, mean_prefix: int) -> float:
        ms = self._timing.prefill(batch, mean_isl, mean_prefix)
        self.prefill_ms[(batch, mean_isl, mean_prefix)] += ms
        return ms

    def decode(self, batch: int, active_kv_tokens: int, mean_ctx: int, total_kv_tokens: int) -> float:
        ms = self._timing.decode(batch, active_kv_tokens, mean_ctx, total_kv_tokens)
        self.decode_ms[(batch, mean_ctx)] += ms
        return ms

    def totals(self) -> dict[str, PhaseTotals]:
        """Metered prefill, decode and fused-mixed totals (each shape priced once)."""
        out = {"prefill": PhaseTotals(), "decode": PhaseTotals(), "mixed": PhaseTotals()}
        energy = self.energy
        if energy is None:
            return out
        for (b, isl, pre), ms in self.prefill_ms.items():
            out["prefill"].add(ms, energy.prefill(b, isl, pre))
        for (b, ctx), ms in self.decode_ms.items():
            out["decode"].add(ms, energy.decode(b, ctx))
        for (b, isl, pre, n, ctx), ms in self.mixed_ms.items():
            out["mixed"].add(ms, energy.prefill(b, isl, pre).plus(energy.decode(n, ctx)))
        return out


class _SeriesMeter(EnergyMeter):
    def decode_series(self, batch: int, active: range, total_kv_tokens: int) -> Sequence[float]:
        series = self._timing.decode_series(batch, active, total_kv_tokens)  # type: ignore[attr-defined]
        decode_ms = self.decode_ms
        for a, ms in zip(active, series, strict=True):
            decode_ms[(batch, a // batch)] += ms
        return series


class _MixedMeter(EnergyMeter):
    def mixed(self, batch: int, mean_isl: int, mean_prefix: int, decode_batch: int, active_kv_tokens: int,
              mean_ctx: int, total_kv_tokens: int) -> float:
        inner = self._timing
        assert isinstance(inner, MixedPassTiming)
        ms = inner.mixed(batch, mean_isl, mean_prefix, decode_batch, active_kv_tokens, mean_ctx, total_kv_tokens)
        self.mixed_ms[(batch, mean_isl, mean_prefix, decode_batch, mean_ctx)] += ms
        return ms


class _MixedSeriesMeter(_MixedMeter, _SeriesMeter):
    pass


def make_meter(timing: TimingModel, energy: AicEnergy | None) -> EnergyMeter:
    """`timing` metered, keeping exactly its optional answers (`decode_series`, `mixed`)."""
    series = getattr(timing, "decode_series", None) is not None
    mixed = isinstance(timing, MixedPassTiming)
    kind = {(False, False): EnergyMeter, (True, False): _SeriesMeter, (False, True): _MixedMeter,
            (True, True): _MixedSeriesMeter}[(series, mixed)]
    return kind(timing, energy)


@dataclass(frozen=True, slots=True)
class PoolEnergy:
    """One pool's metered passes and what it ran: busy worker-ms and GPUs per worker."""

    meter: EnergyMeter | None
    busy_ms: float
    gpus_per_worker: int


def power_fields(pools: Sequence[PoolEnergy], output_tokens: int) -> dict[str, float | None]:
    """`power_w`, `power_coverage` (0.13's semantics, module docstring) and servesim's
    `energy_per_output_token_j`: `power_w` × the pools' busy GPU-seconds / output tokens
    (null when `power_w` is)."""
    if not pools or any(p.meter is None or p.meter.energy is None for p in pools):
        return {"power_w": None, "power_coverage": None, "energy_per_output_token_j": None}
    latency = energy = covered = 0.0
    for pool in pools:
        assert pool.meter is not None
        for phase in pool.meter.totals().values():
            latency += phase.latency_ms
            energy += phase.energy_wms
            covered += phase.covered_ms
    coverage = covered / latency if latency > 0.0 else 0.0
    watts = energy / latency if latency > 0.0 and coverage >= COVERAGE_GATE else None
    per_token = None
    if watts is not None and output_tokens > 0:
        gpu_ms = sum(p.busy_ms * p.gpus_per_worker for p in pools)
        per_token = watts * gpu_ms / 1000.0 / output_tokens
    return {"power_w": _finite(watts), "power_coverage": coverage, "energy_per_output_token_j": _finite(per_token)}


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


POWER_FIELDS = ("power_w", "power_coverage", "energy_per_output_token_j")
"""Summary fields of this module (servesim mode only: the 0.1.0.dev2 reference has none)."""


def unavailable_reason(fields: Mapping[str, Any]) -> str:
    """Why `power_w` is null, in 0.13's words."""
    coverage = fields.get("power_coverage")
    if coverage is None:
        return "energy provider or topology unsupported"
    if coverage < COVERAGE_GATE:
        return "insufficient energy coverage"
    return "publication conditions not met"
