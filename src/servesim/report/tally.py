"""Every request folded into what the summary and the per-worker breakdown read of it.

A `RequestTally` keeps no Python object per request: counters, per-worker sums and, for each
counted request, one entry in compact columns (arrival, terminal time, lengths, prefix reuse,
token count, first/second/last token time) plus the pass indices of its token runs. Requests may
be added in any order (as they end, so the collector can drop their records); the columns are
read back in request order, so every statistic is the one the records would give.

What it holds stays bounded by the requests in flight: every `settle_every` requests it settles
the ones that have ended — it folds their token runs into the pooled token gaps (distinct gap
value -> count) and moves the rows of every request below the lowest one still unfinished, in
request order, to a `ColumnStore`, which spools them to a scratch file past `spool_rows`. A run
shorter than `settle_every` requests settles once, at the end, as a whole. Once the columns are
on disk the summary reads them a chunk at a time (`chunks`); `timelines` reads them all back.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from servesim.collect.collector import RequestRecord, Status
from servesim.report.columns import ColumnStore


CONTEXT_REJECTION = "reaches the context length"
"""The words of a context-limit rejection reason (`servesim.engine.vllm.policy`)."""


@dataclass(slots=True, eq=False, repr=False)
class Timelines:
    """Per counted request, in request order: arrival, terminal time, input/output length, prefix
    reuse (first admission, best admission), token count, first/second/last token time; plus
    every token gap of every request, as distinct gap values and how many gaps have each."""

    arrival: np.ndarray
    terminal: np.ndarray
    input_length: np.ndarray
    output_length: np.ndarray
    reused_first: np.ndarray
    reused_max: np.ndarray
    count: np.ndarray
    first: np.ndarray
    second: np.ndarray
    last: np.ndarray
    gaps: np.ndarray
    gap_counts: np.ndarray


@dataclass(slots=True, eq=False, repr=False)
class CompletedColumns:
    """Requests that completed in one run of consecutive passes of a worker (see
    `RequestTally.add_completed`): one entry per request in each array."""

    rid: np.ndarray
    arrival: np.ndarray
    input_length: np.ndarray
    tokens: np.ndarray
    """Tokens generated (the output length)."""
    first_pass: np.ndarray
    """Index of the pass that gave the first token; the last came `tokens - 1` passes later."""
    first: np.ndarray
    second: np.ndarray
    """NaN for a request of one token."""
    last: np.ndarray
    """Also its terminal time."""


WORKER_FIELDS = ("requests", "overlap_tokens_credited", "completed_requests", "input_tokens", "reused_input_tokens")
"""The per-worker sums, in the order `RequestTally.workers` keeps them."""
NAN = float("nan")
TIME_COLUMNS = ("arrival", "terminal", "first", "second", "last")
INT_COLUMNS = ("input_length", "output_length", "reused_first", "reused_max", "count")
COLUMNS = np.dtype([(name, np.float64) for name in TIME_COLUMNS] + [(name, np.int64) for name in INT_COLUMNS])
"""The per counted request columns, as the `ColumnStore` keeps them."""
ARRIVALS = np.dtype([("arrival", np.float64)])
SETTLE_EVERY = 1 << 15
"""Requests added between two settlings (see the module docstring)."""
SPOOL_ROWS = 1 << 17
"""Settled rows a store keeps in memory before it spools them to a scratch file."""
_NO_GAPS = (np.zeros(0, dtype=np.float64), np.zeros(0, dtype=np.int64))


class RequestTally:
    """What the report keeps of the requests it has been given (see the module docstring)."""

    def __init__(self, settle_every: int | None = None, spool_rows: int | None = None,
                 scratch_dir: Path | None = None) -> None:
        settle_every = settle_every or SETTLE_EVERY
        spool_rows = SPOOL_ROWS if spool_rows is None else spool_rows
        self.num_requests = 0
        self.num_terminal = 0
        self.rejected = 0
        """Rejected or failed."""
        self.timed_out = 0
        self.first_rejection: tuple[int, str] | None = None
        """(request id, reason) of the earliest request with a rejection reason."""
        self.context_rejected = 0
        """Requests rejected for a prompt that reaches the context length (as the reference rejects them)."""
        self.workers: dict[tuple[str, int], list[int]] = {}
        """Per (pool, worker id) its routed requests: the sums named by `WORKER_FIELDS`."""
        self._rid = array("q")
        self._times = {name: array("d") for name in TIME_COLUMNS}
        self._ints = {name: array("q") for name in INT_COLUMNS}
        self._runs: dict[int, tuple[array[float], array[int], array[int]]] = {}
        """Per worker's pass-end array: [first, last) pass index of each run of 2+ tokens."""
        self._between = array("d")
        """Gaps between two runs of one request."""
        self._every_rid = array("q")
        self._every_arrival = array("d")
        """Every request's arrival (counted or not), for the report's arrival series."""
        self._settle_every = settle_every
        self._settle_at = settle_every
        self._next_rid = 0
        """Every request below it has been settled."""
        self._columns = ColumnStore(COLUMNS, spool_rows, scratch_dir)
        self._arrival_store = ColumnStore(ARRIVALS, spool_rows, scratch_dir)
        self._gaps = _NO_GAPS
        """The settled requests' token gaps: distinct values (ascending) and counts."""
        self._settled_at = -1
        """`num_requests` when everything was last settled."""
        self._timelines: Timelines | None = None
        self._arrivals: np.ndarray | None = None

    @classmethod
    def of(cls, records: Iterable[RequestRecord]) -> RequestTally:
        tally = cls()
        for record in records:
            tally.add(record)
        return tally

    def add(self, record: RequestRecord) -> None:
        """Fold one request in (a terminal one, or one still in flight when the run ended)."""
        self.num_requests += 1
        self._every_rid.append(record.rid)
        self._every_arrival.append(record.arrival_ms)
        status = record.status
        if status is not None:
            self.num_terminal += 1
            if status != Status.COMPLETED:
                self.rejected += status == Status.REJECTED or status == Status.FAILED
                self.timed_out += status == Status.TIMED_OUT
        if record.reason is not None:
            self.context_rejected += CONTEXT_REJECTION in record.reason
            if self.first_rejection is None or record.rid < self.first_rejection[0]:
                self.first_rejection = (record.rid, record.reason)
        counted = status == Status.COMPLETED and bool(record.admissions)  # `RequestRecord.counted`
        self._add_routes(record, counted)
        if counted:
            self._add_counted(record)
        if self.num_requests >= self._settle_at:
            self._settle()

    def add_completed(self, worker: tuple[str, int], ends: array[float], columns: CompletedColumns) -> None:
        """Fold in requests that all completed on `worker` (pool, worker id) after one admission
        without prefix reuse and got every token from one run of its consecutive passes (whose
        end times `ends` holds): what `add` would make of their records, in bulk."""
        count = len(columns.rid)
        if not count:
            return
        self.num_requests += count
        self.num_terminal += count
        self._every_rid.frombytes(columns.rid.astype(np.int64).tobytes())
        self._every_arrival.frombytes(columns.arrival.astype(np.float64).tobytes())
        self._rid.frombytes(columns.rid.astype(np.int64).tobytes())
        zeros = np.zeros(count, dtype=np.int64).tobytes()
        ints = self._ints
        for name, values in (("input_length", columns.input_length), ("output_length", columns.tokens),
                             ("reused_first", None), ("reused_max", None), ("count", columns.tokens)):
            ints[name].frombytes(zeros if values is None else values.astype(np.int64).tobytes())
        times = self._times
        for name in ("arrival", "first", "second", "last"):
            times[name].frombytes(getattr(columns, name).astype(np.float64).tobytes())
        times["terminal"].frombytes(columns.last.astype(np.float64).tobytes())
        sums = self.workers.setdefault(worker, [0] * len(WORKER_FIELDS))
        sums[0] += count
        sums[2] += count
        sums[3] += int(columns.input_length.sum())
        several = columns.tokens > 1
        if several.any():
            entry = self._runs.get(id(ends))
            if entry is None:
                entry = self._runs[id(ends)] = (ends, array("q"), array("q"))
            entry[1].frombytes(columns.first_pass[several].astype(np.int64).tobytes())
            entry[2].frombytes((columns.first_pass + columns.tokens - 1)[several].astype(np.int64).tobytes())
        if self.num_requests >= self._settle_at:
            self._settle()

    def _add_routes(self, record: RequestRecord, counted: bool) -> None:
        workers = self.workers
        for route in record.routes:
            pool = "decode" if route.pool == "agg" else route.pool  # `_pool`
            sums = workers.get((pool, route.worker_id))
            if sums is None:
                sums = workers[(pool, route.worker_id)] = [0] * len(WORKER_FIELDS)
            sums[0] += 1
            sums[1] += route.overlap_tokens
            if counted:
                sums[2] += 1
                sums[3] += record.input_length
                admissions = record.admissions
                only = admissions[0] if len(admissions) == 1 else None
                sums[4] += only.reused_tokens if only is not None and only.pool == route.pool else _reused(record, pool)

    def _add_counted(self, record: RequestRecord) -> None:
        admissions = record.admissions
        reused_first = admissions[0].reused_tokens
        self._rid.append(record.rid)
        ints = self._ints
        ints["input_length"].append(record.input_length)
        ints["output_length"].append(record.output_length)
        ints["reused_first"].append(reused_first)
        ints["reused_max"].append(reused_first if len(admissions) == 1 else max(a.reused_tokens for a in admissions))
        times = self._times
        times["arrival"].append(record.arrival_ms)
        times["terminal"].append(record.terminal_ms if record.terminal_ms is not None else NAN)
        count, first, second, last = self._add_tokens(record)
        ints["count"].append(count)
        times["first"].append(first)
        times["second"].append(second)
        times["last"].append(last)

    def _add_tokens(self, record: RequestRecord) -> tuple[int, float, float, float]:
        """Keep the request's token runs; its token count and first, second and last token time."""
        spans = record.token_spans
        if not spans:
            return 0, NAN, NAN, NAN
        ends = record.pass_ends
        assert ends is not None
        entry = self._runs.get(id(ends))
        if entry is None:
            entry = self._runs[id(ends)] = (ends, array("q"), array("q"))
        a0, b0 = spans[0], spans[1]
        if len(spans) == 2 and b0 - a0 > 1:  # one run of several tokens: the common case
            entry[1].append(a0)
            entry[2].append(b0 - 1)
            return b0 - a0, ends[a0], ends[a0 + 1], ends[b0 - 1]
        starts, stops = entry[1], entry[2]
        total = 0
        for j in range(0, len(spans), 2):
            a, b = spans[j], spans[j + 1]
            total += b - a
            if b - a > 1:
                starts.append(a)
                stops.append(b - 1)
            if j:
                self._between.append(ends[a] - ends[spans[j - 1] - 1])
        second = NAN
        if total > 1:
            second = ends[a0 + 1] if b0 - a0 > 1 else ends[spans[2]]
        return total, ends[a0], second, ends[spans[-1] - 1]

    @property
    def spooled(self) -> bool:
        """Whether the settled columns went to a scratch file (read them with `chunks`)."""
        self._finish()
        return self._columns.on_disk

    def chunks(self) -> Iterator[Timelines]:
        """The counted requests' columns in request order, a chunk at a time (without gaps)."""
        self._finish()
        for columns in self._columns.chunks():
            yield Timelines(**columns, gaps=_NO_GAPS[0], gap_counts=_NO_GAPS[1])

    def gaps(self) -> tuple[np.ndarray, np.ndarray]:
        """Every token gap of every counted request: distinct values (ascending) and how many
        gaps have each. Inside a run of consecutive passes of one worker a request's gaps are
        that worker's pass-to-pass gaps; between two runs there is one gap."""
        self._finish()
        return self._gaps

    def timelines(self) -> Timelines:
        """The counted requests' columns in request order, and the pooled token gaps, all at
        once (read once the tally is complete)."""
        self._finish()
        if self._timelines is None:
            self._timelines = Timelines(**self._columns.whole(), gaps=self._gaps[0], gap_counts=self._gaps[1])
        return self._timelines

    def arrivals(self) -> np.ndarray:
        """Every request's arrival time, counted or not, in request order (read once the tally is
        complete, as `timelines`)."""
        self._finish()
        if self._arrivals is None:
            self._arrivals = self._arrival_store.whole()["arrival"]
        return self._arrivals

    def close(self) -> None:
        """Drop the settled columns and their scratch files."""
        self._columns.close()
        self._arrival_store.close()
        self._timelines = self._arrivals = None

    def _finish(self) -> None:
        """Settle every request added so far."""
        if self._settled_at != self.num_requests:
            self._settle(final=True)
            self._settled_at = self.num_requests
            self._timelines = self._arrivals = None

    def _settle(self, final: bool = False) -> None:
        """Fold the ended requests' token runs into the gaps and move the rows of the requests
        below the lowest unfinished one (`final`: of all) to the stores, in request order."""
        self._fold_gaps()
        rids = np.frombuffer(self._every_rid, dtype=np.int64)
        order = np.argsort(rids, kind="stable")
        ordered = rids[order]
        settled = len(ordered) if final else _run_from(ordered, self._next_rid)
        if settled:
            self._next_rid = int(ordered[settled - 1]) + 1
            arrivals = np.frombuffer(self._every_arrival, dtype=np.float64)[order]
            self._arrival_store.append({"arrival": arrivals[:settled]})
            self._every_rid, self._every_arrival = _array("q", ordered[settled:]), _array("d", arrivals[settled:])
            del arrivals
            self._settle_columns(None if final else self._next_rid)
        self._settle_at = self.num_requests + max(self._settle_every, len(self._every_rid))

    def _settle_columns(self, below: int | None) -> None:
        """Move the counted rows of requests below `below` (None: all) to the column store."""
        rids = np.frombuffer(self._rid, dtype=np.int64)
        order = np.argsort(rids, kind="stable")
        count = len(order) if below is None else int(np.searchsorted(rids[order], below))
        head, tail = order[:count], order[count:]
        rows: dict[str, np.ndarray] = {}
        for name, floats in self._times.items():
            values = np.frombuffer(floats, dtype=np.float64)
            rows[name] = values[head]
            self._times[name] = _array("d", values[tail])
        for name, ints in self._ints.items():
            values = np.frombuffer(ints, dtype=np.int64)
            rows[name] = values[head]
            self._ints[name] = _array("q", values[tail])
        self._rid = _array("q", rids[tail])
        del rids, values
        self._columns.append(rows)

    def _fold_gaps(self) -> None:
        """Fold the token runs and between-run gaps added since the last settling into the gaps."""
        values = [self._gaps[0], np.frombuffer(self._between, dtype=np.float64)]
        weights = [self._gaps[1], np.ones(len(self._between), dtype=np.int64)]
        for key, (ends, starts, stops) in self._runs.items():
            if not starts:
                continue
            begins, finals = np.frombuffer(starts, dtype=np.int64), np.frombuffer(stops, dtype=np.int64)
            first, last = int(begins.min()), int(finals.max())
            view = np.frombuffer(ends[first:last + 1], dtype=np.float64)  # a copy: `ends` still grows
            size = len(view)
            covering = np.cumsum(np.bincount(begins - first, minlength=size)
                                 - np.bincount(finals - first, minlength=size))[:-1]
            used = covering > 0
            # Merged per worker first: one merge of every worker's raw gaps is a little cheaper
            # but holds them all at once (M1's peak 200 -> 300 MB).
            gaps, counts = _merge_equal(np.diff(view)[used], covering[used])
            values.append(gaps)
            weights.append(counts)
            self._runs[key] = (ends, array("q"), array("q"))
        self._gaps = _merge_equal(np.concatenate(values), np.concatenate(weights))
        self._between = array("d")


