"""Synthetic workloads (`synthetic`, `synthetic-session`) and open-loop arrival schedules.

Prompts are built in engine-block units: every block is a fresh unique value, except the first
``round(num_blocks × shared_prefix_ratio)`` blocks of each turn, which are the session's prefix
group's values (groups drawn from the reference's structural RNG, seed 0). With
``cached_prefix_tokens`` C (upstream 0.13, single-turn only) the first C tokens of every prompt
are one shared prefix, token-exact: the unit is then gcd(C, block size) tokens, so a block
holding the prefix's end and fresh tokens is unique, as in 0.13.

Sessions and arrival times are made as the replay reaches them, so a run of 10⁸ requests starts
at once and holds only the sessions in flight.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from itertools import accumulate
from typing import overload

from servesim.runtime.rng import StdRng, poisson_arrivals
from servesim.traffic.workload import Session, Turn, Workload

STRUCTURAL_SEED = 0


def _round_half_away(x: float) -> int:
    return int(math.floor(x + 0.5)) if x >= 0 else -int(math.floor(-x + 0.5))


class _Blocks(Sequence[int]):
    """A turn's block values: its prefix group's shared values, then its fresh ones (both
    ranges, so a huge prompt costs nothing until sliced)."""

    __slots__ = ("shared", "fresh")

    def __init__(self, shared: range, fresh: range) -> None:
        self.shared = shared
        self.fresh = fresh

    def __len__(self) -> int:
        return len(self.shared) + len(self.fresh)

    @overload
    def __getitem__(self, index: int) -> int: ...
    @overload
    def __getitem__(self, index: slice) -> list[int]: ...
    def __getitem__(self, index: int | slice) -> int | list[int]:
        if isinstance(index, slice):
            shared = self.shared
            start, stop, step = index.indices(len(self))
            if step != 1:
                return [self[i] for i in range(start, stop, step)]
            n = len(shared)
            return [*shared[start:stop], *self.fresh[max(0, start - n):max(0, stop - n)]]
        if index < 0:
            index += len(self)
        n = len(self.shared)
        return self.shared[index] if index < n else self.fresh[index - n]


class SyntheticSessions(Sequence[Session]):
    """`count` sessions of `turns` constant-length turns, made on demand.

    Session i's fresh block values follow from i alone; its prefix group is the structural
    RNG's i-th draw, so sessions are cheapest read in order (reading backwards replays the
    draws from the start).
    """

    def __init__(self, count: int, input_tokens: int, output_tokens: int, block_size: int, turns: int,
                 shared_prefix_ratio: float, prefix_groups: int, inter_turn_delay_ms: float,
                 cached_prefix_tokens: int = 0) -> None:
        self.size = count
        self.turns = turns
        self.input_tokens = input_tokens
        self.output_tokens = output_tokens
        self.block_size = block_size
        self.delay_ms = inter_turn_delay_ms
        self.groups = prefix_groups if shared_prefix_ratio > 0 and prefix_groups > 0 else 0
        num_blocks = -(-input_tokens // block_size)
        self.shared = min(num_blocks, _round_half_away(num_blocks * shared_prefix_ratio)) if self.groups else 0
        self.fresh = num_blocks - self.shared
        # Group g's shared block j has value g * shared + j; fresh values follow all group values.
        self.first_fresh = prefix_groups * self.shared
        self.unique_from = min(self.shared * block_size, input_tokens)
        self.common: range | None = None
        """The shared prefix's unit values (`cached_prefix_tokens`), or None."""
        if cached_prefix_tokens > 0:
            assert turns == 1 and not self.groups, "cached_prefix_tokens is for single-turn sources"
            unit = math.gcd(cached_prefix_tokens, block_size)
            self.block_size = unit
            self.common = range(cached_prefix_tokens // unit)
            self.fresh = -(-(input_tokens - cached_prefix_tokens) // unit)
            self.first_fresh = len(self.common)
            self.unique_from = cached_prefix_tokens
        self._rng: StdRng | None = None
        self._drawn = 0
        self._group = 0

    @property
    def num_requests(self) -> int:
        return self.size * self.turns

    @property
    def single_turn(self) -> bool:
        return self.turns == 1

    def __len__(self) -> int:
        return self.size

    @overload
    def __getitem__(self, index: int) -> Session: ...
    @overload
    def __getitem__(self, index: slice) -> list[Session]: ...
    def __getitem__(self, index: int | slice) -> Session | list[Session]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self.size))]
        if not 0 <= index < self.size:
            raise IndexError(index)
        if self.turns == 1 and not self.groups:  # the common case, made directly
            start = self.first_fresh + index * self.fresh
            fresh = range(start, start + self.fresh)
            values: Sequence[int] = fresh if self.common is None else _Blocks(self.common, fresh)
            return Session(f"session_{index}", [Turn(values, self.block_size, self.input_tokens,
                                                     self.output_tokens, 0.0, unique_from=self.unique_from)])
        first_shared = self._group_of(index) * self.shared if self.groups else 0
        shared = range(first_shared, first_shared + self.shared)
        unique_from = self.unique_from
        turns = []
        for k in range(self.turns):
            start = self.first_fresh + (index * self.turns + k) * self.fresh
            fresh = range(start, start + self.fresh)
            turns.append(Turn(_Blocks(shared, fresh) if shared else fresh, self.block_size, self.input_tokens,
                              self.output_tokens, self.delay_ms if k else 0.0, unique_from=unique_from))
        return Session(f"session_{index}", turns)

    def _group_of(self, index: int) -> int:
        """The prefix group of session `index` (the structural RNG's index-th draw)."""
        if not self.groups:
            return 0
        if self._rng is None or index < self._drawn - 1:
            self._rng, self._drawn = StdRng(STRUCTURAL_SEED), 0
        while self._drawn <= index:
            self._group = self._rng.random_range(self.groups)
            self._drawn += 1
        return self._group


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
    cached_prefix_tokens: int = 0,
) -> Workload:
    """`num_sessions` sessions of `turns` turns with constant lengths (the first
    `cached_prefix_tokens` prompt tokens shared by all)."""
    sessions = SyntheticSessions(num_sessions, input_tokens, output_tokens, block_size, turns,
                                 shared_prefix_ratio, prefix_groups, inter_turn_delay_ms, cached_prefix_tokens)
    return Workload(sessions, accumulate=turns > 1)


def poisson_schedule(count: int, rate_per_s: float, seed: int) -> Iterator[float]:
    """Open-loop Poisson first-arrival times in ms (seeded exactly like the reference), made as
    they are read."""
    return poisson_arrivals(rate_per_s, count, seed)


def constant_rate_schedule(count: int, rate_per_s: float) -> Iterator[float]:
    """First-arrival times in ms at a fixed gap, accumulated by repeated addition."""
    interval_ms = 1000.0 / rate_per_s
    gap = 1000.0 / (1000.0 / interval_ms)
    times = accumulate((gap for _ in range(count - 1)), initial=0.0)
    return times if count > 0 else iter(())


__all__ = ["SyntheticSessions", "constant_rate_schedule", "poisson_schedule", "synthetic_workload"]
