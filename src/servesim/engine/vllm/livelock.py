"""Detects a vLLM rank that preempts and readmits the same requests for ever.

Generated tokens only grow and every request's output is bounded, so a rank that keeps running
without a new request reaching it must eventually stop emitting tokens; from then on its state
space is finite and a livelock repeats a state exactly. The guard fingerprints the rank after
every *futile* pass (a preemption, nothing emitted, finished or rejected) and fails the run the
first time a fingerprint comes back. Any progress or queue change forgets what it has seen.
The reference spins for ever in that state (its clock advances, so only a time cap ends it);
servesim stops with an error instead (docs/design.md, "Where servesim differs from the reference").
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING, Protocol

from servesim.errors import RunError

if TYPE_CHECKING:
    from servesim.engine.cache.kv import BlockPool
    from servesim.engine.rank import RankConfig, RankPass
    from servesim.engine.request import EngineRequest


class WatchedRank(Protocol):
    """What the guard reads of a vLLM rank (`servesim.engine.vllm.core.VllmRank`)."""

    @property
    def config(self) -> RankConfig: ...
    @property
    def pool(self) -> BlockPool: ...
    @property
    def running(self) -> Collection[EngineRequest]: ...
    @property
    def waiting(self) -> Collection[EngineRequest]: ...


class LivelockGuard:
    """The fingerprints of a rank's futile passes since it last made progress."""

    __slots__ = ("seen",)

    def __init__(self) -> None:
        self.seen: set[tuple] = set()

    def forget(self) -> None:
        """The rank's work changed from outside (a request arrived or left)."""
        if self.seen:
            self.seen.clear()

    def after_pass(self, rank: WatchedRank, result: RankPass) -> None:
        """Remember a futile pass's end state; fail if the rank was in it before."""
        if result.emitted or result.finished or result.rejected or not result.preemptions:
            self.forget()
            return
        state = fingerprint(rank)
        if state in self.seen:
            raise RunError(
                f"a vLLM rank with FIFO preemption evicts and readmits its "
                f"{len(rank.running) + len(rank.waiting)} requests for ever without emitting a token "
                f"(a KV pool of {rank.config.num_blocks} blocks); the reference spins for ever here")
        self.seen.add(state)


def fingerprint(rank: WatchedRank) -> tuple:
    """Everything a vLLM rank's next passes depend on when no token is emitted."""
    return (tuple(map(_request_state, rank.running)), tuple(map(_request_state, rank.waiting)),
            rank.pool.fingerprint())


def _request_state(r: EngineRequest) -> tuple:
    """A request's progress, its lease's shape and its still-resident freed blocks."""
    return (r.rid, r.computed, r.generated, r.preempted, len(r.lease), r.lease.count(None),
            sum(block.refs >= 0 for block in r.own_blocks))
