"""The traffic of a run, resolved (`servesim.build` fills it from the config): where requests
come from, when they arrive, and the driver that releases them."""

from __future__ import annotations

from dataclasses import dataclass

from servesim.errors import RunError
from servesim.traffic.driver import Driver
from servesim.traffic.mooncake import read_mooncake
from servesim.traffic.synthetic import constant_rate_schedule, poisson_schedule, synthetic_workload
from servesim.traffic.workload import Workload


@dataclass(frozen=True, slots=True)
class SyntheticSpec:
    """`count` sessions of `turns` turns (1: single requests) with constant lengths."""

    count: int
    input_tokens: int
    """Prompt tokens (new tokens per turn for sessions)."""
    output_tokens: int
    turns: int = 1
    shared_prefix_ratio: float = 0.0
    prefix_groups: int = 0
    inter_turn_delay_ms: float = 0.0


@dataclass(frozen=True, slots=True)
class TraceSpec:
    """A trace file and how to read it."""

    path: str
    format: str
    block_size: int | None
    """Tokens per trace hash id."""


@dataclass(frozen=True, slots=True)
class LoadSpec:
    """When requests arrive: "concurrency" (closed loop), "poisson", "constant_rate" or
    "trace_timestamps" (the sessions' own first-arrival times, divided by `speedup`)."""

    kind: str
    concurrency: int = 0
    rate: float = 0.0
    """Requests (or sessions) per second of the open-loop loads."""
    seed: int = 0
    speedup: float = 1.0


@dataclass(frozen=True, slots=True)
class TrafficSpec:
    """The requests of a run and their arrivals."""

    source: SyntheticSpec | TraceSpec
    load: LoadSpec
    frontend_ms: float = 0.0
    """Latency from a client's send to the engine seeing the request (servesim extension)."""
    client_timeout_ms: float | None = None
    """Clients abandon a request unfinished this long after sending it (servesim extension)."""

    def workload(self, block_size: int) -> Workload:
        """The source's sessions (synthetic prompts are made of blocks of `block_size`)."""
        source = self.source
        if isinstance(source, SyntheticSpec):
            return synthetic_workload(source.count, source.input_tokens, source.output_tokens, block_size,
                                      turns=source.turns, shared_prefix_ratio=source.shared_prefix_ratio,
                                      prefix_groups=source.prefix_groups,
                                      inter_turn_delay_ms=source.inter_turn_delay_ms)
        if source.format not in ("mooncake", "mooncake-delta") or source.block_size is None:
            raise RunError(f"trace format {source.format!r} is not supported yet")
        return read_mooncake(source.path, source.block_size, accumulate=source.format == "mooncake-delta")

    def driver(self, workload: Workload) -> Driver:
        """The driver releasing `workload`'s turns under this load."""
        load, lag = self.load, self.frontend_ms
        n = len(workload.sessions)
        if load.kind == "concurrency":
            return Driver(workload, concurrency=load.concurrency, frontend_ms=lag)
        if load.kind == "poisson":
            return Driver(workload, first_arrivals=poisson_schedule(n, load.rate, load.seed), frontend_ms=lag)
        if load.kind == "constant_rate":
            return Driver(workload, first_arrivals=constant_rate_schedule(n, load.rate), frontend_ms=lag)
        return Driver(workload, first_arrivals=_trace_arrivals(workload, load.speedup), delay_scale=load.speedup,
                      frontend_ms=lag)


def _trace_arrivals(workload: Workload, speedup: float) -> list[float]:
    """First arrivals counted from the workload's origin (by default the earliest present
    timestamp), divided by the speedup."""
    present = [s.first_arrival_ms for s in workload.sessions if s.first_arrival_ms is not None]
    origin = workload.origin_ms if workload.origin_ms is not None else min(present) if present else 0.0
    return [0.0 if s.first_arrival_ms is None else (s.first_arrival_ms - origin) / speedup
            for s in workload.sessions]
