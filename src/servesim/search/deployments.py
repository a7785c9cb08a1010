"""One role's parallel shape (`Shape`), and a branch's deployments for one backend: the
combinations of its roles' shapes, as a sequence that is counted and indexed without being built.

A disaggregated branch pairs every prefill shape with every decode shape (within the GPU budget
when both pools are default pools), so the pairs can number the square of the pools; they are
never listed. The order is that of ``itertools.product`` over the pools, filtered by the budget,
so seeded draws (``rng.choice``) and the grid order do not depend on how they are stored.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import overload

from servesim.search.schema import PARALLEL_KEYS


@dataclass(frozen=True, order=True)
class Shape:
    """One role's parallel configuration: the worker split and the number of workers."""

    replicas: int = 1
    tensor: int = 1
    pipeline: int = 1
    attention_data: int = 1
    moe_tensor: int = 1
    moe_expert: int = 1

    @property
    def gpus_per_worker(self) -> int:
        return self.tensor * self.pipeline * self.attention_data

    @property
    def gpus(self) -> int:
        return self.gpus_per_worker * self.replicas

    def as_dict(self) -> dict[str, int]:
        return {key: getattr(self, key) for key in PARALLEL_KEYS}

    @property
    def label(self) -> str:
        """Short text such as ``3x tp2`` or ``1x tp1 dp4 ep4``."""
        parts = [f"tp{self.tensor}"]
        parts += [f"{tag}{v}" for tag, v in (("pp", self.pipeline), ("dp", self.attention_data),
                                             ("mtp", self.moe_tensor), ("ep", self.moe_expert)) if v > 1]
        return f"{self.replicas}x " + " ".join(parts)


Deployment = tuple[Shape, ...]


class Deployments(Sequence[Deployment]):
    """Every combination of one shape per pool; with `budget` (low, high) only those whose GPUs
    add up to within it."""

    def __init__(self, pools: Sequence[Sequence[Shape]], budget: tuple[int, int] | None) -> None:
        self._pools = [list(pool) for pool in pools]
        self._budget = budget
        self._single: list[Deployment] | None = None
        if len(self._pools) == 1:
            self._single = [(s,) for s in self._pools[0] if budget is None or budget[0] <= s.gpus <= budget[1]]
            return
        first, second = self._pools
        self._runs = _monotone_runs(second)
        counts = (self._count(s.gpus) for s in first) if budget is not None else (len(second) for _ in first)
        self._cumulative = list(itertools.accumulate(counts, initial=0))

    def __len__(self) -> int:
        return len(self._single) if self._single is not None else self._cumulative[-1]

    @overload
    def __getitem__(self, index: int) -> Deployment: ...
    @overload
    def __getitem__(self, index: slice) -> list[Deployment]: ...
    def __getitem__(self, index: int | slice) -> Deployment | list[Deployment]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if self._single is not None:
            return self._single[index]
        size = len(self)
        if index < 0:
            index += size
        if not 0 <= index < size:
            raise IndexError(index)
        row = bisect.bisect_right(self._cumulative, index) - 1
        shape = self._pools[0][row]
        return shape, self._partner(shape.gpus, index - self._cumulative[row])

    def __iter__(self) -> Iterator[Deployment]:
        if self._single is not None:
            yield from self._single
            return
        first, second = self._pools
        for shape in first:
            if self._budget is None:
                yield from ((shape, other) for other in second)
                continue
            low, high = self._budget[0] - shape.gpus, self._budget[1] - shape.gpus
            yield from ((shape, other) for other in second if low <= other.gpus <= high)

    def __bool__(self) -> bool:
        return len(self) > 0

    def _count(self, gpus: int) -> int:
        """Shapes of the second pool that fit the budget beside `gpus` GPUs."""
        assert self._budget is not None
        low, high = self._budget[0] - gpus, self._budget[1] - gpus
        return sum(hi - lo for lo, hi in (_within(run, low, high) for run in self._runs))

    def _partner(self, gpus: int, rank: int) -> Shape:
        """The `rank`-th shape of the second pool (pool order) that fits beside `gpus` GPUs."""
        second = self._pools[1]
        if self._budget is None:
            return second[rank]
        low, high = self._budget[0] - gpus, self._budget[1] - gpus
        for run in self._runs:
            lo, hi = _within(run, low, high)
            if rank < hi - lo:
                return second[run.start + lo + rank]
            rank -= hi - lo
        raise IndexError(rank)


class _Run:
    """A stretch of the pool, from `start`, whose GPU counts never decrease (`gpus`)."""

    def __init__(self, start: int, gpus: list[int]) -> None:
        self.start, self.gpus = start, gpus


def _monotone_runs(pool: Sequence[Shape]) -> list[_Run]:
    """The pool cut into maximal stretches of non-decreasing GPU counts (the ladder gives one
    per worker split)."""
    runs: list[_Run] = []
    for index, shape in enumerate(pool):
        if runs and runs[-1].gpus[-1] <= shape.gpus:
            runs[-1].gpus.append(shape.gpus)
        else:
            runs.append(_Run(index, [shape.gpus]))
    return runs


def _within(run: _Run, low: int, high: int) -> tuple[int, int]:
    """Offsets [lo, hi) of the run's shapes with low <= GPUs <= high."""
    return bisect.bisect_left(run.gpus, low), bisect.bisect_right(run.gpus, high)
