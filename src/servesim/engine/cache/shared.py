"""One deployment-wide host-memory KV pool (AISimulate 0.13's `host_offload.scope: cluster_shared`).

Every rank of the role's workers stores to and loads from the same `num_host_blocks` blocks (LRU,
as a rank-local tier, `engine.cache.host`). Loads cross one shared link at
`shared_h2d_bandwidth_gbps` that the loads in flight share equally (processor sharing): a load
that starts while another is moving slows it down. Measured on 0.13 (docs/upstream013.md): two
4-block loads at 10 MB/s, one started 31 ms after the other, complete 73.4 and 102.4 ms after the
first one's start, where one after the other would give 51.2 and 102.4 ms. Each load also waits
the first-byte latency, the same for every load of the link.
"""

from __future__ import annotations

from collections import OrderedDict


class Transfer:
    """One load in flight: `done` is when it completes (it may move later while it travels on a
    shared link, as loads join), `work` the ms its bytes still need alone on the link."""

    __slots__ = ("done", "work")

    def __init__(self, done: float, work: float = 0.0) -> None:
        self.done = done
        self.work = work


class SharedLink:
    """A link whose loads in flight share its bandwidth equally."""

    def __init__(self, latency_ms: float) -> None:
        self.latency_ms = latency_ms
        self._t = 0.0
        self._moving: list[Transfer] = []

    def start(self, work_ms: float, now: float) -> Transfer:
        """A load needing `work_ms` alone on the link, from `now`; every load's `done` is updated."""
        self._advance(now)
        transfer = Transfer(0.0, work_ms)
        self._moving.append(transfer)
        self._predict()
        return transfer

    def _advance(self, now: float) -> None:
        """Move the loads in flight on to `now` (each gets an equal share meanwhile)."""
        t = self._t
        moving = self._moving
        while moving and now > t:
            share = len(moving)
            least = min(x.work for x in moving)
            if least * share <= now - t:
                t += least * share
                for x in moving:
                    x.work -= least
                moving[:] = [x for x in moving if x.work > 1e-12]
            else:
                step = (now - t) / share
                for x in moving:
                    x.work -= step
                t = now
        self._t = max(t, now)

    def _predict(self) -> None:
        """Each load's completion if no other load joins: the smallest finishes first."""
        t = self._t
        done = 0.0
        left = len(self._moving)
        for x in sorted(self._moving, key=lambda x: x.work):
            t += (x.work - done) * left
            done = x.work
            left -= 1
            x.done = t + self.latency_ms


class SharedHost:
    """The blocks of a cluster-shared host pool and its shared load link."""

    def __init__(self, latency_ms: float) -> None:
        self.blocks: OrderedDict[int, None] = OrderedDict()
        self.link = SharedLink(latency_ms)
