"""Inputs that used to be accepted silently: refused with a reason naming the key or file:line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from search_helpers import config
from servesim.errors import ConfigError, TraceError
from servesim.search.run import Search
from servesim.search.schema import RecommendConfig
from servesim.traffic.mooncake import read_mooncake

CASES = Path(__file__).parents[1] / "cases" / "traffic" / "dynamo_agentic-sglang-polynomial"


def test_a_grid_over_a_continuous_knob_is_refused_naming_it() -> None:
    key = "engine.workers.aggregated.kv_cache.capacity.memory_fraction"
    data = config(**{"optimizer.algorithm": "grid",
                     "engine.workers.aggregated.kv_cache": {"block_size": 16, "capacity": {
                         "memory_fraction": {"range": {"min": 0.5, "max": 0.9}}}}})
    with pytest.raises(ConfigError, match=f"{key}: optimizer.algorithm grid needs a finite domain"):
        Search(RecommendConfig.model_validate(data)).run()


def test_an_unknown_dynamo_parent_session_names_the_line(tmp_path: Path) -> None:
    from servesim.traffic.dynamo import read_dynamo
    from servesim.traffic.dynamo_agentic import agentic_graph

    trace = tmp_path / "trace.jsonl"
    text = (CASES / "trace-0.jsonl").read_text()
    assert '"parent_session_id": "child0"' in text
    trace.write_text(text.replace('"parent_session_id": "child0"', '"parent_session_id": "nosuch"'))
    with pytest.raises(TraceError, match=rf"{trace}:\d+: session child1 names parent_session_id nosuch"):
        requests, tools, block_size = read_dynamo([str(trace)], None)
        agentic_graph(requests, tools, block_size, 1.0)


@pytest.mark.parametrize("hint, value", [("strict_priority", False), ("strict_priority", -1),
                                         ("priority", True), ("priority", 1.5), ("policy_class", 3)])
def test_mooncake_router_hints_are_typed(tmp_path: Path, hint: str, value: object) -> None:
    trace = tmp_path / "trace.jsonl"
    rows = [{"timestamp": 0, "input_length": 10, "output_length": 2, "hash_ids": [1]},
            {"timestamp": 5, "input_length": 10, "output_length": 2, "hash_ids": [2], hint: value}]
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(TraceError, match=rf"{trace}:2: .*{hint}"):
        read_mooncake(str(trace), 16)


def test_mooncake_router_hints_of_the_right_type_are_accepted(tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    trace.write_text(json.dumps({"timestamp": 0, "input_length": 10, "output_length": 2, "hash_ids": [1],
                                 "priority": -3, "strict_priority": 2, "policy_class": "batch"}) + "\n")
    assert read_mooncake(str(trace), 16).num_requests == 1
