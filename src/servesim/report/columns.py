"""Rows of named numeric columns, appended in chunks and read back in chunks, in append order.

A `ColumnStore` keeps its rows in memory up to `spool_rows`; past that it moves them to an
unnamed scratch file (`tempfile.TemporaryFile`: the file has no name, so the operating system
removes it however the process ends) and appends every later chunk there. Reading back goes a
chunk at a time, so what a reader holds is one chunk, whatever the row count.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO

import numpy as np

READ_ROWS = 1 << 14
"""Rows per chunk read back from the scratch file."""


class ColumnStore:
    """Rows of the columns named by `dtype` (a numpy structured dtype), in append order."""

    def __init__(self, dtype: np.dtype, spool_rows: int, scratch_dir: Path | None = None,
                 read_rows: int | None = None) -> None:
        self.dtype = np.dtype(dtype)
        assert self.dtype.names is not None, "a structured dtype"
        self.names: tuple[str, ...] = self.dtype.names
        self.rows = 0
        self._spool_rows = spool_rows
        self._read_rows = read_rows or READ_ROWS
        self._scratch_dir = scratch_dir
        self._held: list[dict[str, np.ndarray]] = []
        self._file: IO[bytes] | None = None

    @property
    def on_disk(self) -> bool:
        """Whether the rows went to the scratch file."""
        return self._file is not None

    def append(self, columns: Mapping[str, np.ndarray]) -> None:
        """Add rows: one equal-length array per column."""
        size = len(columns[self.names[0]])
        if not size:
            return
        self.rows += size
        if self._file is None:
            self._held.append(dict(columns))
            if self.rows > self._spool_rows:
                self._spool()
        else:
            self._write(columns)

    def chunks(self) -> Iterator[dict[str, np.ndarray]]:
        """The rows, a chunk at a time, in append order (each chunk: one array per column)."""
        if self._file is None:
            yield from self._held
            return
        self._file.flush()
        self._file.seek(0)
        left = self.rows
        while left:
            count = min(left, self._read_rows)
            data = self._file.read(count * self.dtype.itemsize)
            rows = np.frombuffer(data, dtype=self.dtype)
            yield {name: np.ascontiguousarray(rows[name]) for name in self.names}
            left -= count

    def whole(self) -> dict[str, np.ndarray]:
        """Every row at once: one array per column."""
        if self._file is None and len(self._held) == 1:
            return self._held[0]
        parts = list(self.chunks())
        return {name: np.concatenate([part[name] for part in parts]) if parts
                else np.zeros(0, dtype=self.dtype[name]) for name in self.names}

    def close(self) -> None:
        """Drop the rows (and the scratch file)."""
        self._held = []
        self.rows = 0
        if self._file is not None:
            self._file.close()
            self._file = None

    def _spool(self) -> None:
        """Move the rows held in memory to a new scratch file."""
        import tempfile  # imported when used: start-up time

        from servesim.outputs import OutputError, os_reason

        try:
            self._file = tempfile.TemporaryFile(dir=self._scratch_dir)  # noqa: SIM115 -- closed by close()
        except OSError as exc:
            raise OutputError(f"cannot create the report's scratch file in {self._scratch_dir or tempfile.gettempdir()}: "
                              f"{os_reason(exc)}") from None
        held, self._held = self._held, []
        for columns in held:
            self._write(columns)

    def _write(self, columns: Mapping[str, np.ndarray]) -> None:
        assert self._file is not None
        rows = np.empty(len(columns[self.names[0]]), dtype=self.dtype)
        for name in self.names:
            rows[name] = columns[name]
        try:
            self._file.write(rows.view(np.uint8).data)  # the rows' bytes, without a copy
        except OSError as exc:
            from servesim.outputs import OutputError, os_reason

            raise OutputError(f"cannot write the report's scratch file: {os_reason(exc)}") from None
