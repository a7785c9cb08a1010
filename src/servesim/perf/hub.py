"""A model's ``config.json`` from the Hugging Face Hub, for a model servesim has no config for.

As the reference does for a model id that is neither a local directory nor among its bundled
configs, servesim fetches the repository's ``config.json`` — that file only — through
``huggingface_hub`` (imported here, only then). The file lands in huggingface_hub's usual cache
(``HF_HOME``/``HF_HUB_CACHE``), and its settings apply: ``HF_TOKEN`` (gated models),
``HF_ENDPOINT`` (a mirror) and ``HF_HUB_OFFLINE`` (no request; the cache only).
"""

from __future__ import annotations

import re
import time
from functools import lru_cache
from pathlib import Path

_REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?$")


class HubUnavailable(Exception):
    """The Hub (or its cache) has no config.json for the model; the message says why."""


def looks_like_repo_id(model: str) -> bool:
    """`model` could name a Hub repository (``name`` or ``org/name``), not a file path."""
    return bool(_REPO_ID.match(model)) and ".." not in model and not model.endswith((".git", ".json"))


RETRY_AFTER_S = 300.0
"""A failed fetch is answered from memory for this long (each fetch retries with back-off for
about half a minute; a search asks for its model many times, in every worker)."""
_failed: dict[str, tuple[float, str]] = {}


@lru_cache(maxsize=64)
def hub_config(model: str) -> Path:
    """The local path of the model's ``config.json``, fetched from the Hub unless cached (asked
    once per process; a failure is remembered for `RETRY_AFTER_S`, also by forked workers)."""
    failed = _failed.get(model)
    if failed is not None and time.monotonic() - failed[0] < RETRY_AFTER_S:
        raise HubUnavailable(failed[1])
    try:
        from huggingface_hub import hf_hub_download
    except ImportError as exc:  # pragma: no cover - it is a dependency
        raise HubUnavailable(f"huggingface_hub cannot be imported ({exc})") from None
    try:
        return Path(hf_hub_download(model, "config.json"))
    except Exception as exc:  # noqa: BLE001 - every failure means "no config from the Hub"
        lines = str(exc).strip().splitlines()
        why = f"{type(exc).__name__}: {lines[0][:300] if lines else ''}"
        _failed[model] = (time.monotonic(), why)
        raise HubUnavailable(why) from None
