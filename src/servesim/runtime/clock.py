"""Worker-seconds over the instants the shared clock visits, integrated as they become final."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from servesim.runtime.isolated import _sorted_distinct
from servesim.runtime.replay import INF, Pool


class WorkerSeconds:
    """Each pool's worker-seconds over the instants the shared clock would visit (every arrival
    and every pass end; a run without time cap), summed in the clock's order as
    `runtime.isolated.IsolatedReplay` sums them, but as the instants become known (`add`) and
    final (`settle`): memory holds only the instants not final yet."""

    def __init__(self, pools: Sequence[Pool[Any]]) -> None:
        self.pools = pools
        self.now: float | None = None
        """The last instant integrated (None before the first)."""
        self._sums = [0.0] * len(pools)
        self._pending: list[np.ndarray] = []

    def add(self, instants: np.ndarray) -> None:
        """Instants the clock visits (in any order, with repeats)."""
        self._pending.append(instants)

    def settle(self, frontier: float = INF) -> None:
        """Integrate the instants before `frontier` (no instant added later comes before it)."""
        if not self._pending:
            return
        pending = _sorted_distinct(np.concatenate(self._pending))
        cut = int(np.searchsorted(pending, frontier))
        instants = pending[:cut]
        self._pending = [pending[cut:]] if cut < len(pending) else []
        if not len(instants):
            return
        steps = np.diff(instants, prepend=0.0 if self.now is None else self.now)
        for i, pool in enumerate(self.pools):
            terms = (steps * len(pool.workers)) / 1000
            if self.now is not None:  # the running sum goes on: the same additions, left to right
                terms = np.concatenate(([self._sums[i]], terms))
            self._sums[i] = float(np.add.accumulate(terms)[-1])
        self.now = float(instants[-1])

    def finish(self) -> float:
        """Integrate what is left and set the pools' worker-seconds; returns the last instant
        (0.0 if there was none)."""
        self.settle()
        if self.now is None:
            return 0.0
        for pool, total in zip(self.pools, self._sums, strict=True):
            pool.worker_seconds = total
        return self.now
