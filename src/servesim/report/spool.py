"""Per-request records written to a scratch file as each request ends, instead of kept.

A `RecordSpool` turns a finished request into its per-request record, renders that record at
once as its ``requests.jsonl`` line and appends the line to the scratch file; what it keeps per
request is four numbers (arrival time, request id, offset and length of the line). Requests end
out of order: the writers read the lines back in the order `request_records` gives (arrival
time, then arrival order), so the files are byte for byte the ones written from kept records.
``prediction.json`` holds each record pretty-printed: it is parsed back from its line (JSON
floats round-trip exactly) and rendered then, not during the replay, whose garbage collector is
paused while the pure-Python pretty printer leaves reference cycles behind on every call.
"""

from __future__ import annotations

import json
import os
import random
import uuid
from array import array
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from servesim.collect.collector import RequestRecord
from servesim.outputs import OutputError, os_reason
from servesim.report.records import request_record
from servesim.report.render import per_request_element, record_line, write_report_json_with

_WRITE_BUFFER = 1 << 20


class _UuidDraws:
    """Request `rid`'s UUID as `request_records` draws it (the rid-th draw of its seeded
    generator), holding only the draws made for requests that have not ended yet."""

    def __init__(self, seed: int = 0) -> None:
        self._rng = random.Random(seed)
        self._drawn = 0
        self._waiting: dict[int, int] = {}

    def take(self, rid: int) -> str:
        while self._drawn <= rid:
            self._waiting[self._drawn] = self._rng.getrandbits(128)
            self._drawn += 1
        return str(uuid.UUID(int=self._waiting.pop(rid), version=4))


class RecordSpool:
    """The per-request records of a run, spooled to `path` (see the module docstring).

    `drop` names record fields left out (``--reference-fields``). Use as a context manager, or
    call `close`; the caller owns `path` and removes it.
    """

    def __init__(self, path: Path, drop: Iterable[str] = ()) -> None:
        self.path = path
        self._drop = tuple(drop)
        self._file = open(path, "w+b", buffering=_WRITE_BUFFER)  # noqa: SIM115 -- closed by close()
        self._uuids = _UuidDraws()
        self._arrival = array("d")
        self._rid = array("q")
        self._offset = array("q")
        self._size = array("q")
        self._end = 0

    def __enter__(self) -> RecordSpool:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __len__(self) -> int:
        return len(self._rid)

    def close(self) -> None:
        """Close the scratch file (a failure to flush it is no loss: the writers flush first)."""
        try:
            self._file.close()
        except OSError:
            pass

    def add(self, record: RequestRecord) -> None:
        """Spool a request that reached a terminal state."""
        row = request_record(record, self._uuids.take(record.rid))
        for key in self._drop:
            row.pop(key, None)
        line = record_line(row).encode()
        try:
            self._file.write(line)
        except OSError as exc:
            raise OutputError(f"cannot write {self.path}: {os_reason(exc)}") from None
        self._arrival.append(record.arrival_ms)
        self._rid.append(record.rid)
        self._offset.append(self._end)
        self._size.append(len(line))
        self._end += len(line)

    def write_jsonl(self, path: Path) -> None:
        """Write ``requests.jsonl``: every record's line, in record order."""
        with open(path, "wb", buffering=_WRITE_BUFFER) as file:
            for line in self._lines():
                file.write(line)

    def write_report_json(self, report: Mapping[str, Any], path: Path) -> None:
        """Write ``prediction.json``: `report` with the records as its `per_request` array."""
        elements = (per_request_element(json.loads(line)).encode() for line in self._lines())
        write_report_json_with(report, elements, path)

    def _lines(self) -> Iterator[bytes]:
        """Each record's line, in record order."""
        self._file.flush()
        handle = self._file.fileno()
        order = np.lexsort((np.frombuffer(self._rid, dtype=np.int64),
                            np.frombuffer(self._arrival, dtype=np.float64)))
        offsets, sizes = self._offset, self._size
        for i in order.tolist():
            yield os.pread(handle, sizes[i], offsets[i])
