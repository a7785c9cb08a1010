"""Fixtures and helpers shared across the test folders (`tests/` is on the import path, so test
modules import the helpers with ``from conftest import ...``)."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from servesim import simulate
from servesim.config import SimConfig, load_config
from servesim.perf import aicdata
from servesim.report.summary import SERVESIM_FIELDS, SERVESIM_RECORD_FIELDS

from chromium import Browser, open_browser

CASES = Path(__file__).parent / "cases"
"""The reference's recorded runs (see cases/README.md)."""
HOST_FIELDS = ("wall_time_ms", "processed_tokens_per_s", "processed_output_tokens_per_s")
"""Report fields that measure the host, not the simulation."""


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


@pytest.fixture(scope="session", autouse=True)
def _own_timing_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The suite starts from an empty timing cache of its own (`servesim.perf.timingcache`), so
    AIC lookups are computed, not read from the user's cache, and the user's is left alone."""
    saved = os.environ.get("SERVESIM_TIMING_CACHE")
    os.environ["SERVESIM_TIMING_CACHE"] = str(tmp_path_factory.mktemp("timing-cache"))
    yield
    if saved is None:
        os.environ.pop("SERVESIM_TIMING_CACHE", None)
    else:
        os.environ["SERVESIM_TIMING_CACHE"] = saved


@pytest.fixture(scope="session")
def reference_systems() -> Path:
    """servesim's copy of the reference's AIC database with the h100_sxm and h200_sxm data —
    fetched into servesim's cache on first use, as a run would (`servesim.perf.aicdata`)."""
    return aicdata.ensure(["h100_sxm", "h200_sxm"])


@pytest.fixture(scope="session")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Browser:
    """A real headless Chromium for the HTML report tests (see chromium.py)."""
    return open_browser(tmp_path_factory.mktemp("chromium"))


def without_host_fields(report: Mapping[str, Any]) -> dict[str, Any]:
    """A report without the host wall-time fields."""
    return {key: value for key, value in report.items() if key not in HOST_FIELDS}


def canonical(report: Mapping[str, Any]) -> str:
    """A report as sorted JSON without host fields: equal strings = byte-identical reports."""
    return json.dumps(without_host_fields(report), sort_keys=True)


def reference_config(config: Path, overrides: Sequence[str] = ()) -> SimConfig:
    """The config file at `config` under `compat: reference`: the reference's timing model, report
    fields and handling of unservable requests. Every parity test runs its case through this."""
    return load_config(config, [*overrides, "compat=reference"])


def run_case(config: Path, *, compat: str | None = "reference", **options: Any) -> dict[str, Any]:
    """servesim's report, per-request records included, for the config file at `config` (under
    `compat: reference` unless `compat` is None: servesim's defaults)."""
    loaded = reference_config(config) if compat == "reference" else load_config(config)
    return simulate(loaded, capture_per_request=True, **options).to_dict()


def assert_same_value(where: str, expected: object, actual: object) -> None:
    """Exact equality (type included), except means and standard deviations, which the reference
    sums in a run-dependent order (1e-12 relative). `where` ends with the field name."""
    field = where.rsplit(".", 1)[-1]
    if isinstance(expected, float) and field.split("_", 1)[0] in ("mean", "std"):
        assert isinstance(actual, float), (where, expected, actual)
        assert math.isclose(actual, expected, rel_tol=1e-12, abs_tol=1e-12), (where, expected, actual)
    else:
        assert actual == expected and type(actual) is type(expected), (where, expected, actual)


def _recorded(config: Path, kind: str, ext: str) -> Path:
    """The reference output next to `config` (config-x.yaml -> report-x.json, requests-x.jsonl)."""
    return config.with_name(config.name.replace("config", kind, 1)).with_suffix(ext)


def assert_same_summary_fields(report: Mapping[str, Any], expected: Mapping[str, Any]) -> None:
    """Exactly the reference's summary fields (a report under `compat: reference`)."""
    assert set(report) - {"per_request"} == set(expected)
    assert not set(SERVESIM_FIELDS) & set(report)


def assert_same_record_fields(mine: Mapping[str, Any], record: Mapping[str, Any]) -> None:
    """Exactly the reference's record fields (a report under `compat: reference`)."""
    assert set(mine) == set(record)
    assert not set(SERVESIM_RECORD_FIELDS) & set(mine)


def assert_matches_case(config: Path, report: Mapping[str, Any]) -> None:
    """Every summary field and every per-request record (matched by session and turn, uuids
    aside) equals the reference's recorded run of `config`."""
    expected = json.loads(_recorded(config, "report", ".json").read_text())
    assert_same_summary_fields(report, expected)
    for key, value in expected.items():
        if key not in HOST_FIELDS:
            assert_same_value(key, value, report[key])
    want = [json.loads(line) for line in _recorded(config, "requests", ".jsonl").read_text().splitlines()]
    got = {(r["session_id"], r["turn_index"]): r for r in report["per_request"]}
    assert len(got) == len(want)
    for record in want:
        mine = got[(record["session_id"], record["turn_index"])]
        assert_same_record_fields(mine, record)
        for field, value in record.items():
            if field != "uuid":
                assert mine[field] == value, (record["session_id"], field, value, mine[field])
