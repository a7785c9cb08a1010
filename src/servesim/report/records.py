"""Per-request records in the reference's `per_request` / `requests.jsonl` shape."""

from __future__ import annotations

import random
import uuid
from collections.abc import Sequence
from typing import Any

from servesim.collect.collector import RequestRecord, Route

def _admission_history(record: RequestRecord) -> list[dict[str, Any]]:
    per_pool: dict[str, int] = {}
    out = []
    for ordinal, adm in enumerate(record.admissions):
        k = per_pool.get(adm.pool, 0)
        per_pool[adm.pool] = k + 1
        out.append({
            "admission_ordinal": ordinal,
            "at_ms": adm.at_ms,
            "is_readmission": k > 0,
            "pool": adm.pool,
            "pool_admission_ordinal": k,
            "reused_input_tokens": adm.reused_tokens,
        })
        if adm.host_tokens is not None and not k:  # 0.13 gives a readmission no tier fields
            out[-1]["g1_reused_input_tokens"] = adm.reused_tokens - adm.host_tokens
            out[-1]["host_reused_input_tokens"] = adm.host_tokens
    return out


def _tier_fields(record: RequestRecord) -> dict[str, Any]:
    """With a host KV tier (upstream 0.13): the first admission's reuse by tier."""
    first = record.admissions[0] if record.admissions else None
    if first is None or first.host_tokens is None:
        return {}
    return {"first_admission_g1_reused_input_tokens": first.reused_tokens - first.host_tokens,
            "first_admission_host_reused_input_tokens": first.host_tokens}


def _routing_history(record: RequestRecord) -> list[dict[str, Any]]:
    return [{
        "dp_rank": route.dp_rank,
        "logical_worker_id": route.worker_id,
        "outcome": "immediate",
        "pool": route.pool,
        "queue_entered_at_ms": None,
        "queue_wait_ms": 0.0,
        "released_at_ms": None,
        "reported_overlap_tokens": route.overlap_tokens,
        "scheduler_id": route.scheduler_id,
    } for route in record.routes]


def _route(record: RequestRecord, pool: str) -> Route | None:
    return next((r for r in reversed(record.routes) if r.pool == pool), None)


def _handoff_fields(record: RequestRecord) -> dict[str, Any]:
    """Fields that only disaggregated requests have (null for aggregated ones)."""
    prefill = [a for a in record.admissions if a.pool == "prefill"]
    decode = [a for a in record.admissions if a.pool == "decode"]
    prefill_route, decode_route = _route(record, "prefill"), _route(record, "decode")
    if prefill_route is None and decode_route is None:
        return dict.fromkeys((
            "decode_admit_ms", "decode_reused_input_tokens", "decode_route_overlap_tokens",
            "destination_activated_ms", "destination_reserved_ms", "prefill_admit_ms",
            "prefill_route_overlap_tokens", "prefill_worker_idx", "source_held_ms",
            "source_released_ms"))
    return {
        "decode_admit_ms": decode[0].at_ms if decode else None,
        "decode_reused_input_tokens": max((a.reused_tokens for a in decode), default=None),
        "decode_route_overlap_tokens": decode_route.overlap_tokens if decode_route else None,
        "destination_activated_ms": record.destination_activated_ms,
        "destination_reserved_ms": record.destination_reserved_ms,
        "prefill_admit_ms": prefill[0].at_ms if prefill else None,
        "prefill_route_overlap_tokens": prefill_route.overlap_tokens if prefill_route else None,
        "prefill_worker_idx": prefill_route.scheduler_id if prefill_route else None,
        "source_held_ms": record.source_held_ms,
        "source_released_ms": record.source_released_ms,
    }


def request_record(record: RequestRecord, request_uuid: str) -> dict[str, Any]:
    """The per-request record of a request that reached a terminal state."""
    times = record.token_times()
    n = len(times)
    first = times[0] if n else 0.0
    last = times[-1] if n else 0.0
    pools: dict[str, int] = {}
    for adm in record.admissions:
        pools[adm.pool] = pools.get(adm.pool, 0) + 1
    # A request that failed at its decode reservation has a decode route but no serving worker.
    serving = _route(record, "agg") or (_route(record, "decode") if record.destination_reserved_ms is not None
                                        else None)
    prompt_side = [a for a in record.admissions if a.pool != "decode"]
    out = _handoff_fields(record)
    out.update({
        "admission_count": len(record.admissions),
        "admission_history": _admission_history(record),
        "arrival_time_ms": record.arrival_ms,
        "decode_worker_idx": serving.scheduler_id if serving else None,
        "dispatched_at_ms": None,
        "e2e_latency_ms": last - record.arrival_ms if n else None,
        "first_admit_ms": record.admissions[0].at_ms if record.admissions else None,
        "first_token_ms": first if n else None,
        "input_length": record.input_length,
        "itl_ms": (last - first) / (n - 1) if n > 1 else None,
        "last_token_ms": last if n else None,
        "output_length": record.output_length,
        "pressure_record_ordinals": [],
        "readmission_count": sum(max(0, c - 1) for c in pools.values()),
        "requested_output_length": record.requested_output,
        "reused_input_tokens": max((a.reused_tokens for a in prompt_side), default=0),
        "routing_history": _routing_history(record),
        "session_id": record.session_id,
        "terminal_status": record.status.value if record.status is not None else None,
        "terminal_time_ms": record.terminal_ms,
        "ttft_ms": max(first - record.arrival_ms, 0.0) if n else None,
        "ttst_ms": times[1] - first if n > 1 else None,
        "turn_index": record.turn_index,
        "uuid": request_uuid,
    })
    out.update(_tier_fields(record))
    if record.request_id is not None:
        out["request_id"] = record.request_id
        out["play_id"] = record.play_id
        out["dispatched_at_ms"] = record.arrival_ms
    if record.reason is not None:
        out["rejection_reason"] = record.reason
    return out


def request_records(records: Sequence[RequestRecord], seed: int = 0,
                    uuid_numbers: Sequence[int] | None = None) -> list[dict[str, Any]]:
    """Records of every terminal request, ordered by arrival time then arrival order (agentic
    requests: by request id first).

    UUIDs are version-4 UUIDs drawn from a generator owned by this call, so a rerun of the same
    config gives the same identifiers; an agentic request's UUID is its node number (1-based),
    as in the reference, or `uuid_numbers[node]` when given (snapshot replays).
    """
    rng = random.Random(seed)
    ids = [str(uuid.UUID(int=rng.getrandbits(128), version=4)) for _ in records]
    terminal = [r for r in records if r.status is not None]
    if any(r.request_id is not None for r in terminal):
        terminal.sort(key=lambda r: (r.request_id or "", r.arrival_ms, r.node))
        numbers = uuid_numbers
        return [request_record(r, str(uuid.UUID(int=numbers[r.node] if numbers is not None else r.node + 1)))
                for r in terminal]
    terminal.sort(key=lambda r: (r.arrival_ms, r.rid))
    return [request_record(r, ids[r.rid]) for r in terminal]
