"""`applied_compute_agentic` traces: one agent conversation per line, expanded into turns.

A row ``{num_turns, input_prompt_length, assistant_response_length[], tool_call_output_length[],
tool_call_latency[], final_assistant_response_length}`` becomes a session of ``num_turns + 1``
turns. Turn 0 sends the prompt and gets ``assistant_response_length[0]`` tokens back; turn k
sends the previous prompt plus the previous answer and tool output, after the tool's latency
(seconds); the last turn answers with ``final_assistant_response_length`` tokens. The prompt of
every turn is the session's growing list of hash ids (fresh ids, one per trace block), so a
turn's prompt extends the previous one exactly.
"""

from __future__ import annotations

from typing import Any

from servesim.errors import TraceError
from servesim.limits import MAX_TOKENS
from servesim.traffic.jsonl import finite_float, read_jsonl
from servesim.traffic.workload import Session, Turn, Workload

SESSION_PREFIX = "applied_compute_agentic_session_"
_LISTS = ("assistant_response_length", "tool_call_output_length", "tool_call_latency")


def read_applied_compute(path: str, block_size: int) -> Workload:
    """Read an `applied_compute_agentic` trace; hash ids are numbered across the whole trace."""
    sessions: list[Session] = []
    next_id = 0
    for line, row in read_jsonl(path):
        try:
            turns = _turns(row)
        except ValueError as exc:
            raise TraceError(path, line, str(exc)) from None
        blocks = -(-turns[-1][0] // block_size)
        ids = range(next_id, next_id + blocks)  # fresh ids: every turn's prompt is a slice, none is copied
        next_id += blocks
        session = Session(f"{SESSION_PREFIX}{line}", [], None)
        for input_length, output_length, delay_ms in turns:
            session.turns.append(Turn(ids[: -(-input_length // block_size)], block_size, input_length,
                                      output_length, delay_ms))
        sessions.append(session)
    if not sessions:
        raise TraceError(path, None, "the trace has no requests")
    return Workload(sessions)


def _turns(row: dict[str, Any]) -> list[tuple[int, int, float]]:
    """(input length, output length, delay before the turn in ms) of every turn of a row."""
    n = _count(row.get("num_turns"), "num_turns")
    prompt = _count(row.get("input_prompt_length"), "input_prompt_length")
    if prompt == 0:
        raise ValueError("input_prompt_length must be > 0")
    lists: dict[str, list[Any]] = {}
    for name in _LISTS:
        value = row.get(name)
        if not isinstance(value, list) or len(value) != n:
            raise ValueError(f"{name} must be a list of num_turns ({n}) values")
        lists[name] = value
    answers = [_count(v, "assistant_response_length[]") for v in lists["assistant_response_length"]]
    tools = [_count(v, "tool_call_output_length[]") for v in lists["tool_call_output_length"]]
    latencies = [_seconds(v) for v in lists["tool_call_latency"]]
    final = _count(row.get("final_assistant_response_length"), "final_assistant_response_length")
    turns = [(prompt, answers[0] if n else final, 0.0)]
    for k in range(1, n + 1):
        prompt += answers[k - 1] + tools[k - 1]
        if prompt > MAX_TOKENS:
            raise ValueError(f"turn {k}'s prompt (input_prompt_length plus the answers and tool outputs before it) "
                             f"grows to {prompt} tokens; at most {MAX_TOKENS:,}")
        turns.append((prompt, answers[k] if k < n else final, latencies[k - 1] * 1000))
    return turns


def _count(value: Any, field: str) -> int:
    if type(value) is not int or value < 0:
        raise ValueError(f"{field} must be a non-negative integer (got {value!r})")
    if value > MAX_TOKENS:
        raise ValueError(f"{field} must be at most {MAX_TOKENS:,} tokens (got {value})")
    return value


def _seconds(value: Any) -> float:
    number = finite_float(value)
    if number is None or number < 0:
        raise ValueError(f"tool_call_latency[] must be a finite number of seconds >= 0 (got {value!r})")
    return number
