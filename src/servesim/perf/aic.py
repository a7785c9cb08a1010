"""`timing.type: default` — pass times from the AIConfigurator ("AIC") performance database.

The reference builds one AIC engine per worker role and asks it, on every pass::

    prefill_ms = eng.predict_prefill_latency(count, Σisl // count, Σprefix // count)
    decode_ms  = eng.predict_decode_latency(n_ready, Σlen // n_ready, 2)

each value quantised to whole nanoseconds. `AicTiming` makes exactly these calls through the
``aiconfigurator-core`` package and memoises the results on their integer arguments, so every
value is bit-identical to a direct call. The raw answers persist across processes in
`servesim.perf.timingcache`; an engine whose cache file exists is compiled only when a run asks
something the file lacks. With ``interpolate_context: B`` (opt-in) the decode latency is
instead interpolated linearly between the exact values at the multiples of B tokens of context
(decode latency is smooth in the context length; the error it costs is measured in docs/timing.md,
'Interpolation along the context length').

The engine is compiled as the reference compiles it (docs/timing.md)::

    compile_engine(model, hardware, backend, backend_version=V, tp_size, pp_size,
                   attention_dp_size, moe_tp_size, moe_ep_size, nextn=0,
                   kv_block_size=block_size, systems_path=S)

``V`` defaults to the reference's backend default (vLLM 0.19.0, SGLang 0.5.10, TRT-LLM
1.3.0rc10); a version the database has no data for is a configuration error naming those it
has (`servesim.perf.aicversions`). ``S`` is the systems directory chosen in
`servesim.perf.hardware` (by default the reference's own database, `servesim.perf.aicdata`). A model or GPU the database cannot serve
falls back to the roofline model, with a warning.

The package is imported only here, and only when such a config runs.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any


from servesim.perf import timingcache
from servesim.perf.aicdata import DEFAULT_BACKEND_VERSIONS
from servesim.perf.aicversions import (AicUnavailable, current_version, data_versions, default_version, gemm_versions,
                                       resolve_version)
from servesim.perf.aicversions import data_dir as _data_dir
from servesim.perf.models import find_model_files, ModelNotFound
from servesim.perf.timing import quantize_ms
from servesim.errors import RunError

log = logging.getLogger("servesim")


@dataclass(frozen=True)
class AicKey:
    """Everything an AIC engine is compiled from."""

    model: str
    """As the config names it (AIC is handed `aic_model_name` of it)."""
    system: str
    backend: str
    version: str
    tp: int
    pp: int
    attention_dp: int
    moe_tp: int | None
    moe_ep: int | None
    block_size: int
    systems_path: str | None
    nextn: int = 0


# -- models --------------------------------------------------------------------------------------

_MATERIALISED: dict[str, str] = {}


def aic_model_name(model: str) -> str:
    """The name to hand AIC: the model itself, or a directory holding its bundled config.

    AIC reads local directories and its default model list offline; a bundled config outside
    that list would make it try a download, so servesim hands it a temporary copy instead.
    """
    source, config, quant = find_model_files(model)
    if source == "local":
        return model
    from aiconfigurator_core.sdk.common import DefaultHFModels

    if model in DefaultHFModels:
        return model
    if model not in _MATERIALISED:
        folder = Path(tempfile.mkdtemp(prefix="servesim-model-"))
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        (folder / "config.json").write_bytes(config.read_bytes())
        if quant is not None:
            (folder / "hf_quant_config.json").write_bytes(quant.read_bytes())
        _MATERIALISED[model] = str(folder)
    return _MATERIALISED[model]


# -- engines -------------------------------------------------------------------------------------

@contextlib.contextmanager
def quiet_aic() -> Iterator[None]:
    """Silence AIC's informational log lines (fallback rows, attention-lane defaults)."""
    logger = logging.getLogger("aiconfigurator_core")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


_ENGINES: dict[AicKey, Any] = {}


