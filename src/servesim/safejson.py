"""JSON read defensively: what every reader of a user's JSON file goes through.

`loads` parses like `json.loads` but refuses

* ``NaN``, ``Infinity`` and ``-Infinity`` (JSON has no such numbers; Python's parser accepts them),
* integers beyond ±`MAX_INT` (2⁶³ − 1; no count or time servesim reads comes near), and numbers
  too long to convert,
* nesting deeper than `MAX_DEPTH` levels (a deeper document is either an attack or a mistake),

and `read_json` / `decode` refuse text that is not UTF-8. Every refusal is a `JsonRefused`
carrying the 1-based line it was found on (None when the whole document is at fault), which
each reader turns into its own error naming ``FILE:LINE``. `finite_number` checks one value.
"""

from __future__ import annotations

import errno
import json
import math
import os
import re
import stat
from pathlib import Path
from typing import Any

MAX_DEPTH = 64
"""Deepest nesting accepted (servesim's inputs nest at most a handful of levels)."""
MAX_INT = 2**63 - 1
"""Largest magnitude of an integer accepted."""
MAX_FILE_BYTES = 1 << 30
"""Largest JSON document read whole (1 GiB); JSON lines are read a line at a time instead."""


class JsonRefused(ValueError):
    """A JSON text servesim refuses; `line` is 1-based (None: the whole document)."""

    def __init__(self, message: str, line: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.line = line
        self.token = ""

    def where(self, path: str | Path) -> str:
        """``PATH:LINE: message`` (``PATH: message`` without a line)."""
        return f"{path}:{self.line}: {self.message}" if self.line is not None else f"{path}: {self.message}"


def _refused(message: str, token: str) -> JsonRefused:
    exc = JsonRefused(message)
    exc.token = token
    return exc


def _constant(name: str) -> Any:
    raise _refused(f"{name} is not a JSON number (write a finite number or null)", name)


def _integer(digits: str) -> int:
    if len(digits) > 20:
        raise _refused(f"integer {digits[:12]}… has {len(digits)} digits (at most ±{MAX_INT} accepted)", digits)
    value = int(digits)
    if abs(value) > MAX_INT:
        raise _refused(f"integer {digits} is out of range (at most ±{MAX_INT} accepted)", digits)
    return value


def _line_of(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def loads(text: str, *, max_depth: int | None = MAX_DEPTH, max_int: bool = True, first_line: int = 1,
          constants: bool = False) -> Any:
    """The JSON value of `text`, refusing what the module docstring lists (`JsonRefused`).

    `first_line` is the line number `text` starts on (for one line of a JSON lines file).
    `max_depth=None` and `max_int=False` leave the depth, integer and float-overflow checks to
    the caller (a hot path whose rows are flat, whose 64-bit ids may pass `MAX_INT` and whose
    numbers it checks itself): a document nested too deeply for the parser, NaN and Infinity
    are still refused. `constants=True` accepts NaN and Infinity (files of others that hold
    them where servesim reads nothing, like some Hugging Face model configs)."""
    try:
        value = json.loads(text, parse_constant=None if constants else _constant,
                           parse_int=_integer if max_int else None)
    except JsonRefused as exc:
        exc.line = first_line - 1 + _token_line(text, exc.token)
        raise
    except json.JSONDecodeError as exc:
        raise JsonRefused(f"invalid JSON: {exc.msg}", first_line + exc.lineno - 1) from None
    except RecursionError:
        raise _too_deep(text, max_depth or MAX_DEPTH, first_line) from None
    except ValueError as exc:  # a number too long to convert
        raise JsonRefused(f"a number that cannot be converted ({exc})", first_line) from None
    if max_depth is not None and nesting(value, max_depth) > max_depth:
        raise _too_deep(text, max_depth, first_line)
    if max_int and _BIG_EXPONENT.search(text) is not None:  # maybe a float literal beyond every float: look closer
        try:
            json.loads(text, parse_float=_float)
        except JsonRefused as exc:
            exc.line = first_line - 1 + _token_line(text, exc.token)
            raise
    return value


_BIG_EXPONENT = re.compile(r"[0-9][eE]\+?[0-9]{3,}")


def _float(literal: str) -> float:
    value = float(literal)
    if not math.isfinite(value):
        raise _refused(f"{literal} is beyond the largest float", literal)
    return value


def _token_line(text: str, token: str) -> int:
    """The line of the first `token` outside a string (1 when it cannot be told)."""
    for match in re.finditer(re.escape(token), text):
        before = text[:match.start()]
        if (before.count('"') - before.count('\\"')) % 2 == 0:
            return _line_of(text, match.start())
    return 1


def _too_deep(text: str, max_depth: int, first_line: int) -> JsonRefused:
    """The refusal of a document nested deeper than `max_depth`, naming the line it gets there."""
    depth, in_string, escaped = 0, False, False
    for pos, char in enumerate(text):
        if in_string:
            escaped, in_string = (False, True) if escaped else (char == "\\", char != '"')
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            if depth > max_depth:
                return JsonRefused(f"nested deeper than {max_depth} levels", first_line - 1 + _line_of(text, pos))
        elif char in "]}":
            depth -= 1
    return JsonRefused(f"nested deeper than {max_depth} levels", first_line)


def nesting(value: Any, limit: int = MAX_DEPTH) -> int:
    """How deeply `value` nests (a scalar 0, a flat list 1, ...), counting only up to `limit` + 1."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if type(item) is dict:
            children = [v for v in item.values() if type(v) is dict or type(v) is list]
        elif type(item) is list:
            children = [v for v in item if type(v) is dict or type(v) is list]
        else:
            continue
        deepest = max(deepest, depth)
        if deepest > limit:
            return deepest
        stack.extend((child, depth + 1) for child in children)
    return deepest


def decode(data: bytes) -> str:
    """`data` as UTF-8 text (a leading byte-order mark dropped); `JsonRefused` naming the line
    of the first byte that is not UTF-8."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise JsonRefused(f"not UTF-8 text ({exc.reason} at byte {exc.start})",
                          data.count(b"\n", 0, exc.start) + 1) from None


def regular_file_or_error(path: str | Path) -> None:
    """Raise `OSError` when `path` is a pipe, a device or a socket: opening a pipe nobody writes
    to waits for ever, and a device (`/dev/zero`) never ends. A missing file or a folder is left
    to the caller's own open."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        raise OSError(errno.EINVAL, "not a regular file (a pipe, a device or a socket)")


def read_json(path: str | Path, *, max_bytes: int = MAX_FILE_BYTES, constants: bool = False) -> Any:
    """The JSON document in file `path` (`loads` on its UTF-8 text). `OSError` when it cannot be
    read (or is not a regular file), `JsonRefused` when it is refused (a file over `max_bytes` too)."""
    regular_file_or_error(path)
    with open(path, "rb") as handle:
        data = handle.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise JsonRefused(f"larger than {max_bytes >> 20} MiB")
    return loads(decode(data), constants=constants)


def finite_number(value: Any) -> float | None:
    """`value` as a finite float when it is a JSON number (not a bool) that is one; else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None
