"""`servesim recommend` does bounded work before any check: screening, search spaces, prompts."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from search_helpers import config
from servesim.errors import TraceError
from servesim.config import parse_config
from servesim.search.profile import PROFILE_REQUESTS, profile
from servesim.traffic.applied_compute import read_applied_compute


def _predict_config(**changes: Any) -> dict[str, Any]:
    """BASE as a plain predict config (one shape, no domains, no search sections)."""
    data = config(**changes)
    worker = data["engine"]["workers"]["aggregated"]
    worker["parallelism"] = {"tensor": 1}
    worker["scheduler"]["max_sequences"] = 8
    data.pop("optimization")
    data.pop("optimizer")
    return data


def test_screening_profile_of_1e8_requests_is_bounded() -> None:
    started = time.perf_counter()
    prof = profile(parse_config(_predict_config(**{"traffic.stop.requests": 10**8})))
    assert time.perf_counter() - started < 10  # the whole workload took minutes and gigabytes
    assert prof.requests == 10**8 and prof.sessions == 10**8
    assert prof.isl == 512 and prof.osl == 32


def test_profile_sample_keeps_the_whole_workloads_counts_and_means() -> None:
    data = _predict_config(**{"traffic.stop.sessions": 3 * PROFILE_REQUESTS, "traffic.stop.requests": None,
                              "traffic.source": {"type": "synthetic-session", "new_input_tokens_per_turn": 64,
                                                 "output_tokens_per_turn": 8,
                                                 "session": {"turns": 4, "inter_turn_delay_ms": 10}}})
    prof = profile(parse_config(data))
    assert prof.sessions == 3 * PROFILE_REQUESTS and prof.requests == 12 * PROFILE_REQUESTS
    assert prof.turns_per_session == 4
    small = profile(parse_config(config(data, **{"traffic.stop.sessions": 50})))
    assert (prof.isl, prof.osl) == (small.isl, small.osl)


def test_poisson_span_of_many_sessions_is_not_drawn() -> None:
    data = _predict_config(**{"traffic.stop.requests": 10**8, "traffic.load": {"type": "poisson", "requests_per_second": 100.0}})
    cfg = parse_config(data)
    started = time.perf_counter()
    arrivals = profile(cfg).arrivals(cfg)
    assert time.perf_counter() - started < 10
    assert abs(arrivals.span_ms - (10**8 - 1) * 10.0) < 1


def _agentic_row(turns: int, tool_output: int = 1) -> dict[str, Any]:
    return {"num_turns": turns, "input_prompt_length": 1, "assistant_response_length": [1] * turns,
            "tool_call_output_length": [tool_output] * turns, "tool_call_latency": [0] * turns,
            "final_assistant_response_length": 1}


def test_applied_compute_prompt_growth_beyond_max_tokens_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "agentic.jsonl"
    path.write_text(json.dumps(_agentic_row(2)) + "\n" + json.dumps(_agentic_row(2, 10**12)) + "\n"
                    + json.dumps(_agentic_row(3, 4 * 10**8)) + "\n")
    started = time.perf_counter()
    with pytest.raises(TraceError) as info:
        read_applied_compute(str(path), 1)
    assert time.perf_counter() - started < 5  # a 10^12-token tool output hung
    assert f"{path}:2" in str(info.value) and "at most 1,000,000,000" in str(info.value)
    path.write_text(json.dumps(_agentic_row(3, 4 * 10**8)) + "\n")
    with pytest.raises(TraceError) as info:
        read_applied_compute(str(path), 1)
    assert f"{path}:1" in str(info.value) and "turn 3's prompt" in str(info.value)


def test_applied_compute_long_sessions_do_not_copy_their_history(tmp_path: Path) -> None:
    path = tmp_path / "agentic.jsonl"
    path.write_text(json.dumps(_agentic_row(100_000)) + "\n")
    started = time.perf_counter()
    workload = read_applied_compute(str(path), 1)  # one id per token: the copies were 10^10 ids
    assert time.perf_counter() - started < 10
    turns = workload.sessions[0].turns
    assert len(turns) == 100_001 and turns[-1].input_length == 200_001
    assert all(len(t.block_values) == t.input_length for t in (turns[0], turns[5_000], turns[-1]))
    assert list(turns[3].block_values) == list(turns[-1].block_values[:turns[3].input_length])