def aic_engine(key: AicKey) -> Any:
    """A compiled AIC engine (one per key per process), checked with two probe queries."""
    engine = _ENGINES.get(key)
    if engine is not None:
        return engine
    try:
        import aiconfigurator_core
        from aiconfigurator_core.sdk.engine import compile_engine
    except ImportError as exc:  # pragma: no cover - it is a dependency
        raise AicUnavailable(f"aiconfigurator-core cannot be imported ({exc})") from None
    model = aic_model_name(key.model)
    with quiet_aic(), _spec_captured() as captured:
        try:
            spec = compile_engine(
                model, key.system, key.backend, backend_version=key.version, tp_size=key.tp,
                pp_size=key.pp, attention_dp_size=key.attention_dp, moe_tp_size=key.moe_tp,
                moe_ep_size=key.moe_ep, nextn=key.nextn, kv_block_size=key.block_size,
                systems_path=key.systems_path)
            engine = aiconfigurator_core.AicEngine.from_spec(spec, key.systems_path)
            probes = _probe(engine)
        except Exception as exc:  # noqa: BLE001 - any failure means "cannot time this"
            raise AicUnavailable(_first_line(exc)) from None
    if not all(p == p and 0.0 < p < float("inf") for p in probes):
        raise AicUnavailable(f"the database returns {probes} for a probe pass")
    _ENGINES[key] = engine
    if captured:
        _SPECS[key] = captured[-1]
    return engine


def _probe(engine: Any) -> tuple[float, float]:
    """The engine's answers to a prefill and a decode probe pass, asked at once.

    The first question of each kind is when the engine loads that kind's tables (~0.55 s for
    prefill, ~0.2 s for decode: Qwen3-32B-FP8 on H200, vLLM), and it releases the GIL while it
    works: the prefill probe runs on a thread of its own while this one asks the decode probe,
    so a first run waits for the slower load only (the answers are the engine's either way).
    An error is raised here: the prefill probe's if it failed (it is the first asked), else the
    decode probe's."""
    import threading

    prefill: list[float] = []
    prefill_error: list[Exception] = []

    def ask_prefill() -> None:
        try:
            prefill.append(engine.predict_prefill_latency(1, 128, 0))
        except Exception as exc:  # noqa: BLE001 - handed to the caller's thread
            prefill_error.append(exc)

    worker = threading.Thread(target=ask_prefill, name="servesim-aic-probe", daemon=True)
    worker.start()
    try:
        decode = engine.predict_decode_latency(1, 128, 2)
    except Exception:
        worker.join()
        if prefill_error:
            raise prefill_error[0] from None
        raise
    worker.join()
    if prefill_error:
        raise prefill_error[0]
    return prefill[0], decode


_SPECS: dict[AicKey, str] = {}
"""The JSON each engine was compiled from (what `servesim.perf.aicdecode` reads its ops from)."""


@contextlib.contextmanager
def _spec_captured() -> Iterator[list[str]]:
    """Keep the engine-spec JSON `compile_engine` hands to the extension (it returns only bytes)."""
    import aiconfigurator_core

    captured: list[str] = []
    original = aiconfigurator_core.engine_spec_bincode_from_json

    def keep(spec_json: str) -> Any:
        captured.append(spec_json)
        return original(spec_json)

    aiconfigurator_core.engine_spec_bincode_from_json = keep
    try:
        yield captured
    finally:
        aiconfigurator_core.engine_spec_bincode_from_json = original


_LOOKUPS: dict[AicKey, Any] = {}


def decode_lookup(key: AicKey) -> Any:
    """The batched exact decode lookup of `key`'s compiled engine (`servesim.perf.aicdecode`),
    or None when it does not apply (then every decode question goes to the engine)."""
    if key in _LOOKUPS:
        return _LOOKUPS[key]
    found = None
    spec = _SPECS.get(key)
    if spec is not None and key.systems_path and os.environ.get("SERVESIM_AIC_BATCHED", "1") != "0":
        import json

        from servesim.perf import aicdecode

        systems = Path(key.systems_path)
        found = aicdecode.build(_ENGINES[key], json.loads(spec), systems, _data_dir(systems, key.system))
    _LOOKUPS[key] = found
    return found


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:300] if text else ''}"


