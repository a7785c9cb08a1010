"""What the search needs to know about a model, a GPU and a concrete candidate.

This is the only module of `servesim.search` that reaches into servesim's performance model
(model configs, the AIConfigurator database, the KV-capacity formula); everything else works on
configuration mappings and `servesim.simulate`. Every answer is memoised: the search asks the
same questions for many candidates.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import yaml

from servesim.config import SimConfig
from servesim.config.schema import Role
from servesim.engine.pass_time import TimingModel
from servesim.errors import RunError
from servesim.perf import save_timing_cache

log = logging.getLogger("servesim")


@functools.lru_cache(maxsize=None)
def context_length(model: str) -> int:
    """The model's maximum context length (its HF config), what `context_length: max` means."""
    from servesim.perf.models import model_context_length

    return model_context_length(model)


@functools.lru_cache(maxsize=None)
def latest_backend_version(hardware: str, backend: str, systems_path: str | None) -> str | None:
    """The newest AIConfigurator database version of `backend` on `hardware` (None: no data).

    The reference writes this version into every recommended config when the recommend config
    names none.
    """
    from servesim.perf.hardware import ready_systems_dir, systems_dir

    systems, how = systems_dir(systems_path)
    try:
        ready_systems_dir(systems, how, hardware)
    except RunError:
        return None
    from aiconfigurator_core.sdk.perf_database import get_latest_database_version

    logging.getLogger("aiconfigurator_core").setLevel(logging.WARNING)
    with _one_gpu_view(systems, hardware) as view:
        return get_latest_database_version(hardware, backend, systems_paths=str(view))


@contextlib.contextmanager
def _one_gpu_view(systems: Path, hardware: str) -> Iterator[Path]:
    """The systems tree as AIConfigurator's version discovery sees it for one GPU: a folder
    linking only that GPU's spec and data (its answer for the GPU depends on nothing else, and
    scanning every GPU's data took 1-2 s). A tree with version slots (`query_versions.yaml`,
    which derive a fleet-wide `next`) is used whole."""
    spec = systems / f"{hardware}.yaml"
    try:
        data_dir = (yaml.safe_load(spec.read_text()) or {}).get("data_dir", "")
    except (OSError, yaml.YAMLError):
        data_dir = None
    if (systems / "query_versions.yaml").exists() or not isinstance(data_dir, str) or not data_dir:
        yield systems
        return
    with tempfile.TemporaryDirectory(prefix="servesim-systems-") as tmp:
        view = Path(tmp)
        (view / spec.name).symlink_to(spec)
        target = view / data_dir
        target.parent.mkdir(parents=True, exist_ok=True)
        target.symlink_to(systems / data_dir, target_is_directory=True)
        yield view


@functools.lru_cache(maxsize=None)
def is_moe(model: str) -> bool:
    """Whether the model has mixture-of-experts layers (False when its config is unknown)."""
    from servesim.perf.models import resolve_model

    try:
        return resolve_model(model).is_moe
    except RunError:
        return False


@functools.lru_cache(maxsize=4096)
def shape_problem(model: str, tp: int, pp: int, dp: int, moe_tp: int, moe_ep: int) -> str | None:
    """Why a worker split cannot hold the model (heads not divisible, MoE width ...), or None."""
    from servesim.perf.capacity import Parallel, check_parallelism
    from servesim.perf.models import resolve_model

    try:
        spec = resolve_model(model)
    except RunError:
        return None
    try:
        check_parallelism(spec, Parallel(tp=tp, pp=pp, attention_dp=dp, moe_tp=moe_tp, moe_ep=moe_ep))
    except RunError as exc:
        return str(exc).split(": model=", 1)[-1]
    return None


def kv_tokens_per_rank(config: SimConfig, role: str) -> int:
    """Usable KV tokens of one scheduler rank of `role` (blocks x block size), sized as `predict`
    sizes the same config (SGLang by its static fraction outside `compat: reference`); raises
    RunError ("no KV budget ...") when weights and activations leave no room."""
    engine, name = config.engine, cast(Role, role)
    worker = engine.roles[name]
    key = (engine.model, engine.hardware, engine.backend, engine.backend_version, engine.aic_systems_path,
           worker.parallelism, worker.scheduler.max_batched_tokens, worker.scheduler.max_sequences_for(name),
           worker.kv_cache, name, config.compat)
    return _kv_tokens(key, config, name)


_KV_MEMO: dict[Any, int | RunError] = {}


def _kv_tokens(key: Any, config: SimConfig, role: Role) -> int:
    found = _KV_MEMO.get(key)
    if found is None:
        from servesim.build.perf import num_blocks

        engine = config.engine
        worker = engine.roles[role]
        try:
            found = num_blocks(engine, worker, role, sglang_static=config.compat != "reference",
                               upstream013=config.compat == "upstream-0.13") \
                * engine.block_size(role)
        except RunError as exc:
            found = exc
        _KV_MEMO[key] = found
    if isinstance(found, RunError):
        raise found
    return found


_TIMINGS: dict[str, TimingModel] = {}


def timing_model(config: SimConfig, role: str) -> TimingModel:
    """The pass-time model a replay of `config` gives `role` (one per distinct worker split,
    block size and timing section; replica counts and scheduler knobs share it)."""
    from servesim.build.perf import timing_model as build
    from servesim.build.resolve import resolve_fidelity

    engine = resolve_fidelity(config).engine
    worker = engine.roles[cast(Role, role)]
    key = json.dumps([engine.model, engine.hardware, engine.backend, engine.backend_version, engine.aic_systems_path,
                      role, worker.parallelism.model_dump(exclude={"replicas"}),
                      worker.kv_cache.block_size_for(engine.backend), worker.timing.model_dump(mode="json"),
                      worker.speculative.model_dump() if worker.speculative is not None else None])
    found = _TIMINGS.get(key)
    if found is None:
        found = _TIMINGS[key] = build(engine, worker, role)
    return found


def kv_bytes_per_token(config: SimConfig, role: str) -> int:
    """Per-rank KV bytes per token of `role` (what `kv_transfer.bytes_per_token: auto` derives)."""
    from servesim.build.lower import _kv_bytes_per_token

    engine = config.engine
    return _kv_bytes_per_token(engine, engine.roles[cast(Role, role)])


def warm_up(configs: list[SimConfig]) -> None:
    """Import the simulator and build the timing models of `configs` in this process, so worker
    processes forked afterwards start with the timing database loaded (and share its memory): each
    AIC engine compiled, or, when the timing cache has answers of it, those answers read (the
    engine is then compiled only by a worker that asks something new)."""
    import importlib

    from servesim.build.perf import timing_model
    from servesim.build.resolve import resolve_fidelity

    importlib.import_module("servesim.api")

    log.disabled = True
    try:
        for config in configs:
            for role, worker in resolve_fidelity(config).engine.roles.items():
                try:
                    timing_model(config.engine, worker, role)
                except Exception:  # noqa: BLE001 - the candidate's own replay reports it
                    pass
    finally:
        log.disabled = False
    save_timing_cache()  # so the workers start with nothing of the parent's left to write
