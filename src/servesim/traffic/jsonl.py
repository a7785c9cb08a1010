"""Streaming JSONL reading shared by every trace reader: plain or gzip-compressed files.

A file is read a chunk of lines at a time, so a reader never holds more than one chunk of a
file's text; gzip files (recognised by their magic bytes, whatever their name) are decompressed
on the fly. Every problem becomes a `TraceError` naming the file and, where there is one, the
line.
"""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Iterator
from typing import IO, Any

from servesim import safejson
from servesim.errors import TraceError
from servesim.traffic.hash_ids import lift_id_lists

_GZIP_MAGIC = b"\x1f\x8b"
MAX_LINE_CHARS = 64 << 20
"""Longest line read (a row of a million-token prompt is well under 1 MiB): a longer one is an
error naming its line, not a memory blow-up."""


def open_text(path: str) -> IO[str]:
    """A text handle on `path`, decompressing it when it is gzip data (`OSError` for a pipe or a
    device: a pipe nobody writes to would wait for ever)."""
    safejson.regular_file_or_error(path)
    with open(path, "rb") as probe:
        magic = probe.read(2)
    if magic == _GZIP_MAGIC:
        return gzip.open(path, "rt", encoding="utf-8")
    return open(path, encoding="utf-8")


def read_jsonl(path: str, chunk_lines: int = 4096, *,
               id_list: str | None = None) -> Iterator[tuple[int, dict[str, Any]]]:
    """(1-based line number, object) for every non-blank line of a JSONL file (gzip or plain).

    Lines are parsed a chunk at a time in one `json.loads` call (several times faster than line
    by line, with bounded memory); a chunk that does not parse cleanly is re-read line by line
    to name the first bad line. With `id_list`, a top-level list of unsigned 64-bit integers
    under that key comes as an array of type 'Q' when it is plainly written (`lift_id_lists`),
    else as JSON decodes it.
    """
    number = 0
    try:
        handle = open_text(path)
    except OSError as exc:
        raise TraceError(path, None, f"cannot read trace: {exc.strerror or exc}") from None
    with handle:
        while True:
            chunk, problem = _read_lines(path, handle, chunk_lines, number)
            numbered = [(number + i, line) for i, line in enumerate(chunk, start=1) if not line.isspace()]
            number += len(chunk)
            yield from _parse_chunk(path, numbered, id_list)
            if problem is not None:
                raise problem
            if len(chunk) < chunk_lines:
                return


finite_float = safejson.finite_number
"""A JSON number as a finite float; None for anything else (a bool, a string, infinity or
NaN, an integer beyond every float)."""


def _read_lines(path: str, handle: IO[str], count: int, before: int) -> tuple[list[str], TraceError | None]:
    """Up to `count` lines, and the error that stopped the reading early (if one did): the lines
    read before a decoding problem are still returned, so the error names the line it hit."""
    lines: list[str] = []
    try:
        for _ in range(count):
            line = handle.readline(MAX_LINE_CHARS + 1)
            if not line:
                break
            if len(line) > MAX_LINE_CHARS:
                return lines, TraceError(path, before + len(lines) + 1, f"line longer than {MAX_LINE_CHARS >> 20} MiB")
            lines.append(line)
        return lines, None
    except UnicodeDecodeError as exc:
        message = f"not UTF-8 text: {exc.reason}"
    except EOFError:
        message = "truncated gzip stream (the file ends inside a compressed member)"
    except (gzip.BadGzipFile, zlib.error) as exc:
        message = f"corrupt gzip stream: {exc}"
    except OSError as exc:
        message = f"cannot read trace: {exc.strerror or exc}"
    return lines, TraceError(path, before + len(lines) + 1, message)


def _parse_chunk(path: str, numbered: list[tuple[int, str]], id_list: str | None) -> list[tuple[int, dict[str, Any]]]:
    text = ",".join(line for _, line in numbered)
    lifted = lift_id_lists(text, len(numbered), id_list) if id_list is not None else None
    rows = _decode(text if lifted is None else lifted[0])
    if lifted is not None and rows is not None:
        if all(type(row) is dict and row.get(id_list, 0) is None for row in rows):
            for row, ids in zip(rows, lifted[1], strict=True):
                row[id_list] = ids
        else:  # a list taken was not its object's own `id_list`: decode the text as written
            rows = _decode(text)
    if rows is None or len(rows) != len(numbered):
        rows = [_parse_line(path, number, line) for number, line in numbered]
    for (number, _), row in zip(numbered, rows, strict=True):
        if not isinstance(row, dict):
            raise TraceError(path, number, "each line must be a JSON object")
    return [(number, row) for (number, _), row in zip(numbered, rows, strict=True)]


def _decode(text: str) -> list[Any] | None:
    """The objects of comma-joined JSON lines; None when they do not decode cleanly (or hold
    NaN or Infinity)."""
    try:
        return safejson.loads("[" + text + "]", max_depth=None, max_int=False)
    except ValueError:
        return None


def _parse_line(path: str, number: int, line: str) -> Any:
    """One line's JSON value (`safejson`, the row's own numbers checked by its reader)."""
    try:
        return safejson.loads(line, max_depth=None, max_int=False)
    except safejson.JsonRefused as exc:
        if exc.message.startswith("nested deeper"):
            raise TraceError(path, number, "JSON nested too deeply (a row is one flat object)") from None
        if exc.message.startswith("a number that cannot"):
            raise TraceError(path, number, "invalid JSON: a number with too many digits") from None
        raise TraceError(path, number, exc.message) from None