# -- the timing model ----------------------------------------------------------------------------

BATCHED_AFTER_S = 0.5
"""Engine seconds of decode questions after which a run switches to the batched lookup
(`servesim.perf.aicdecode`): setting it up costs ~0.3 s, which only long-context runs repay.
Either way the answers are the engine's, bit for bit."""


class AicTiming:
    """Pass times from an AIC engine, memoised on the call's integer arguments.

    `interpolate_context` (tokens, optional) interpolates decode latency linearly along the
    context length between exact values at its multiples; None keeps every call exact. `memo`
    holds the engine's raw answers (shared, possibly persistent: `servesim.perf.timingcache`);
    with `engine` None the engine of `key` is compiled on the first question `memo` lacks.
    """

    def __init__(self, engine: Any = None, *, interpolate_context: int | None = None, label: str = "",
                 memo: timingcache.EngineMemo | None = None, key: AicKey | None = None) -> None:
        if engine is None and key is None:
            raise ValueError("AicTiming needs an engine or the key to compile one")
        self._engine = engine
        self._key = key
        self._bucket = interpolate_context
        self._memo = memo if memo is not None else timingcache.EngineMemo()
        self._prefill: dict[tuple[int, int, int], float] = {}
        self._decode: dict[int, dict[int, float]] = {}
        """Decode times by batch, then mean context."""
        self._raw_decode = self._memo.decode
        self._raw_prefill = self._memo.prefill
        self.label = label
        self.calls = 0
        """Questions put to the engine (those no memo answered)."""
        self._engine_decode_s = 0.0
        """Seconds the engine took over decode questions asked one by one."""

    @property
    def engine(self) -> Any:
        """The compiled AIC engine behind this model (compiled now if it was deferred)."""
        if self._engine is None:
            assert self._key is not None
            try:
                self._engine = aic_engine(self._key)
            except AicUnavailable as exc:
                raise RunError(f"AIConfigurator cannot compile the engine its timing cache was made by ({exc})") \
                    from None
        return self._engine

    @property
    def compiled(self) -> bool:
        """Whether the engine is compiled (it is not while the memo answers every question)."""
        return self._engine is not None

    def _checked(self, value: float, what: str) -> float:
        if not (value == value and 0.0 <= value < float("inf")):
            raise RunError(f"AIConfigurator returned {value} ms for {what}")
        return value

    def prefill(self, batch: int, mean_isl: int, mean_prefix: int) -> float:
        key = (batch, mean_isl, mean_prefix)
        ms = self._prefill.get(key)
        if ms is None:
            raw = self._raw_prefill.get(key)
            if raw is None:
                self.calls += 1
                raw = self._raw_prefill[key] = self._checked(
                    self.engine.predict_prefill_latency(batch, mean_isl, mean_prefix), f"prefill{key}")
                self._memo.fresh_prefill.append(key)
            ms = self._prefill[key] = quantize_ms(raw)
        return ms

    def _exact_decode(self, batch: int, ctx: int) -> float:
        key = (batch, ctx)
        raw = self._raw_decode.get(key)
        if raw is None:
            self._ask_decode(batch, [ctx])
            raw = self._raw_decode[key]
        return raw

    def _ask_decode(self, batch: int, contexts: list[int]) -> None:
        """Put `predict_decode_latency(batch, c, 2)` to the engine for each c of `contexts`
        (none in the memo): through its batched lookup where one applies."""
        engine = self.engine
        lookup = self._lookup() if self._engine_decode_s >= BATCHED_AFTER_S else None
        if lookup is not None:
            values = lookup.decode(batch, contexts)
        else:
            start = time.perf_counter()
            values = [engine.predict_decode_latency(batch, c, 2) for c in contexts]
            self._engine_decode_s += time.perf_counter() - start
        raw_decode, fresh = self._raw_decode, self._memo.fresh_decode
        for ctx, value in zip(contexts, values, strict=True):
            raw_decode[(batch, ctx)] = self._checked(value, f"decode({batch}, {ctx}, 2)")
            fresh.append((batch, ctx))
        self.calls += len(contexts)

    def _lookup(self) -> Any:
        if self._key is None or self._key not in _ENGINES:
            return None
        return decode_lookup(self._key)

    def decode(self, batch: int, active_kv_tokens: int, mean_ctx: int, total_kv_tokens: int) -> float:
        memo = self._decode.get(batch)
        if memo is None:
            memo = self._decode[batch] = {}
        ms = memo.get(mean_ctx)
        if ms is None:
            ms = memo[mean_ctx] = self._decode_ms(batch, mean_ctx)
        return ms

    def decode_series(self, batch: int, active: range, total_kv_tokens: int) -> list[float]:
        """`decode` at each active-token count of `active` (a step of `batch`: the mean context
        grows by one token a pass)."""
        memo = self._decode.get(batch)
        if memo is None:
            memo = self._decode[batch] = {}
        first = active.start // batch
        contexts = range(first, first + len(active))
        series = list(map(memo.get, contexts))
        if None in series:
            if self._bucket is None:
                raw = self._raw_decode
                asked = [c for c, ms in zip(contexts, series, strict=True) if ms is None and (batch, c) not in raw]
                if asked:
                    self._ask_decode(batch, asked)
            for i, ms in enumerate(series):
                if ms is None:
                    c = contexts[i]
                    series[i] = memo[c] = self._decode_ms(batch, c)
        return series  # type: ignore[return-value]

    def _decode_ms(self, batch: int, mean_ctx: int) -> float:
        bucket = self._bucket
        if bucket is None or mean_ctx < bucket or mean_ctx % bucket == 0:
            raw = self._exact_decode(batch, mean_ctx)
        else:
            lo = mean_ctx - mean_ctx % bucket
            a, b = self._exact_decode(batch, lo), self._exact_decode(batch, lo + bucket)
            raw = a + (b - a) * ((mean_ctx - lo) / bucket)
        return quantize_ms(raw)


