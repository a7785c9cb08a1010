"""The SGLang core's side of the disaggregated KV handoff (`engine.handoff`): a prefill rank
holds each finished prompt with its lease until the transfer is done; a decode rank reserves
the page-rounded prompt of the front pending destination, activates it when it arrives and
promotes it into the running batch."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from servesim.engine.handoff import RankHandoff
from servesim.engine.rank import RankConfig, RankPass
from servesim.engine.request import EngineRequest
from servesim.engine.sglang.kv import PageLeases, SgRequest


class SglangHandoff:
    """`HandoffRank`'s part of `engine.sglang.core.SglangRank` (a mixin over the rank's settings,
    leases and queues)."""

    config: RankConfig
    page: int
    handoff: RankHandoff
    leases: PageLeases
    running: list[SgRequest]
    _context: int
    ready: deque[SgRequest]
    _reserved: dict[EngineRequest, SgRequest]
    _held: dict[EngineRequest, SgRequest]
    _settle: Callable[[SgRequest, RankPass], None]

    def _hold_running(self, result: RankPass) -> None:
        """Prefill role: the prompts completed this pass have run the decode step for their one
        output token (its KV page included), but the token is not emitted: they are held with
        their KV until the transfer is done."""
        page = self.page
        for r in self.running:
            r.length = r.materialized = r.length + 1
            r.pages = -(-r.length // page)
            self._hold(r, result)
        self.running = []
        self._context = 0

    def _hold(self, r: SgRequest, result: RankPass) -> None:
        """Prefill role: keep a finished prompt's lease for the transfer."""
        self._held[r.req] = r
        self.handoff.hold(r.req, result)

    def release_held(self, request: EngineRequest) -> None:
        """Prefill role: the transfer is done (or dropped); the prompt's full pages stay cached."""
        self.leases.finish(self._held.pop(request))

    def try_reserve(self) -> tuple[EngineRequest, int] | None:
        """Decode role: one attempt to reserve the page-rounded prompt of the front pending
        destination, reusing its resident full pages.

        Returns the reserved request and how many prompt tokens must be transferred (its pages
        not already resident, in whole pages), or None. An attempt that fails is not repeated
        before the capacity generation changes.
        """
        handoff = self.handoff
        request = handoff.candidate()
        if request is None:
            return None
        r = SgRequest(request)
        if not self.leases.reserve_prompt(r):
            handoff.refuse(request)
            return None
        self._reserved[request] = r
        return handoff.reserved(request, r.private_pages(self.page) * self.page)

    def activate(self, request: EngineRequest) -> None:
        """Decode role: the transferred prompt becomes cache-visible and waits to be promoted."""
        r = self._reserved.pop(request)
        r.materialized = request.computed = request.prompt_len
        self.leases.cache_prefix(r)
        self.ready.append(r)

    def _promote(self, result: RankPass) -> None:
        """Decode role: activated requests join `running` first (reuse 0, already computed);
        output-0 requests complete at once without a token (still taking a slot this pass)."""
        ready = self.ready
        for _ in range(min(len(ready), self.config.max_sequences - len(self.running))):
            r = ready.popleft()
            result.admitted.append((r.req, 0))
            self._settle(r, result)
