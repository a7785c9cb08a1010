"""The `servesim` command's pydantic, without the plugin machinery it does not use.

The first time pydantic builds a model it asks `pydantic.plugin._loader` for plugins, and that
module imports `importlib.metadata` (and through it `email`, `zipfile`, `csv`, …: ~10 ms of a
short run) even when ``PYDANTIC_DISABLE_PLUGINS`` tells it to load none. The command sets that
variable unless the user did (`servesim.cli.run`); while it disables every plugin, a stand-in
takes the loader's place and answers "no plugins" without those imports. It hands over to
pydantic's own loader as soon as the variable allows plugins, or for anything else asked of it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from importlib import import_module
from types import ModuleType

LOADER = "pydantic.plugin._loader"
_NONE_WANTED = ("__all__", "1", "true")
"""The ``PYDANTIC_DISABLE_PLUGINS`` values for which pydantic's loader finds no plugin."""


def _none_wanted() -> bool:
    return os.environ.get("PYDANTIC_DISABLE_PLUGINS") in _NONE_WANTED


def _pydantic_loader() -> ModuleType:
    """Pydantic's own loader, imported in the stand-in's place."""
    if getattr(sys.modules.get(LOADER), "__servesim_stand_in__", False):
        del sys.modules[LOADER]
    return import_module(LOADER)


def _get_plugins() -> Iterable[object]:
    return () if _none_wanted() else _pydantic_loader().get_plugins()


def _anything_else(name: str) -> object:
    if name.startswith("__"):  # what the import system looks up (`__path__`, …)
        raise AttributeError(name)
    return getattr(_pydantic_loader(), name)


def skip_loader() -> None:
    """Put the stand-in in place of pydantic's plugin loader when no plugin is wanted and the
    loader is not imported yet."""
    if not _none_wanted() or LOADER in sys.modules:
        return
    stand_in = ModuleType(LOADER, __doc__)
    stand_in.__dict__.update(__servesim_stand_in__=True, get_plugins=_get_plugins, __getattr__=_anything_else)
    sys.modules[LOADER] = stand_in
