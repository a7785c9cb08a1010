"""`servesim recommend` does bounded work before any check: screening, search spaces, prompts."""

from __future__ import annotations

import time
from typing import Any

from search_helpers import config
from servesim.config import parse_config
from servesim.search.profile import PROFILE_REQUESTS, profile


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
