"""The simulated time a worker spends in passes, worked out when asked.

It is the sum of the pass durations (end − start), added one pass at a time in pass order, as a
running sum kept pass by pass would add them. Most passes start where the previous one ended
(a run ahead is hundreds of them back to back), so only the other starts are recorded as
passes begin; the sum itself is folded from the pass ends once, with numpy (whose `accumulate`
adds element by element, left to right), when the report asks for it.
"""

from __future__ import annotations

from array import array


class BusyTime:
    """The busy time of the passes whose ends a worker appends to `ends`."""

    __slots__ = ("_ends", "_at", "_starts", "_base", "_from")

    def __init__(self, ends: array) -> None:
        self._ends = ends
        self._at = array("q")
        """Indices of the passes that did not start at the previous pass's end, ascending..."""
        self._starts = array("d")
        """...and their start times."""
        self._base = 0.0
        """The busy time of the passes before `_from`."""
        self._from = 0

    def started(self, index: int, start: float) -> None:
        """Pass `index` (the next one, or one already ended) started at `start`; the passes after
        it that are not recorded start where the one before them ended."""
        self._at.append(index)
        self._starts.append(start)

    def settle(self, total: float) -> None:
        """The passes ended so far took `total` (worked out elsewhere)."""
        self._base = total
        self._from = len(self._ends)
        del self._at[:], self._starts[:]

    def total(self) -> float:
        """The busy time of every pass ended so far."""
        first = self._from
        if len(self._ends) == first:
            return self._base
        import numpy as np

        ends = np.frombuffer(self._ends[first:], dtype=np.float64)  # a copy: `_ends` grows
        starts = np.empty_like(ends)
        starts[1:] = ends[:-1]
        starts[0] = self._ends[first - 1] if first else 0.0
        at = np.frombuffer(self._at, dtype=np.int64) - first  # a view: nothing resizes it meanwhile
        starts[at] = np.frombuffer(self._starts, dtype=np.float64)
        durations = np.concatenate(([self._base], ends - starts))
        return float(np.add.accumulate(durations)[-1])
