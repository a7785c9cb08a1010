"""Fixtures and helpers shared across the test folders (`tests/` is on the import path, so test
modules import the helpers with ``from conftest import ...``)."""

from __future__ import annotations

import json
import math
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from servesim import simulate
from servesim.config import load_config

CASES = Path(__file__).parent / "cases"
"""The reference's recorded runs (see cases/README.md)."""
REFERENCE = Path(__file__).resolve().parents[1].parent / "shared" / "reference"
HOST_FIELDS = ("wall_time_ms", "processed_tokens_per_s", "processed_output_tokens_per_s")
"""Report fields that measure the host, not the simulation."""


@pytest.fixture(scope="session")
def reference_systems() -> Path:
    """The reference's bundled AIC systems directory (`../shared/reference`); skips the test when
    it is not installed (never installs anything)."""
    try:
        check = subprocess.run([str(REFERENCE / "install.sh"), "--check"], capture_output=True, timeout=60)
        out = subprocess.run([str(REFERENCE / "aic-systems-path.sh")], capture_output=True, text=True,
                             timeout=60) if check.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        out = None
    path = Path(out.stdout.strip()) if out is not None and out.returncode == 0 and out.stdout.strip() else None
    if path is None or not (path / "data").is_dir():
        pytest.skip("the reference's AIC systems directory is not installed (../shared/reference)")
    return path


def without_host_fields(report: Mapping[str, Any]) -> dict[str, Any]:
    """A report without the host wall-time fields."""
    return {key: value for key, value in report.items() if key not in HOST_FIELDS}


def canonical(report: Mapping[str, Any]) -> str:
    """A report as sorted JSON without host fields: equal strings = byte-identical reports."""
    return json.dumps(without_host_fields(report), sort_keys=True)


def run_case(config: Path, **options: Any) -> dict[str, Any]:
    """servesim's report, per-request records included, for the config file at `config`."""
    return simulate(load_config(config), capture_per_request=True, **options).to_dict()


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


def assert_matches_case(config: Path, report: Mapping[str, Any]) -> None:
    """Every summary field and every per-request record (matched by session and turn, uuids
    aside) equals the reference's recorded run of `config`."""
    expected = json.loads(_recorded(config, "report", ".json").read_text())
    assert set(report) - {"per_request"} == set(expected)
    for key, value in expected.items():
        if key not in HOST_FIELDS:
            assert_same_value(key, value, report[key])
    want = [json.loads(line) for line in _recorded(config, "requests", ".jsonl").read_text().splitlines()]
    got = {(r["session_id"], r["turn_index"]): r for r in report["per_request"]}
    assert len(got) == len(want)
    for record in want:
        mine = got[(record["session_id"], record["turn_index"])]
        assert set(mine) == set(record)
        for field, value in record.items():
            if field != "uuid":
                assert mine[field] == value, (record["session_id"], field, value, mine[field])
