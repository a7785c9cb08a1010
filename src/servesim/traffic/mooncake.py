"""Mooncake-style JSONL traces (`mooncake`, `mooncake-delta`) lowered to a `Workload`.

Each row is one request (turn). Rows sharing a ``session_id`` form a multi-turn session in
file order; rows without one are single-turn sessions named ``request_<line>``. Each hash id
stands for ``block_size`` copies of one token value (the id itself), so prompts share token
prefixes exactly as far as their hash-id lists do.
"""

from __future__ import annotations

import json
import math
from array import array
from collections.abc import Mapping
from typing import Any

from servesim.errors import TraceError
from servesim.limits import MAX_MS, MAX_TOKENS
from servesim.traffic.hash_ids import u64_array, unique_positions
from servesim.traffic.jsonl import finite_float, read_jsonl
from servesim.traffic.workload import Session, Turn, Workload


def _pick(row: Mapping[str, Any], name: str, alias: str) -> Any:
    """`row[name]`, else `row[alias]`, else None."""
    return row.get(name, row.get(alias))


def _int(value: Any, field: str, minimum: int, maximum: int = MAX_TOKENS) -> int:
    if type(value) is int and minimum <= value <= maximum:
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{field} must be an integer (got {value!r})")
    if isinstance(value, float):
        if not value.is_integer():
            raise ValueError(f"{field} must be an integer (got {value!r})")
        value = int(value)
    if value < minimum:
        raise ValueError(f"{field} must be >= {minimum} (got {value})")
    if value > maximum:
        raise ValueError(f"{field} must be <= {maximum} (got {value})")
    return value


def _time(value: Any, field: str) -> float:
    if type(value) is float and math.isfinite(value):
        return value
    number = finite_float(value)
    if number is None:
        raise ValueError(f"{field} must be a finite number of milliseconds (got {value!r})")
    return number


def _hash_ids(value: Any) -> array:
    if type(value) is array:  # read as such: checked already (`lift_id_lists`)
        return value
    if not isinstance(value, list) or not value:
        raise ValueError("hash_ids must be a non-empty list of integers")
    ids = u64_array(value)
    if ids is None:
        bad = next(h for h in value if type(h) is not int or not 0 <= h < 1 << 64)
        raise ValueError(f"hash_ids must hold unsigned 64-bit integers (got {bad!r})")
    return ids


class _Span:
    """The first timestamps of a `trace_timestamps` trace: within MAX_MS of each other; the
    sessions starting without one are counted (they arrive at the trace's start)."""

    __slots__ = ("low", "high", "missing", "first_missing")

    def __init__(self) -> None:
        self.low = math.inf
        self.high = -math.inf
        self.missing = 0
        self.first_missing = 0

    def add(self, timestamp: float | None, line: int) -> None:
        if timestamp is None:
            self.missing += 1
            self.first_missing = self.first_missing or line
            return
        if timestamp < self.low:
            self.low = timestamp
        if timestamp > self.high:
            self.high = timestamp
        if self.high - self.low > MAX_MS:
            raise ValueError(f"timestamp {timestamp:g} makes the trace span {self.high - self.low:g} ms, beyond "
                             f"{MAX_MS:g} ms (31.7 years), where simulated times lose millisecond precision "
                             f"(timestamps are milliseconds)")

    def warn(self, path: str) -> None:
        """Say (once) that sessions start without a timestamp: easy to miss, and it moves them."""
        if self.missing:
            import logging

            logging.getLogger("servesim").warning(
                "servesim: warning: %s:%d: %d session(s) start without a timestamp; under a 'trace_timestamps' "
                "load they arrive at the trace's start (as in the reference)", path, self.first_missing, self.missing)


class _SessionState:
    __slots__ = ("session", "last_timestamp")

    def __init__(self, session: Session, timestamp: float | None) -> None:
        self.session = session
        self.last_timestamp = timestamp


