"""Which versions of a backend the AIConfigurator database holds for a GPU, and which one a run
compiles (`servesim.perf.aic`).

A system's data lives in ``data/<gpu>/<operation>/<backend>/<version>`` (or the legacy
``data/<gpu>/<backend>/<version>``); a database with a ``query_versions.yaml`` names the
versions a run may ask for in slots (``current``, ``previous``). `default_version` is what
servesim's defaults time a backend with, `resolve_version` the literal version of a config's
`engine.backend_version`.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import yaml

from servesim.errors import ConfigError
from servesim.perf.aicdata import DEFAULT_BACKEND_VERSIONS

_BACKEND_DIRS = frozenset({"vllm", "sglang", "trtllm", "nccl", "oneccl"})  # legacy-layout folders
_SLOT_ALIASES = ("current", "previous", "next")


class AicUnavailable(Exception):
    """The database cannot time this model/GPU/backend (the caller falls back to the roofline)."""


def _version_key(text: str) -> tuple:
    parts = re.findall(r"\d+|[A-Za-z]+", text)
    return tuple((0, int(p)) if p.isdigit() else (-1, p) for p in parts)


def data_dir(systems: Path, system: str) -> Path:
    """The folder of `system`'s data: its YAML's `data_dir`, else ``data/<system>``."""
    try:
        data = yaml.safe_load((systems / f"{system}.yaml").read_text()) or {}
    except (OSError, yaml.YAMLError):
        data = {}
    return systems / str(data.get("data_dir", f"data/{system}"))


def gemm_versions(systems: Path, system: str, backend: str) -> list[str]:
    """Versions of `backend` on `system` with GEMM data (every model needs GEMMs), oldest first."""
    folder = data_dir(systems, system) / "gemm" / backend
    if not folder.is_dir():
        return []
    found = [p.name for p in folder.iterdir() if p.is_dir() and any(p.glob("*.parquet"))]
    return sorted(found, key=_version_key)


def data_versions(systems: Path, system: str, backend: str) -> list[str]:
    """Versions of `backend` on `system` with a data folder for any operation, oldest first.

    These are the versions AIC loads (a version missing some operation borrows it from its
    neighbours): ``data/<gpu>/<operation>/<backend>/<version>``, or the legacy
    ``data/<gpu>/<backend>/<version>``.
    """
    data = data_dir(systems, system)
    if not data.is_dir():
        return []
    found: set[str] = set()
    for entry in data.iterdir():
        if entry.name.startswith(".") or entry.name in _BACKEND_DIRS and entry.name != backend:
            continue
        folder = entry if entry.name == backend else entry / backend
        if folder.is_dir():
            found.update(v.name for v in folder.iterdir() if v.is_dir() and not v.name.startswith((".", "_")))
    return sorted(found, key=_version_key)


def _slots(systems: Path, system: str, backend: str) -> dict[str, str] | None:
    """The database's queryable-version slots (None for a tree without a slots file)."""
    try:
        doc = yaml.safe_load((systems / "query_versions.yaml").read_text()) or {}
    except (OSError, yaml.YAMLError):
        return None
    entry = ((doc.get("overrides") or {}).get(system) or {}).get(backend) or (doc.get("defaults") or {}).get(backend)
    if not entry or not entry.get("current"):
        return None
    slots = {"current": str(entry["current"])}
    if entry.get("previous"):
        slots["previous"] = str(entry["previous"])
    return slots


def current_version(systems: Path, system: str, backend: str) -> str | None:
    """The database's current version: its `current` slot, else its newest version with GEMM data."""
    slots = _slots(systems, system, backend)
    if slots is not None:
        return slots["current"]
    versions = gemm_versions(systems, system, backend)
    return versions[-1] if versions else None


def _queryable(systems: Path, system: str, backend: str) -> list[str]:
    """The versions of `backend` on `system` a run may ask for, oldest first."""
    slots = _slots(systems, system, backend)
    unlisted_ok = os.environ.get("AIC_ALLOW_UNLISTED_VERSIONS", "").lower() in ("1", "true", "yes")
    return [v for v in data_versions(systems, system, backend) if slots is None or unlisted_ok or v in slots.values()]


def default_version(systems: Path, system: str, backend: str) -> str | None:
    """The version servesim's defaults time `backend` on `system` with, for `predict`,
    `recommend` and `calibrate` alike: the reference's default (`DEFAULT_BACKEND_VERSIONS`) when
    the database has data for it there, else the nearest version it has — the newest older one,
    else the oldest newer one; None when it has none. (Under `compat: reference` predict keeps the
    reference's default, an error where it is missing, and recommend the database's newest, as
    the reference does.)"""
    wanted = DEFAULT_BACKEND_VERSIONS.get(backend)
    allowed = _queryable(systems, system, backend)
    if not allowed:
        return None
    if wanted is None:
        return current_version(systems, system, backend) or allowed[-1]
    if wanted in allowed:
        return wanted
    older = [v for v in allowed if _version_key(v) < _version_key(wanted)]
    return older[-1] if older else allowed[0]


def resolve_version(systems: Path, system: str, backend: str, requested: str | None) -> str:
    """The literal version to compile for `requested` (None: the reference's default).

    ``current``/``previous`` name the database's slots (servesim's extension). Any other version
    must have data in the database (and, for a tree with a slots file, be listed there), else
    it is a `ConfigError` naming the versions there are — as the reference refuses it. A GPU
    without any data for the backend raises `AicUnavailable` (the caller's roofline fallback).
    """
    wanted = requested if requested is not None else DEFAULT_BACKEND_VERSIONS.get(backend, "current")
    slots = _slots(systems, system, backend)
    if wanted in _SLOT_ALIASES:
        literal = (slots or {}).get(wanted) if wanted != "current" else current_version(systems, system, backend)
        if literal is None:
            raise AicUnavailable(f"the database has no {wanted!r} {backend} version for {system}")
        return literal
    if not data_versions(systems, system, backend):
        raise AicUnavailable(f"the database at {systems} has no {backend} data for {system}")
    allowed = _queryable(systems, system, backend)
    if wanted in allowed:
        return wanted
    what = repr(wanted) if requested is not None else f"(omitted: the reference's default {backend} {wanted})"
    raise ConfigError(f"engine.backend_version {what}: the AIConfigurator database ({systems}) has no "
                      f"{backend} {wanted} data on {system}; available: {', '.join(allowed)} (or 'current')")
