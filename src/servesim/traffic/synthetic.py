"""Synthetic workloads (`synthetic`, `synthetic-session`) and open-loop arrival schedules.

Prompts are built in engine-block units: every block is a fresh unique value, except the first
``round(num_blocks × shared_prefix_ratio)`` blocks of each turn, which are the session's prefix
group's values (groups drawn from the reference's structural RNG, seed 0).
"""

from __future__ import annotations

import math

from servesim.runtime.rng import StdRng, poisson_arrival_times
from servesim.traffic.workload import Session, Turn, Workload

STRUCTURAL_SEED = 0


def _round_half_away(x: float) -> int:
    return int(math.floor(x + 0.5)) if x >= 0 else -int(math.floor(-x + 0.5))


def synthetic_workload(
    num_sessions: int,
    input_tokens: int,
    output_tokens: int,
    block_size: int,
    *,
    turns: int = 1,
    shared_prefix_ratio: float = 0.0,
    prefix_groups: int = 0,
    inter_turn_delay_ms: float = 0.0,
) -> Workload:
    """`num_sessions` sessions of `turns` turns with constant lengths."""
    num_blocks = -(-input_tokens // block_size)
    sharing = shared_prefix_ratio > 0 and prefix_groups > 0
    shared = min(num_blocks, _round_half_away(num_blocks * shared_prefix_ratio)) if sharing else 0
    rng = StdRng(STRUCTURAL_SEED) if sharing else None
    # Group g's shared block j gets value g * shared + j; fresh values follow all group values.
    next_fresh = prefix_groups * shared
    sessions = []
    for index in range(num_sessions):
        group = rng.random_range(prefix_groups) if rng is not None else 0
        group_values = list(range(group * shared, group * shared + shared))
        session_turns = []
        for turn_index in range(turns):
            fresh = num_blocks - shared
            fresh_values = range(next_fresh, next_fresh + fresh)
            next_fresh += fresh
            values = group_values + list(fresh_values) if group_values else fresh_values
            delay = inter_turn_delay_ms if turn_index else 0.0
            session_turns.append(Turn(values, block_size, input_tokens, output_tokens, delay,
                                      unique_from=min(shared * block_size, input_tokens)))
        sessions.append(Session(f"session_{index}", session_turns))
    return Workload(sessions, accumulate=turns > 1)


def poisson_schedule(count: int, rate_per_s: float, seed: int) -> list[float]:
    """Open-loop Poisson first-arrival times in ms (seeded exactly like the reference)."""
    return poisson_arrival_times(rate_per_s, count, seed)


def constant_rate_schedule(count: int, rate_per_s: float) -> list[float]:
    """First-arrival times in ms at a fixed gap, accumulated by repeated addition."""
    interval_ms = 1000.0 / rate_per_s
    gap = 1000.0 / (1000.0 / interval_ms)
    times = []
    t = 0.0
    for _ in range(count):
        times.append(t)
        t += gap
    return times
