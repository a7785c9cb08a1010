"""Calibration files (`timing.calibration: FILE`, written by `servesim calibrate`).

A calibration file is YAML::

    servesim_calibration: 1
    prefill_scale: 1.08      # multiplies every prefill phase
    decode_scale: 1.12       # multiplies every decode phase
    frontend_ms: 14.0        # per-request front-end latency; null = not measured
    kv_tokens: 41408         # KV capacity per scheduler rank; null = not measured
    mixed_pass: fused        # the mode it was fitted in
    fitted_with:             # every other setting of the fit (servesim.config.calibration)
      timing: {type: default, dp_sync_ms: 0.0}
      scheduler: {async_scheduling: true}
      engine: {model: ..., hardware: ..., backend: vllm, backend_version: 0.19.0}
    fitted_on: {...}         # provenance (free-form): measurements, errors, hold-out

A calibrated model times a prefill phase ``a·P``, a decode phase ``b·D`` and a fused mixed pass
``a·P + b·(M − P)`` — its prefill part scaled like prefill, the rest like decode — each rounded
to whole nanoseconds. `kv_tokens` replaces a default KV capacity (``kv_tokens // block_size``
blocks); a fixed capacity in the config wins.

A config that names the file gets the settings it was fitted with (`mixed_pass` and
`fitted_with`, see `servesim.config.calibration`): as if written in the config, and a key written
there that contradicts one is a configuration error.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

from servesim.engine.pass_time import MixedPassTiming, TimingModel
from servesim.errors import TraceError
from servesim.limits import MAX_MS, MAX_TOKENS
from servesim.perf.timing import quantize_ms
from servesim.safejson import finite_number, regular_file_or_error

VERSION = 1
KEYS = ("servesim_calibration", "prefill_scale", "decode_scale", "frontend_ms", "kv_tokens", "mixed_pass",
        "fitted_with", "fitted_on")
SECTIONS = {"timing": ("type", "dp_sync_ms", "gpu"), "scheduler": ("async_scheduling",),
            "engine": ("model", "hardware", "backend", "backend_version")}
"""What `fitted_with` may hold: section → keys."""
MAX_SCALE = 1e6
"""Largest prefill or decode scale accepted (a fit is near 1; a million is a broken file)."""
MAX_FILE_CHARS = 1 << 20
"""Longest calibration file read (a written one is well under a kilobyte)."""
_KINDS: dict[str, type | tuple[type, ...]] = {"type": str, "dp_sync_ms": (int, float), "gpu": str,
                                              "async_scheduling": bool, "model": str, "hardware": str,
                                              "backend": str, "backend_version": str}


@dataclass(frozen=True)
class Calibration:
    """Fitted corrections of one deployment's timing."""

    prefill_scale: float = 1.0
    decode_scale: float = 1.0
    frontend_ms: float | None = None
    kv_tokens: int | None = None
    mixed_pass: str = "fused"
    fitted_with: dict[str, dict[str, Any]] | None = None
    """The fit's other settings, section → key → value (`SECTIONS`)."""
    fitted_on: dict[str, Any] | None = None

    def to_yaml(self) -> str:
        doc: dict[str, Any] = {"servesim_calibration": VERSION, "prefill_scale": round(self.prefill_scale, 6),
               "decode_scale": round(self.decode_scale, 6),
               "frontend_ms": None if self.frontend_ms is None else round(self.frontend_ms, 3),
               "kv_tokens": self.kv_tokens, "mixed_pass": self.mixed_pass}
        if self.fitted_with:
            doc["fitted_with"] = self.fitted_with
        doc["fitted_on"] = self.fitted_on or {}
        return "# servesim calibration file (servesim calibrate); use as timing.calibration\n" + \
            yaml.safe_dump(doc, sort_keys=False)


_CACHE: dict[str, Calibration] = {}


