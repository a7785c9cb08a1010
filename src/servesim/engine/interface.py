"""What a scheduler rank offers its worker (`Rank`) and, in disaggregated serving, the cluster
(`HandoffRank`). Every core implements both."""

from __future__ import annotations

from array import array
from typing import Protocol

from servesim.engine.handoff import RankHandoff
from servesim.engine.cache.kv import KvListener
from servesim.engine.rank import DecodeRun, RankConfig, RankPass
from servesim.engine.request import EngineRequest


class KvStore(Protocol):
    """The counters of a rank's KV store other stages read, and its KV-event listener."""

    listener: KvListener | None

    @property
    def active_blocks(self) -> int:
        """Blocks (pages) held by requests."""
        ...

    @property
    def num_blocks(self) -> int:
        """Blocks (pages) of the store."""
        ...


class Rank(Protocol):
    """A scheduler rank, whatever its core."""

    config: RankConfig
    """The rank's settings."""

    @property
    def pool(self) -> KvStore:
        """The rank's KV store."""
        ...

    def enqueue(self, request: EngineRequest) -> None:
        """A request routed to this rank joins its waiting queue."""
        ...

    def has_work(self) -> bool:
        """Whether a request runs or waits here."""
        ...

    def num_requests(self) -> int:
        """Requests running or waiting here."""
        ...

    def num_running(self) -> int:
        """Requests running here."""
        ...

    def num_waiting(self) -> int:
        """Requests waiting here (not yet admitted, or preempted)."""
        ...

    def run_pass(self, pass_index: int) -> RankPass:
        """Plan and apply one pass; its tokens are credited to worker pass `pass_index`."""
        ...

    def abort(self, request: EngineRequest, pass_index: int) -> None:
        """Drop a waiting or running request between passes (its client gave up); `pass_index`
        is the worker's next pass."""
        ...

    def can_run_ahead(self, pass_index: int) -> bool:
        """True when pass `pass_index` would only advance steady decoders."""
        ...

    def decode_passes(self, pass_index: int, start_ms: float, horizon_ms: float, through_finishes: bool,
                      ends: array) -> DecodeRun:
        """Decode-only passes from `pass_index` (which `can_run_ahead`) back to back from
        `start_ms` (before `horizon_ms`), appending each end to `ends`, while the next would
        still start before the horizon, only advance steady decoders and — unless
        `through_finishes` — the last one finished nothing."""
        ...


class HandoffRank(Rank, Protocol):
    """A rank in disaggregated serving (see `engine.handoff`)."""

    handoff: RankHandoff

    def release_held(self, request: EngineRequest) -> None:
        """Prefill role: free a held request's KV (its full blocks stay cached)."""
        ...

    def try_reserve(self) -> tuple[EngineRequest, int] | None:
        """Decode role: one reservation attempt for the front pending request; the reserved
        request and the prompt tokens to transfer, or None."""
        ...

    def activate(self, request: EngineRequest) -> None:
        """Decode role: the request's prompt KV has arrived; it waits to be decoded."""
        ...
