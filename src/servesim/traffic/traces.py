"""Which reader a trace format uses, and what it is lowered to (docs/traffic.md)."""

from __future__ import annotations

from servesim.traffic.agentic import AgenticGraph
from servesim.traffic.workload import Workload


def read_trace(fmt: str, paths: list[str], block_size: int | None, speedup: float) -> Workload | AgenticGraph:
    """Read the trace files of a `trace` source.

    `block_size` is the trace block size (None only for `dynamo`: the embedded one); `speedup`
    divides the times of agentic graphs (session workloads are sped up by the driver).
    """
    if fmt == "dynamo":
        return _read_dynamo(paths, block_size, speedup)
    assert block_size is not None
    if fmt in ("mooncake", "mooncake-delta"):
        from servesim.traffic.mooncake import read_mooncake

        return read_mooncake(paths[0], block_size, accumulate=fmt == "mooncake-delta")
    if fmt == "agentic_mooncake":
        from servesim.traffic.agentic_mooncake import read_agentic_mooncake

        return read_agentic_mooncake(paths[0], block_size, speedup=speedup)
    assert fmt == "applied_compute_agentic", fmt
    from servesim.traffic.applied_compute import read_applied_compute

    return read_applied_compute(paths[0], block_size)


def _read_dynamo(paths: list[str], block_size: int | None, speedup: float) -> Workload | AgenticGraph:
    """Standard Dynamo traces are sessions; agent-aware ones (agent_context everywhere) graphs."""
    from servesim.traffic.dynamo import read_dynamo, standard_workload

    requests, tools, embedded = read_dynamo(paths, block_size)
    if requests[0].agent_context is not None:
        from servesim.traffic.dynamo_agentic import agentic_graph

        return agentic_graph(requests, tools, embedded, speedup)
    return standard_workload(requests, embedded)
