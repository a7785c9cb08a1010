"""The traffic of a run, resolved (`servesim.build` fills it from the config): where requests
come from, when they arrive, and the driver that releases them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from servesim.errors import RunError
from servesim.traffic.driver import Driver, RequestDriver
from servesim.traffic.synthetic import constant_rate_schedule, poisson_schedule, synthetic_workload
from servesim.traffic.workload import Workload

if TYPE_CHECKING:
    from servesim.traffic.agentic import AgenticGraph
    from servesim.traffic.warmup import Preparation


@dataclass(frozen=True, slots=True, eq=False, repr=False)
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
    cached_prefix_tokens: int = 0
    """Leading prompt tokens every request shares (single-turn sources only)."""


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class TraceSpec:
    """Trace files (several only for `dynamo` shards) and how to read them."""

    paths: tuple[str, ...]
    format: str
    block_size: int | None
    """Tokens per trace hash id (None only for `dynamo` and `weka`: the trace's embedded one)."""
    nested_timestamp_basis: str = "auto"
    """`weka` only: how nested subagent timestamps read (auto, absolute or relative)."""


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class LoadSpec:
    """When requests arrive: "concurrency" (closed loop), "poisson", "constant_rate" or
    "trace_timestamps" (the sessions' own first-arrival times, divided by `speedup`)."""

    kind: str
    concurrency: int = 0
    rate: float = 0.0
    """Requests (or sessions) per second of the open-loop loads."""
    seed: int = 0
    speedup: float = 1.0
    lanes: int | None = None
    """`agentic_lanes`: replay an agentic graph's plays closed loop on this many lanes."""
    snapshot: tuple[int, tuple[tuple[str, float], ...] | None] | None = None
    """`agentic_snapshot`: (seed, the (source play, cut) of every lane, or None for 0.13's seeded
    draw of them)."""
    warmup: bool = False
    """`agentic_warmup`: prime and warm every snapshot lane's prefixes before the measured replay."""
    live_warmup: bool = False
    """`agentic_warmup_policy: live_trajectory_v1` (with `warmup` and `profile`): the lanes warm up
    by playing their trajectories (`servesim.traffic.live_warmup`)."""
    profile: dict[str, float] | None = None
    """`agentic_profile` options (seconds): the lanes go on with the corpus' next plays until the cutoff."""
    corpus_cursor: int | None = None
    """`agentic_snapshot.corpus_cursor`: the corpus position of the first play drawn after the snapshot plays."""


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class TrafficSpec:
    """The requests of a run and their arrivals."""

    source: SyntheticSpec | TraceSpec
    load: LoadSpec
    graph_refusal: str | None = None
    """Why a dependency graph (an agent-aware Dynamo trace) cannot be replayed in this run, as
    the reference says it at run time; None when it can."""
    frontend_ms: float = 0.0
    """Latency from a client's send to the engine seeing the request (servesim extension)."""
    client_timeout_ms: float | None = None
    """Clients abandon a request unfinished this long after sending it (servesim extension)."""

    def workload(self, block_size: int) -> Workload | AgenticGraph:
        """The source's sessions, or the dependency graph of an agentic trace (synthetic prompts
        are made of blocks of `block_size`)."""
        source = self.source
        if isinstance(source, SyntheticSpec):
            return synthetic_workload(source.count, source.input_tokens, source.output_tokens, block_size,
                                      turns=source.turns, shared_prefix_ratio=source.shared_prefix_ratio,
                                      prefix_groups=source.prefix_groups,
                                      inter_turn_delay_ms=source.inter_turn_delay_ms,
                                      cached_prefix_tokens=source.cached_prefix_tokens)
        speedup = self.load.speedup if self.load.kind == "trace_timestamps" and self.load.snapshot is None else 1.0
        return read_trace(source.format, list(source.paths), source.block_size, speedup,
                          timestamped=self.load.kind == "trace_timestamps", basis=source.nested_timestamp_basis)

    def driver(self, workload: Workload | AgenticGraph, prompt_limit: int | None = None) -> RequestDriver:
        """The driver releasing `workload`'s requests under this load (see `Driver` for
        `prompt_limit`)."""
        lag = self.frontend_ms
        if not isinstance(workload, Workload):  # an agentic trace's dependency graph
            if self.graph_refusal is not None:
                raise RunError(self.graph_refusal)
            from servesim.traffic.agentic_driver import AgenticDriver

            lanes = self.load.lanes
            preparation = None
            if self.load.snapshot is not None:
                from servesim.traffic.snapshot import draw_selections, snapshot_graph

                seed, selections = self.load.snapshot
                assert self.load.lanes is not None, "the schema requires agentic_lanes with agentic_snapshot"
                chosen = list(selections) if selections is not None else draw_selections(workload, self.load.lanes, seed)
                source = workload
                workload = snapshot_graph(workload, chosen, seed, self.load.speedup,
                                          profile=self.load.profile is not None)
                lanes = None
                if self.load.warmup:
                    from servesim.traffic.warmup import Preparation

                    assert workload.snapshot_lanes is not None
                    preparation = Preparation.plan(workload.snapshot_lanes, workload.block_size,
                                                   primers_only=self.load.live_warmup)
                if self.load.profile is not None:
                    return _profile_driver(source, workload, self.load, seed, lag, preparation)
            if self.load.lanes is not None:
                workload.summary_fields = workload.summary_fields | {"agentic_lanes": self.load.lanes}
            elif workload.summary_fields:
                workload.summary_fields = workload.summary_fields | {"agentic_lanes": None}
            return AgenticDriver(workload, frontend_ms=lag, lanes=lanes, preparation=preparation)
        load = self.load
        if load.snapshot is not None:
            raise RunError("agentic_snapshot requires weka input")
        if load.lanes is not None:
            raise RunError("agentic_lanes requires weka, agentic_mooncake, or agentic dynamo input")
        n = len(workload.sessions)
        if load.kind == "concurrency":
            return Driver(workload, concurrency=load.concurrency, frontend_ms=lag, prompt_limit=prompt_limit)
        if load.kind == "poisson":
            times = poisson_schedule(n, load.rate, load.seed)
        elif load.kind == "constant_rate":
            times = constant_rate_schedule(n, load.rate)
        else:
            return Driver(workload, first_arrivals=_trace_arrivals(workload, load.speedup), delay_scale=load.speedup,
                          frontend_ms=lag, prompt_limit=prompt_limit)
        return Driver(workload, first_arrivals=times, frontend_ms=lag, prompt_limit=prompt_limit)


def _profile_driver(source: AgenticGraph, graph: AgenticGraph, load: LoadSpec, seed: int,
                    lag: float, preparation: Preparation | None) -> RequestDriver:
    """The driver of a continuous profile over `graph`'s snapshot plays (`source`: the trace at
    speedup 1, whose plays the lanes go on with)."""
    from servesim.traffic.profile import ProfileDriver, ProfilePlan
    from servesim.traffic.snapshot import corpus_plays

    assert load.lanes is not None and load.profile is not None
    cursor = load.corpus_cursor if load.corpus_cursor is not None else load.lanes
    graph.summary_fields = graph.summary_fields | {"agentic_lanes": load.lanes}
    plan = ProfilePlan(source, corpus_plays(source), load.lanes, seed, load.speedup, cursor, dict(load.profile))
    if load.live_warmup:
        from servesim.traffic.live_warmup import LiveProfileDriver

        return LiveProfileDriver(graph, plan, frontend_ms=lag, preparation=preparation)
    return ProfileDriver(graph, plan, frontend_ms=lag, preparation=preparation)


def _trace_arrivals(workload: Workload, speedup: float) -> list[float]:
    """First arrivals counted from the workload's origin (by default the earliest present
    timestamp), divided by the speedup."""
    present = [s.first_arrival_ms for s in workload.sessions if s.first_arrival_ms is not None]
    origin = workload.origin_ms if workload.origin_ms is not None else min(present) if present else 0.0
    return [0.0 if s.first_arrival_ms is None else (s.first_arrival_ms - origin) / speedup
            for s in workload.sessions]


def read_trace(fmt: str, paths: list[str], block_size: int | None, speedup: float, *,
               timestamped: bool = False, basis: str = "auto") -> Workload | AgenticGraph:
    """Read the trace files of a `trace` source (docs/traffic.md): sessions, or a dependency graph
    for `agentic_mooncake` and agent-aware `dynamo` traces.

    `block_size` is the trace block size (None only for `dynamo`: the embedded one); `speedup`
    divides the times of agentic graphs (session workloads are sped up by the driver).
    `timestamped` (a `trace_timestamps` load): mooncake first timestamps are checked (see
    `read_mooncake`); `basis` is a `weka` trace's nested timestamp basis.
    """
    if fmt == "dynamo":
        return _read_dynamo(paths, block_size, speedup)
    if fmt == "weka":
        from servesim.traffic.weka import read_weka

        graph, resolved = read_weka(paths[0], basis, block_size, speedup=speedup)
        graph.summary_fields = {"agentic_input_format": "weka", "weka_nested_timestamp_basis": resolved}
        return graph
    if block_size is None:
        raise RunError(f"trace format {fmt!r} needs a block size")
    if fmt in ("mooncake", "mooncake-delta"):
        from servesim.traffic.mooncake import read_mooncake

        return read_mooncake(paths[0], block_size, accumulate=fmt == "mooncake-delta", timestamped=timestamped)
    if fmt == "agentic_mooncake":
        from servesim.traffic.agentic_mooncake import read_agentic_mooncake

        return read_agentic_mooncake(paths[0], block_size, speedup=speedup)
    if fmt == "applied_compute_agentic":
        from servesim.traffic.applied_compute import read_applied_compute

        return read_applied_compute(paths[0], block_size)
    raise RunError(f"trace format {fmt!r} is not supported")


def _read_dynamo(paths: list[str], block_size: int | None, speedup: float) -> Workload | AgenticGraph:
    """Standard Dynamo traces are sessions; agent-aware ones (agent_context everywhere) graphs."""
    from servesim.traffic.dynamo import read_dynamo, standard_workload

    requests, tools, embedded = read_dynamo(paths, block_size)
    if requests[0].agent_context is not None:
        from servesim.traffic.dynamo_agentic import agentic_graph

        return agentic_graph(requests, tools, embedded, speedup)
    return standard_workload(requests, embedded)