def _parse_row(row: Mapping[str, Any], block_size: int) -> tuple[Turn, float | None, Any]:
    """The turn of one row, its timestamp and its explicit delay (None when absent)."""
    hash_ids = _hash_ids(row.get("hash_ids"))
    output = _pick(row, "output_length", "output_tokens")
    if output is None:
        raise ValueError("output_length is required")
    output_length = _int(output, "output_length", 0)
    capacity = len(hash_ids) * block_size
    given = _pick(row, "input_length", "input_tokens")
    input_length = capacity if given is None else _int(given, "input_length", 1)
    if input_length > capacity:
        raise ValueError(f"input_length {input_length} exceeds hash_ids capacity {capacity}")
    output_ids = row.get("output_token_ids")
    if output_ids is not None:
        if not isinstance(output_ids, list) or len(output_ids) != output_length:
            raise ValueError("output_token_ids must be a list of output_length token ids")
        output_ids = [_int(t, "output_token_ids[]", 0, (1 << 64) - 1) for t in output_ids]
    timestamp = _pick(row, "timestamp", "created_time")
    timestamp = None if timestamp is None else _time(timestamp, "timestamp")
    delay = _pick(row, "delay", "delay_ms")
    delay = None if delay is None else _time(delay, "delay")
    _check_hints(row)
    del hash_ids[-(-input_length // block_size):]
    turn = Turn(hash_ids, block_size, input_length, output_length, 0.0, output_ids)
    return turn, timestamp, delay


def _check_hints(row: Mapping[str, Any]) -> None:
    """The router hints (`priority`, `strict_priority`, `policy_class`) are not used, but typed
    as the reference types them: integers (strict_priority >= 0) and a string; `false` for an
    integer is refused as the reference refuses it."""
    for name, minimum in (("priority", None), ("strict_priority", 0)):
        value = row.get(name)
        if value is None:
            continue
        if type(value) is not int:
            raise ValueError(f"{name} must be an integer (got {value!r})")
        if minimum is not None and value < minimum:
            raise ValueError(f"{name} must be >= {minimum} (got {value})")
    policy = row.get("policy_class")
    if policy is not None and not isinstance(policy, str):
        raise ValueError(f"policy_class must be a string (got {policy!r})")


_FLOAT_INTS = 1 << 1023
"""Integers of smaller magnitude convert to a float (larger ones go to `_parse_row`)."""


def _plain_row(row: Mapping[str, Any], block_size: int) -> tuple[Turn, float, None] | None:
    """`_parse_row` of the common row shape, with less work: exactly the keys ``timestamp``,
    ``input_length``, ``output_length`` and ``hash_ids`` (read as an array), holding in-range
    integers and a finite timestamp. None for any other row (`_parse_row` reads it, and names
    what is wrong)."""
    if len(row) != 4:
        return None
    hash_ids, given, output = row.get("hash_ids"), row.get("input_length"), row.get("output_length")
    timestamp = row.get("timestamp")
    if type(hash_ids) is not array or type(given) is not int or type(output) is not int:
        return None
    if not (0 <= output <= MAX_TOKENS and 1 <= given <= MAX_TOKENS and given <= len(hash_ids) * block_size):
        return None
    if type(timestamp) is int and -_FLOAT_INTS < timestamp < _FLOAT_INTS:
        timestamp = float(timestamp)
    elif type(timestamp) is not float or not math.isfinite(timestamp):
        return None
    del hash_ids[-(-given // block_size):]
    return Turn(hash_ids, block_size, given, output), timestamp, None


def _session_key(row: Mapping[str, Any], line: int) -> str:
    sid = row.get("session_id")
    if sid is None:
        return f"request_{line}"
    return sid if isinstance(sid, str) else json.dumps(sid)


def _add_turn(state: _SessionState, turn: Turn, timestamp: float | None, delay: float | None) -> None:
    """Append a later turn, deriving its think time from `delay` or the timestamp gap."""
    if delay is None:
        if timestamp is not None:
            if state.last_timestamp is None:
                raise ValueError("a later turn's timestamp needs an earlier timestamp in its session")
            delay = timestamp - state.last_timestamp
        else:
            delay = 0.0
    if delay < 0:
        raise ValueError(f"the delay before this turn is negative ({delay} ms)")
    if delay > MAX_MS:
        raise ValueError(f"the delay before this turn ({delay:g} ms) exceeds {MAX_MS:g} ms (31.7 years): "
                         f"beyond, simulated times lose millisecond precision")
    turn.delay_ms = delay
    if timestamp is not None:
        state.last_timestamp = timestamp
    state.session.turns.append(turn)


def read_mooncake(path: str, block_size: int, *, accumulate: bool = False, timestamped: bool = False) -> Workload:
    """Read a `mooncake` (or, with `accumulate`, `mooncake-delta`) trace file.

    `timestamped` (a `trace_timestamps` load): first timestamps may span at most MAX_MS, and
    sessions whose first row has none are reported on stderr.
    """
    states: dict[str, _SessionState] = {}
    sessions: list[Session] = []
    span = _Span()
    for line, row in read_jsonl(path, id_list="hash_ids"):
        try:
            turn, timestamp, delay = _plain_row(row, block_size) or _parse_row(row, block_size)
            key = _session_key(row, line)
            state = states.get(key)
            if state is None:
                if delay:
                    raise ValueError("the first turn of a session cannot have a non-zero delay")
                if timestamped:
                    span.add(timestamp, line)
                session = Session(key, [turn], timestamp)
                sessions.append(session)
                states[key] = _SessionState(session, timestamp)
            else:
                _add_turn(state, turn, timestamp, delay)
        except ValueError as exc:
            raise TraceError(path, line, str(exc)) from None
    if not sessions:
        raise TraceError(path, None, "the trace has no requests")
    span.warn(path)
    _mark_unique_tokens(sessions, block_size)
    return Workload(sessions, accumulate=accumulate)


def _mark_unique_tokens(sessions: list[Session], block_size: int) -> None:
    """Set each turn's `unique_from`: where its first hash id used by no other row starts."""
    turns = [turn for session in sessions for turn in session.turns]
    positions = unique_positions([t.block_values for t in turns], [t.input_length for t in turns], block_size)
    for turn, position in zip(turns, positions, strict=True):
        turn.unique_from = position
