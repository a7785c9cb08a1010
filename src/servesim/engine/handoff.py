"""A rank's side of the disaggregated KV handoff, shared by every scheduling core.

A *prefill* rank computes prompts and then holds each one's KV (it leaves the running set)
until the cluster has moved it to a decode worker and calls `release_held`. A *decode* rank
keeps the requests routed to it in `pending` until it can reserve KV for the front one
(`try_reserve`), then receives the transferred prompt (`activate`) and decodes it. What differs
per core is only how KV is reserved and released; the bookkeeping is here.

The **capacity generation** counts the events that can free KV on a rank (completions, holds,
preemptions and retractions): a reservation that failed is not retried before it changes.
"""

from __future__ import annotations

from collections import deque

from servesim.engine.rank import RankPass
from servesim.engine.request import EngineRequest


class RankHandoff:
    """Role flags, the pending destinations and the capacity generation of one rank."""

    __slots__ = ("holds", "charges_prefill", "pending", "generation")

    def __init__(self, role: str) -> None:
        self.holds = role == "prefill"
        """Prefill role: a finished prompt is held for the transfer instead of decoding."""
        self.charges_prefill = role != "decode"
        """Decode role: prompts arrive computed, so a pass never pays prefill time."""
        self.pending: deque[EngineRequest] = deque()
        """Decode role: requests waiting for a destination reservation, in arrival order."""
        self.generation = 0

    def capacity_changed(self, events: int = 1) -> None:
        """`events` completions, holds or preemptions happened: KV may have been freed."""
        self.generation += events

    def hold(self, request: EngineRequest, result: RankPass) -> None:
        """Prefill role: the prompt is done; its KV stays until the transfer completes."""
        result.held.append(request)
        self.generation += 1

    def expect(self, request: EngineRequest) -> None:
        """Decode role: a request routed here waits for a reservation."""
        self.pending.append(request)

    def candidate(self) -> EngineRequest | None:
        """The front pending request, unless it already failed at this generation."""
        if not self.pending:
            return None
        request = self.pending[0]
        return None if request.reserve_attempt == self.generation else request

    def refuse(self, request: EngineRequest) -> None:
        """The reservation attempt for `request` failed: wait for the next generation."""
        request.reserve_attempt = self.generation

    def reserved(self, request: EngineRequest, transfer_tokens: int) -> tuple[EngineRequest, int]:
        """The front request got its KV: it leaves `pending`; what `try_reserve` returns."""
        self.pending.popleft()
        return request, transfer_tokens
