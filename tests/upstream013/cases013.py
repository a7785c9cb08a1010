"""What every test of this folder shares: AISimulate 0.13's recorded runs (`tests/cases/upstream013`,
recorded by `benchmarks/record_013_*.py`; the reference is never run by the tests), servesim's
run of a recorded config under `compat: upstream-0.13` (0.13's pass convention, docs/timing.md),
and the field-for-field comparison of the two reports.

Tests elsewhere (the weka and agentic 0.13 checks) select the same switch with `upstream013(config)`
on a config mapping, or `compat: upstream-0.13` in a config file.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from conftest import CASES, HOST_FIELDS

from servesim import simulate
from servesim.config.load import parse_config
from servesim.errors import ConfigError

COMPAT = "upstream-0.13"
AIC_REL = 5e-3
"""AIC-timed runs match 0.13 within 0.5 % (issue 34); fixed and polynomial timing exactly."""
SUM_REL = 1e-13
"""Means and sums over requests: 0.13's summation order varies from run to run (last bits)."""


def recorded(name: str) -> dict[str, Any]:
    """One recorded case file of `tests/cases/upstream013` (`name` without `.json`)."""
    return json.loads((CASES / "upstream013" / f"{name}.json").read_text())


def upstream013(config: dict[str, Any]) -> dict[str, Any]:
    """A copy of `config` run under 0.13's pass convention."""
    config = copy.deepcopy(config)
    config["compat"] = COMPAT
    return config


def with_trace(config: dict[str, Any], trace: str | list[dict[str, Any]], tmp_path: Path) -> dict[str, Any]:
    """A copy of `config` reading `trace` (text or rows) from a file in `tmp_path`."""
    text = trace if isinstance(trace, str) else "".join(json.dumps(r) + "\n" for r in trace)
    path = tmp_path / "trace.jsonl"
    path.write_text(text)
    config = copy.deepcopy(config)
    config["traffic"]["source"]["paths"] = [str(path)]
    return config


def run(config: dict[str, Any], *, compat: str | None = COMPAT, **engine: Any) -> dict[str, Any]:
    """servesim's report (per-request records included) of `config` under `compat` (0.13's pass
    convention unless told otherwise), with `engine` keys set on top."""
    config = copy.deepcopy(config)
    config["engine"].update(engine)
    if compat is not None:
        config["compat"] = compat
    return simulate(parse_config(config), capture_per_request=True).to_dict()


def _expected(value: Any, rel: float) -> Any:
    if isinstance(value, float) and not isinstance(value, bool):
        return pytest.approx(value, rel=rel, abs=rel * 1e-3)
    return value


def assert_summary_matches(ours: dict[str, Any], theirs: dict[str, Any], *, rel: float = SUM_REL,
                           skip: Iterable[str] = (), at_least: int = 60) -> list[str]:
    """Every scalar summary field both reports have (host timings and `skip` aside) is equal,
    floats within `rel`; returns the compared keys. Fails when fewer than `at_least` are shared."""
    left_out = set(HOST_FIELDS) | set(skip)
    shared = [k for k in theirs if k in ours and k not in left_out and not isinstance(theirs[k], (dict, list))]
    assert len(shared) >= at_least, shared
    for key in shared:
        assert ours[key] == _expected(theirs[key], rel), key
    return shared


def assert_records_match(ours: list[dict[str, Any]], theirs: list[dict[str, Any]], fields: Iterable[str], *,
                         key: str = "session_id", rel: float = SUM_REL) -> None:
    """The same requests (by `key`), each with `fields` equal (floats within `rel`)."""
    mine = {r[key]: r for r in ours}
    assert sorted(mine) == sorted(r[key] for r in theirs)
    for record in theirs:
        other = mine[record[key]]
        for field in fields:
            assert other.get(field) == _expected(record.get(field), rel), (record[key], field)


def assert_reports_match(ours: dict[str, Any], theirs: dict[str, Any], record_fields: Iterable[str], *,
                         rel: float = SUM_REL, key: str = "session_id", at_least: int = 60) -> None:
    """`assert_summary_matches` and `assert_records_match` of two whole reports."""
    assert_summary_matches(ours, theirs, rel=rel, at_least=at_least)
    assert_records_match(ours["per_request"], theirs["per_request"], record_fields, key=key, rel=rel)


def assert_verdict_matches(exit_code: int, config: dict[str, Any], named: str | None, *,
                           accepted: tuple[int, ...] = (0,)) -> None:
    """servesim's verdict on `config` is 0.13's: accepted where 0.13 exited with a code in
    `accepted` (and `named` is None then); else 0.13 exited 2 and servesim's config error
    names `named` (the key and the rule)."""
    if exit_code in accepted:
        parse_config(config)
        assert named is None, f"servesim accepts a config it should refuse with {named!r}"
        return
    assert exit_code == 2
    with pytest.raises(ConfigError) as info:
        parse_config(config)
    assert named is not None and named in str(info.value)