def _run_from(ordered: np.ndarray, start: int) -> int:
    """How many leading entries of the sorted request ids are start, start + 1, … in turn."""
    if not len(ordered) or ordered[0] != start:
        return 0
    broken = np.flatnonzero(ordered != np.arange(start, start + len(ordered)))
    return int(broken[0]) if len(broken) else len(ordered)


def _array(code: str, values: np.ndarray) -> array:
    """A new growable array (typecode `code`) holding a copy of `values`."""
    out = array(code)
    out.frombytes(values.tobytes())
    return out


def _merge_equal(values: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct values (ascending) and the total weight of each: pass gaps repeat a lot, so
    the statistics then work on far fewer samples."""
    if not len(values):
        return values, np.zeros(0, dtype=np.int64)
    order = np.argsort(values, kind="stable")
    ordered = values[order]
    starts = np.flatnonzero(np.concatenate(([True], ordered[1:] != ordered[:-1])))
    return ordered[starts], np.add.reduceat(weights[order], starts).astype(np.int64, copy=False)


def _reused(record: RequestRecord, pool: str) -> int:
    """The most prompt tokens the request reused in one admission to `pool`."""
    admissions = record.admissions
    if len(admissions) == 1 and _pool(admissions[0].pool) == pool:
        return admissions[0].reused_tokens
    return max((a.reused_tokens for a in admissions if _pool(a.pool) == pool), default=0)


def _pool(pool: str) -> str:
    """The breakdown's pool name: aggregated workers are listed as decode workers."""
    return "decode" if pool == "agg" else pool
