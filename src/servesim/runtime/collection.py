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
    (`gc.unfreeze`). Both touch every frozen object of the process, so only the command line
    (`servesim.cli`), which owns its process, uses this; the library uses `collector_left_alone`."""
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


@contextmanager
def collector_left_alone() -> Iterator[None]:
    """Run the block (a replay, called as a library) without the cyclic garbage collector, then
    hand the collector back enabled or disabled as the caller had it.

    Thresholds and frozen objects are not touched, and no collection is forced: a replay frees its
    objects by reference counting and leaves no reference cycles behind
    (tests/runtime/test_caller_state.py checks both)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
