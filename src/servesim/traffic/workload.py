"""The workload every traffic source is lowered to: sessions of turns, with token content as runs.

Token content is kept as *runs* instead of token lists, so a 100k-token prompt costs a few
tuples, not 100k integers:

* ``(value, count)`` with ``count > 0``: ``count`` copies of ``value`` (a trace hash id expanded
  to a trace block, or a synthetic block);
* ``(value, -count)``: ``count`` consecutive values ``value, value + 1, …`` (generated tokens).

Trace and authored token values are non-negative (trace hash ids are used as token values
directly); generated tokens get fresh negative values, from ``GENERATED_BASE`` upwards, unique
per turn, so a session's history is unique exactly as in the reference.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import repeat

Run = tuple[int, int]
GENERATED_BASE = -(1 << 60)
"""Generated token values count up from here; they stay negative and, unlike values near
-2**62, never share a Python hash (which chained block keys rely on)."""
NEVER = 1 << 62
"""A `unique_from` meaning: every token of the request may also occur in other requests."""


@dataclass(slots=True, eq=False, repr=False)
class Turn:
    """One request of a session, as authored (before accumulation).

    The prompt (for accumulating formats: only this turn's new tokens) is stored compactly as
    one token value per block of `block_size` tokens, truncated to `input_length`.
    """

    block_values: Sequence[int]
    block_size: int
    input_length: int
    max_output_tokens: int
    delay_ms: float = 0.0
    """Think time before this turn, counted from the previous turn's terminal time."""
    output_ids: list[int] | None = None
    """Authored output token ids (length ``max_output_tokens``), if the trace gives them."""
    unique_from: int = NEVER
    """Position of the first prompt token that no other request's prompt contains (the prompt
    length if there is none); blocks from there on can never be shared."""

    def input_runs(self, limit: int | None = None) -> list[Run]:
        """The prompt tokens of this turn as runs (only the first `limit` tokens, if given)."""
        length = self.input_length if limit is None else min(limit, self.input_length)
        return expand_hash_ids(self.block_values, self.block_size, length)


Prompt = list[Run] | Turn
"""A request's prompt as runs, or the turn whose whole prompt it is (its runs made when first
needed: most requests never need them)."""


def prompt_runs(prompt: Prompt) -> list[Run]:
    """The runs of `prompt`."""
    return prompt if isinstance(prompt, list) else prompt.input_runs()


@dataclass(slots=True, eq=False, repr=False)
class Session:
    """An ordered list of turns that never has two turns in flight."""

    session_id: str
    turns: list[Turn]
    first_arrival_ms: float | None = None
    """Arrival of the first turn in open-loop mode (None: arrives at 0)."""


@dataclass(slots=True, eq=False, repr=False)
class Workload:
    """Everything the driver needs: the sessions and how turns build on each other."""

    sessions: Sequence[Session]
    """The sessions in input order (synthetic ones are made as the replay reaches them)."""
    accumulate: bool = False
    """Turn k's prompt = previous prompt + previous outputs + this turn's tokens (delta formats)."""
    origin_ms: float | None = None
    """Under a `trace_timestamps` load, the time first arrivals count from; None: the earliest
    first arrival (trace timestamps are normalised that way, as in the reference)."""
    extra: dict[str, object] = field(default_factory=dict)

    @property
    def num_requests(self) -> int:
        """Turns over all sessions (the requests of the input)."""
        known = getattr(self.sessions, "num_requests", None)
        return known if known is not None else sum(len(s.turns) for s in self.sessions)

    @property
    def single_turn(self) -> bool:
        """Whether every session is a single request."""
        known = getattr(self.sessions, "single_turn", None)
        return known if known is not None else all(len(s.turns) == 1 for s in self.sessions)


def runs_length(runs: Sequence[Run]) -> int:
    """Tokens the runs stand for."""
    return sum(abs(count) for _, count in runs)


def expand_hash_ids(values: Sequence[int], block_size: int, length: int) -> list[Run]:
    """Runs of ``block_size`` copies of each value, truncated to ``length`` tokens."""
    if length <= 0:
        return []
    blocks = -(-length // block_size)
    runs = list(zip(values[:blocks], repeat(block_size)))
    tail = length - (blocks - 1) * block_size
    if runs and tail != block_size:
        runs[-1] = (runs[-1][0], tail)
    return runs


def output_runs(base: int, count: int, authored: list[int] | None) -> list[Run]:
    """Runs of the first ``count`` generated tokens of a turn."""
    if count <= 0:
        return []
    if authored is not None:
        return expand_hash_ids(authored[:count], 1, count)
    return [(base, -count)]
