"""Records spooled as requests end (`simulate(..., spool=...)`, what `servesim predict
--capture-per-request` uses) give byte for byte the files written from kept records."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from conftest import CASES
from test_fast_paths import CONFIGS, parsed

from servesim import simulate
from servesim.api import Report
from servesim.outputs import OutputSet
from servesim.report.render import per_request_element, write_records_jsonl, write_report_json
from servesim.report.spool import RecordSpool
from servesim.report.summary import SERVESIM_RECORD_FIELDS


def _spooled(config: Any, folder: Path, drop: tuple[str, ...] = ()) -> tuple[Report, Report]:
    """The run with its records kept, and the same run with them spooled to a file in `folder`."""
    kept = simulate(parsed(config), capture_per_request=True)
    spool = RecordSpool(folder / "spool", drop=drop)
    return kept, simulate(parsed(config), capture_per_request=True, spool=spool)


def _assert_same_files(kept: Report, spooled: Report, folder: Path) -> None:
    spool = spooled.spool
    assert spool is not None and spooled.per_request is None
    assert kept.per_request is not None and len(spool) == len(kept.per_request)
    write_records_jsonl(kept.per_request, folder / "kept.jsonl")
    spool.write_jsonl(folder / "spooled.jsonl")
    assert (folder / "spooled.jsonl").read_bytes() == (folder / "kept.jsonl").read_bytes()
    # The same summary on both sides: its wall-time fields differ from run to run.
    write_report_json({**spooled.summary, "per_request": kept.per_request}, folder / "kept.json")
    spool.write_report_json(spooled.summary, folder / "spooled.json")
    assert (folder / "spooled.json").read_bytes() == (folder / "kept.json").read_bytes()
    spool.close()


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_spooled_records_are_the_kept_ones(tmp_path, name):
    kept, spooled = _spooled(CONFIGS[name], tmp_path)
    _assert_same_files(kept, spooled, tmp_path)


def test_requests_that_end_out_of_order(tmp_path):
    """The case that matters: the spool's order (as requests end) is not the files' order."""
    kept, spooled = _spooled(CONFIGS["random-router"], tmp_path)
    ends = [record["terminal_time_ms"] for record in kept.per_request or []]
    assert ends != sorted(ends)
    _assert_same_files(kept, spooled, tmp_path)


def test_reference_fields_leave_out_the_rejection_reason(tmp_path):
    config = CASES / "replay" / "12-engine-limits" / "config.yaml"
    kept, spooled = _spooled(config, tmp_path, drop=SERVESIM_RECORD_FIELDS)
    assert any("rejection_reason" in record for record in kept.per_request or [])
    _assert_same_files(kept.reference_fields_only(), spooled, tmp_path)


def test_an_empty_spool_writes_an_empty_array(tmp_path):
    summary = {"completed_requests": 0, "z": [1.5, None]}
    with RecordSpool(tmp_path / "spool") as spool:
        spool.write_report_json(summary, tmp_path / "spooled.json")
        spool.write_jsonl(tmp_path / "spooled.jsonl")
    write_report_json({**summary, "per_request": []}, tmp_path / "kept.json")
    assert (tmp_path / "spooled.json").read_bytes() == (tmp_path / "kept.json").read_bytes()
    assert (tmp_path / "spooled.jsonl").read_bytes() == b""


@pytest.mark.parametrize("config", [
    CASES / "replay" / "11-disagg-kv-transfer" / "config.yaml",
    CASES / "traffic" / "agentic_v2-vllm-fixed-replicas" / "config.yaml",
])
def test_runs_that_need_whole_records_keep_them(tmp_path, config):
    """Disaggregated handoffs stamp a record after it ends; agentic trajectories read every
    record at the end: those runs keep their records and leave the spool unused."""
    with RecordSpool(tmp_path / "spool") as spool:
        report = simulate(config, capture_per_request=True, spool=spool)
        assert report.spool is None and report.per_request and not len(spool)


def test_a_time_series_run_spools_too(tmp_path):
    with RecordSpool(tmp_path / "spool") as spool:
        report = simulate(parsed(CONFIGS["p1-like"]), capture_per_request=True, timeseries=True, spool=spool)
        assert report.spool is spool and len(spool) == 400 and report.timeseries is not None


def test_without_capture_the_spool_is_unused(tmp_path):
    with RecordSpool(tmp_path / "spool") as spool:
        report = simulate(parsed(CONFIGS["p1-like"]), spool=spool)
        assert report.spool is None and report.per_request is None and not len(spool)


def test_scratch_files_are_removed_on_exit_even_after_an_error(tmp_path):
    with pytest.raises(RuntimeError), OutputSet(tmp_path) as outputs:
        scratch = outputs.scratch()
        assert scratch.parent == tmp_path and scratch.name.startswith(".")
        raise RuntimeError("interrupted")
    assert list(tmp_path.iterdir()) == []


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(), children, max_size=4),
    max_leaves=30)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.text(), _JSON, max_size=6))
def test_an_element_is_what_the_standard_encoder_writes_there(record):
    """`per_request_element` (a faster renderer for parsed JSON) writes what `json.dumps` with
    the report's indent and sorted keys writes for an element of the top-level array."""
    expected = json.dumps(record, indent=2, sort_keys=True).replace("\n", "\n    ")
    assert per_request_element(record) == expected


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_an_element_refuses_what_json_cannot_hold(value):
    with pytest.raises(ValueError, match="not JSON compliant"):
        per_request_element({"x": [value]})
