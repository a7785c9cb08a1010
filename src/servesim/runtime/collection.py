"""Pausing Python's cyclic garbage collector around phases that make many long-lived objects."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collection_paused(*, stay_frozen: bool) -> Iterator[None]:
    """Run the block without the cyclic garbage collector, then move what it made to the oldest
    generation (`gc.freeze`), so the next collections do not walk it all again. With
    `stay_frozen` those objects stay exempt from collection for good (a command's start-up:
    modules, classes, pydantic's schemas); otherwise they join the oldest generation at once
    (`gc.unfreeze`: a replay's objects, which die with the run)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if not stay_frozen:
            gc.unfreeze()
        if enabled:
            gc.enable()
