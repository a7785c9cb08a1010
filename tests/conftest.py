"""Fixtures shared across the test folders."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from servesim import aicdata


@pytest.fixture(scope="session", autouse=True)
def _no_real_hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The suite never asks the real Hugging Face Hub: offline, with an empty cache of its own
    (huggingface_hub reads these when first imported; tests of the Hub run their own server)."""
    saved = {k: os.environ.get(k) for k in ("HF_HUB_OFFLINE", "HF_HOME")}
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["HF_HOME"] = str(tmp_path_factory.mktemp("hf-home"))
    yield
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture(scope="session")
def reference_systems() -> Path:
    """servesim's copy of the reference's AIC database with the h100_sxm and h200_sxm data —
    fetched into servesim's cache on first use, as a run would (`servesim.aicdata`)."""
    return aicdata.ensure(["h100_sxm", "h200_sxm"])