_TIMINGS: dict[tuple[AicKey, int | None], AicTiming] = {}


def aic_timing(key: AicKey, interpolate_context: int | None) -> AicTiming:
    """The shared `AicTiming` of one compiled engine (workers of a role share its memo; so do
    processes, through the timing cache). An engine the cache has answers of is compiled only
    when needed: its file proves it compiled (and passed the probes) before."""
    found = _TIMINGS.get((key, interpolate_context))
    if found is None:
        label = f"AIC {key.model} on {key.system}, {key.backend} {key.version}"
        memo = timingcache.engine_memo(engine_identity(key)) if key.systems_path else timingcache.EngineMemo()
        engine = aic_engine(key) if not (memo.decode or memo.prefill) else None
        found = _TIMINGS[(key, interpolate_context)] = AicTiming(
            engine, interpolate_context=interpolate_context, label=label, memo=memo, key=key)
    return found


def engine_identity(key: AicKey) -> dict[str, Any]:
    """Everything the answers of `key`'s engine depend on (`servesim.perf.timingcache`); the key
    names its database (`systems_path`: without one, AIC's choice is not known here)."""
    if not key.systems_path:
        raise ValueError("an engine on AIC's own choice of database has no persistent identity")
    systems = Path(key.systems_path)
    return timingcache.engine_identity(asdict(key), systems, _data_dir(systems, key.system))


__all__ = ["AicKey", "AicTiming", "AicUnavailable", "DEFAULT_BACKEND_VERSIONS", "aic_engine",
           "aic_model_name", "aic_timing", "current_version", "data_versions", "default_version", "engine_identity", "gemm_versions",
           "resolve_version", "ModelNotFound"]
