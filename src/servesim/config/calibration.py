"""A calibration file's settings applied to the config that names it (`timing.calibration`).

A calibration is only right in the timing mode it was fitted in: its scales correct one timing
model (`timing.type`, `mixed_pass`) with one DP synchronisation (`dp_sync_ms`) and one scheduling
(`scheduler.async_scheduling`), on one AIConfigurator data version (`engine.backend_version`). So
the file records them (`mixed_pass`, `fitted_with`) and a config that names it gets them:

* a key the config leaves out takes the file's value, as if written in the config (this wins
  over every default, `compat: reference`'s too);
* a key the config sets to another value is a configuration error naming the key and the file
  (remove the key or refit); `frontend_ms` is the exception — a fitted value, not a setting:
  an explicit key wins over the file's;
* the deployment the file was fitted on (`engine.model`, `hardware`, `backend`) is not a
  setting: another one is allowed (a calibration carried across models, `validate --holdout`)
  with a note on stderr, and the file's `backend_version` is taken only on the same deployment.
"""

from __future__ import annotations

import logging
from typing import Any

from servesim.config.schema import SimConfig
from servesim.errors import ConfigError

_NOTED: set[tuple[str, str]] = set()


def apply_calibration_settings(config: SimConfig) -> SimConfig:
    """`config` with every role's calibration file settings filled in (see the module docstring)."""
    updates: dict[str, Any] = {}
    engine_update: dict[str, Any] = {}
    for role, worker in config.engine.roles.items():
        path = getattr(worker.timing, "calibration", None)
        if path is None:
            continue
        calibration = _load(f"engine.workers.{role}.timing.calibration", path)
        with_ = calibration.fitted_with or {}
        updates[role] = _worker(f"engine.workers.{role}", worker, path, calibration.mixed_pass, with_)
        engine_update.update(_engine(config, path, with_.get("engine") or {}))
    if not updates:
        return config
    engine = config.engine.model_copy(update={"workers": config.engine.workers.model_copy(update=updates),
                                              **engine_update})
    return config.model_copy(update={"engine": engine})


def _load(key: str, path: str) -> Any:
    """The calibration file `path` that config key `key` names; a bad file is a `ConfigError`
    naming the key (the file's own message, FILE:LINE and the rule, follows)."""
    from servesim.errors import TraceError
    from servesim.perf.calibration import load_calibration

    try:
        return load_calibration(path)
    except TraceError as exc:
        raise ConfigError(f"{key}: bad calibration file: {exc}") from None


def _contradiction(key: str, have: Any, path: str, fitted: Any) -> ConfigError:
    return ConfigError(f"{key}: {have!r} contradicts the calibration file {path}, fitted with {fitted!r} "
                       f"(remove the key to use the file's, or refit the calibration with it)")


def _merged(prefix: str, section: Any, path: str, wanted: dict[str, Any]) -> Any:
    """`section` (a config model) with `wanted`'s keys set where unset; an error where set otherwise."""
    update = {}
    for key, value in wanted.items():
        if value is None or not hasattr(section, key):
            continue
        current = getattr(section, key)
        if key in section.model_fields_set and current is not None:
            if current != value:
                raise _contradiction(f"{prefix}.{key}", current, path, value)
            continue
        update[key] = value
    return section.model_copy(update=update) if update else section


def _worker(prefix: str, worker: Any, path: str, mixed_pass: str, with_: dict[str, Any]) -> Any:
    timing_with = dict(with_.get("timing") or {})
    kind = timing_with.pop("type", None)
    if kind is not None and kind != worker.timing.type:
        raise _contradiction(f"{prefix}.timing.type", worker.timing.type, path, kind)
    timing = _merged(f"{prefix}.timing", worker.timing, path, {"mixed_pass": mixed_pass, **timing_with})
    scheduler = _merged(f"{prefix}.scheduler", worker.scheduler, path, dict(with_.get("scheduler") or {}))
    return worker.model_copy(update={"timing": timing, "scheduler": scheduler})


def _engine(config: SimConfig, path: str, fitted: dict[str, Any]) -> dict[str, Any]:
    """The engine keys the file contributes (its backend_version on the same deployment)."""
    engine = config.engine
    other = [f"{key} {fitted[key]!r}" for key in ("model", "hardware", "backend")
             if fitted.get(key) is not None and fitted[key] != getattr(engine, key)]
    if other:
        if (path, str(other)) not in _NOTED:
            _NOTED.add((path, str(other)))
            logging.getLogger("servesim").warning("servesim: note: the calibration file %s was fitted on %s, "
                                                  "not this deployment's", path, ", ".join(other))
        return {}
    version = fitted.get("backend_version")
    if version is None:
        return {}
    if engine.backend_version is not None and engine.backend_version != version:
        raise _contradiction("engine.backend_version", engine.backend_version, path, version)
    return {"backend_version": version}
