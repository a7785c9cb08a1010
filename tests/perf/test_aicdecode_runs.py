"""Whole runs with the batched decode lookup on and off (`servesim.perf.aicdecode`): the same report
and per-request records, under servesim's defaults (fused mixed passes) and `compat: reference`.

The lookup switches on after `aic.BATCHED_AFTER_S` of engine decode time; here that is set to 0 so
the batched path answers from the first long-context question, and its use is counted so a run
that never reached it cannot pass for one that did.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from servesim import simulate
from servesim.config import parse_config
from servesim.perf import aic, aicdecode, timingcache

from conftest import canonical

LLAMA = "meta-llama/Meta-Llama-3.1-8B"


@pytest.fixture(autouse=True)
def _database(reference_systems: Path) -> None:
    """Every test here uses servesim's default database (fetched once)."""


def _config(compat: str | None) -> dict[str, Any]:
    worker = {"scheduler": {"max_batched_tokens": 8192, "max_sequences": 8},
              "kv_cache": {"block_size": 16}}
    data: dict[str, Any] = {
        "engine": {"model": LLAMA, "hardware": "h200_sxm", "backend": "vllm",
                   "workers": {"aggregated": worker}},
        # prompts past the attention table's sequence range, where the batched blocks apply
        "traffic": {"source": {"type": "synthetic", "input_tokens": 40000, "output_tokens": 150},
                    "load": {"type": "constant_rate", "requests_per_second": 4.0},
                    "stop": {"requests": 6}}}
    if compat is not None:
        data["compat"] = compat
    return data


def _fresh_process_state() -> None:
    """Forget every in-process AIC timing model, memo of answers and lookup, as a new process
    would (the compiled engines stay: they answer the same)."""
    aic._TIMINGS.clear()
    aic._LOOKUPS.clear()
    timingcache._MEMOS.clear()


def _run(data: dict[str, Any]) -> str:
    _fresh_process_state()
    return canonical(simulate(parse_config(data), capture_per_request=True).to_dict())


@pytest.mark.parametrize("compat", [None, "reference"])
def test_a_run_is_byte_identical_with_the_batched_lookup_on_and_off(
        monkeypatch: pytest.MonkeyPatch, compat: str | None) -> None:
    monkeypatch.setenv("SERVESIM_TIMING_CACHE", "off")  # every answer computed, none read back
    data = _config(compat)

    monkeypatch.setenv("SERVESIM_AIC_BATCHED", "0")
    off = _run(data)

    monkeypatch.setenv("SERVESIM_AIC_BATCHED", "1")
    monkeypatch.setattr(aic, "BATCHED_AFTER_S", 0.0)
    used: list[int] = []
    original = aicdecode.DecodeLookup.decode

    def counting(self: Any, batch: int, contexts: list[int]) -> list[float]:
        used.append(len(contexts))
        return original(self, batch, contexts)

    monkeypatch.setattr(aicdecode.DecodeLookup, "decode", counting)
    on = _run(data)
    _fresh_process_state()

    assert sum(used) > 100, "the batched lookup answered the run's long-context decode questions"
    if compat is None:
        # the default's fused timing hands a steady decode batch's passes over as one series
        assert max(used) > 50, "decode series reach the lookup through the fused wrapper"
    assert on == off