def load_calibration(path: str) -> Calibration:
    """Read and check a calibration file (YAML loaded as strictly as a config: duplicate keys,
    deep nesting and alias bombs refused); errors name the file (and the line where known)."""
    found = _CACHE.get(path)
    if found is not None:
        return found
    from servesim.config.strict_yaml import YamlRefused, load_yaml

    try:
        regular_file_or_error(path)
        with open(path, encoding="utf-8") as handle:
            text = handle.read(MAX_FILE_CHARS + 1)
    except OSError as exc:
        raise TraceError(path, None, f"cannot read calibration file: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise TraceError(path, None, f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    if len(text) > MAX_FILE_CHARS:
        raise TraceError(path, None, f"larger than {MAX_FILE_CHARS >> 20} MiB: not a calibration file")
    try:
        doc = load_yaml(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise TraceError(path, mark.line + 1 if mark else None, f"invalid YAML: {exc}") from None
    except YamlRefused as exc:
        raise TraceError(path, exc.line, str(exc)) from None
    found = _CACHE[path] = _parse(path, doc)
    return found


def _parse(path: str, doc: Any) -> Calibration:
    if not isinstance(doc, dict) or doc.get("servesim_calibration") != VERSION or \
            isinstance(doc.get("servesim_calibration"), bool):
        raise TraceError(path, None, f"not a servesim calibration file (needs 'servesim_calibration: {VERSION}')")
    unknown = sorted(str(key) for key in set(doc) - set(KEYS))
    if unknown:
        raise TraceError(path, None, f"unknown key {unknown[0]!r} (allowed: {', '.join(KEYS)})")
    return Calibration(
        prefill_scale=_number(path, doc, "prefill_scale", 1.0, MAX_SCALE, positive=True),
        decode_scale=_number(path, doc, "decode_scale", 1.0, MAX_SCALE, positive=True),
        frontend_ms=_number(path, doc, "frontend_ms", None, MAX_MS),
        kv_tokens=_count(path, doc, "kv_tokens"),
        mixed_pass=_mode(path, doc),
        fitted_with=_settings(path, doc.get("fitted_with")),
        fitted_on=doc.get("fitted_on") if isinstance(doc.get("fitted_on"), dict) else None,
    )


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _number(path: str, doc: dict, key: str, default: float | None, bound: float, *, positive: bool = False) -> Any:
    value = doc.get(key, default)
    if value is None and default is None:
        return None
    number = finite_number(value)
    if number is None or not 0 <= number <= bound or (positive and number == 0):
        low = "(0" if positive else "[0"
        raise TraceError(path, None, f"{key}: must be a finite number in {low}, {bound:.0e}] (got {_show(value)})")
    return number


def _count(path: str, doc: dict, key: str) -> int | None:
    value = doc.get(key)
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_TOKENS):
        raise TraceError(path, None, f"{key}: must be an integer in [1, {MAX_TOKENS}] or null (got {_show(value)})")
    return value


def _settings(path: str, value: Any) -> dict[str, dict[str, Any]] | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise TraceError(path, None, "fitted_with: must be a mapping of sections (timing, scheduler, engine)")
    for section, keys in value.items():
        if not isinstance(section, str) or section not in SECTIONS or not isinstance(keys, dict):
            raise TraceError(path, None, f"fitted_with.{_show(section)}: unknown section or not a mapping "
                                         f"(allowed: {', '.join(SECTIONS)})")
        unknown = sorted(str(key) for key in set(keys) - set(SECTIONS[section]))
        if unknown:
            raise TraceError(path, None, f"fitted_with.{section}: unknown key {unknown[0]!r} "
                                         f"(allowed: {', '.join(SECTIONS[section])})")
        for key, setting in keys.items():
            _setting(path, f"fitted_with.{section}.{key}", key, setting)
    return value


def _setting(path: str, name: str, key: str, value: Any) -> None:
    """A `fitted_with` value of its key's type (a duration finite and within `MAX_MS`)."""
    kind = _KINDS[key]
    if value is None:
        return
    if isinstance(value, bool) != (kind is bool) or not isinstance(value, kind):
        wanted = "a string" if kind is str else "true or false" if kind is bool else "a number"
        raise TraceError(path, None, f"{name}: must be {wanted} (got {_show(value)})")
    number = finite_number(value)
    if kind != str and kind is not bool and (number is None or not 0 <= number <= MAX_MS):
        raise TraceError(path, None, f"{name}: must be a finite number in [0, {MAX_MS:.0e}] (got {_show(value)})")
    if isinstance(value, str) and len(value) > 1000:
        raise TraceError(path, None, f"{name}: longer than 1000 characters")


def _mode(path: str, doc: dict) -> str:
    value = doc.get("mixed_pass", "fused")
    if not isinstance(value, str) or value not in ("sum", "fused"):
        raise TraceError(path, None, f"mixed_pass: must be 'sum' or 'fused' (got {_show(value)})")
    return value


def calibrated(timing: TimingModel, calibration: Calibration) -> TimingModel:
    """`timing` with the calibration's scales (fused mixed passes too when it has them)."""
    if isinstance(timing, MixedPassTiming):
        return CalibratedMixedTiming(timing, calibration)
    return CalibratedTiming(timing, calibration)


class CalibratedTiming:
    """A timing model with its prefill and decode phases scaled."""

    def __init__(self, timing: TimingModel, calibration: Calibration) -> None:
        self._timing = timing
        self._a, self._b = calibration.prefill_scale, calibration.decode_scale
        self.label = f"{getattr(timing, 'label', type(timing).__name__)}, calibrated"
        self._prefill: dict[tuple[int, int, int], float] = {}
        self._decode: dict[tuple[int, int, int], float] = {}

    def prefill(self, batch: int, mean_isl: int, mean_prefix: int) -> float:
        key = (batch, mean_isl, mean_prefix)
        ms = self._prefill.get(key)
        if ms is None:
            ms = self._prefill[key] = quantize_ms(self._a * self._timing.prefill(batch, mean_isl, mean_prefix))
        return ms

    def decode(self, batch: int, active_kv_tokens: int, mean_ctx: int, total_kv_tokens: int) -> float:
        key = (batch, active_kv_tokens, mean_ctx)
        ms = self._decode.get(key)
        if ms is None:
            raw = self._timing.decode(batch, active_kv_tokens, mean_ctx, total_kv_tokens)
            ms = self._decode[key] = quantize_ms(self._b * raw)
        return ms


class CalibratedMixedTiming(CalibratedTiming):
    """A calibrated model of fused mixed passes: the prefill part scaled like prefill, the rest
    like decode."""

    def __init__(self, timing: MixedPassTiming, calibration: Calibration) -> None:
        super().__init__(timing, calibration)
        self._mixed = timing

    def mixed(self, batch: int, mean_isl: int, mean_prefix: int, n: int, active_kv_tokens: int,
              mean_ctx: int, total_kv_tokens: int) -> float:
        p = self._mixed.prefill(batch, mean_isl, mean_prefix)
        m = self._mixed.mixed(batch, mean_isl, mean_prefix, n, active_kv_tokens, mean_ctx, total_kv_tokens)
        return quantize_ms(self._a * p + self._b * (m - p))
