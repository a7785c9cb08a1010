"""The `traffic:` section: what arrives (source), when (load) and until when (stop).
"""


from collections.abc import Mapping
from typing import Annotated, Any, Literal, Union

from annotated_types import Ge, Le, MinLen
from pydantic import Discriminator, Strict, Tag, field_validator, model_validator

from servesim.config.fields import (
    DurationMs,
    Fraction,
    NonNegativeInt,
    PositiveInt,
    PositiveNumber,
    PositiveSeconds,
    Rate,
    RequestCount,
    RuleViolation,
    SchemaModel,
    TokenCount,
    raise_if,
    type_tag,
    without_nulls,
)
from servesim.limits import MAX_REQUESTS, MAX_TURNS

TraceFormat = Literal["mooncake", "mooncake-delta", "agentic_mooncake", "applied_compute_agentic", "dynamo", "weka"]
NestedTimestampBasis = Literal["auto", "absolute", "relative"]

class SyntheticSource(SchemaModel):
    """Single-turn requests of constant length."""

    type: Literal["synthetic"] = "synthetic"
    """Source kind: 'synthetic'."""
    input_tokens: TokenCount = 1024
    """Prompt length of every request."""
    output_tokens: TokenCount = 128
    """Output length of every request."""
    cached_prefix_tokens: NonNegativeInt = 0
    """Upstream 0.13 key: the first this many prompt tokens are the same in every request (one shared prefix; the first request finds it cold), at most input_tokens; 0 = every prompt unique."""

    @model_validator(mode="after")
    def _prefix_within_prompt(self) -> "SyntheticSource":
        """The shared prefix is part of the prompt."""
        if self.cached_prefix_tokens > self.input_tokens:
            raise RuleViolation([("cached_prefix_tokens", f"must be <= input_tokens ({self.input_tokens}); "
                                                          f"got {self.cached_prefix_tokens}")])
        return self


class SessionConfig(SchemaModel):
    """Shape of each synthetic multi-turn session."""

    turns: Annotated[int, Strict(), Ge(2), Le(MAX_TURNS)] = 4
    """Turns per session (>= 2)."""
    shared_prefix_ratio: Fraction = 0.0
    """Fraction of each turn's blocks taken from the session's prefix group, in [0, 1]."""
    prefix_groups: NonNegativeInt = 0
    """Number of prefix groups sessions are spread over (> 0 when shared_prefix_ratio > 0)."""
    inter_turn_delay_ms: DurationMs = 0.0
    """Think time between a turn's completion and the next turn."""

    @model_validator(mode="after")
    def _groups_for_sharing(self) -> "SessionConfig":
        """Prefix sharing needs at least one group."""
        if self.shared_prefix_ratio > 0 and self.prefix_groups <= 0:
            raise RuleViolation([("prefix_groups", "must be > 0 when shared_prefix_ratio > 0")])
        return self


class SyntheticSessionSource(SchemaModel):
    """Multi-turn sessions whose prompts accumulate the conversation so far."""

    type: Literal["synthetic-session"] = "synthetic-session"
    """Source kind: 'synthetic-session'."""
    new_input_tokens_per_turn: TokenCount = 1024
    """New prompt tokens added by each turn."""
    output_tokens_per_turn: TokenCount = 128
    """Output length of each turn."""
    session: SessionConfig
    """Session shape (turns, prefix sharing, think time)."""


DEFAULT_TRACE_BLOCK_SIZE = 512


class TraceSource(SchemaModel):
    """Requests replayed from JSONL trace files."""

    type: Literal["trace"] = "trace"
    """Source kind: 'trace'."""
    paths: list[str]
    """Trace files (a relative path is read from the current directory, else from the config's folder); exactly one unless format is dynamo."""
    format: TraceFormat = "mooncake"
    """Trace format: mooncake, mooncake-delta, agentic_mooncake, applied_compute_agentic, dynamo or weka (weka: an upstream AISimulate 0.13 format, docs/traffic.md)."""
    block_size: PositiveInt | None = None
    """Tokens per trace hash id; omitted = 512 (dynamo and weka: the block size embedded in the trace; a configured one must equal it for weka)."""
    nested_timestamp_basis: NestedTimestampBasis | None = None
    """Upstream AISimulate 0.13 key (weka only): how timestamps nested under a subagent marker read — 'absolute' (on the play's clock), 'relative' (seconds after the marker) or 'auto' (relative when any nested request starts before its marker, else absolute); omitted = auto."""

    @field_validator("paths")
    @classmethod
    def _non_empty_paths(cls, paths: list[str]) -> list[str]:
        """At least one path and no empty path."""
        if not paths or any(p == "" for p in paths):
            raise ValueError("must be a non-empty list of non-empty paths")
        return paths

    @model_validator(mode="after")
    def _one_path(self) -> "TraceSource":
        """Only the dynamo format reads several files."""
        if self.format != "dynamo" and len(self.paths) != 1:
            raise RuleViolation([("paths", f"format '{self.format}' requires exactly one path (got {len(self.paths)})")])
        if self.nested_timestamp_basis is not None and self.format != "weka":
            raise RuleViolation([("nested_timestamp_basis", f"only valid for format 'weka' (format is '{self.format}')")])
        return self

    @property
    def trace_block_size(self) -> int | None:
        """Tokens per trace hash id: the configured value, else 512; None = taken from a dynamo trace."""
        if self.block_size is not None:
            return self.block_size
        return None if self.format in ("dynamo", "weka") else DEFAULT_TRACE_BLOCK_SIZE


SourceConfig = Annotated[
    Union[
        Annotated[SyntheticSource, Tag("synthetic")],
        Annotated[SyntheticSessionSource, Tag("synthetic-session")],
        Annotated[TraceSource, Tag("trace")],
    ],
    Discriminator(type_tag(None)),
]

# --------------------------------------------------------------------------------------------
# traffic.load
# --------------------------------------------------------------------------------------------

_AGENTIC_KEYS = ("agentic_lanes", "agentic_snapshot", "agentic_warmup", "agentic_warmup_policy", "agentic_profile")
_LOAD_KEYS = ("concurrency", "requests_per_second", "sessions_per_second", "seed", "speedup") + _AGENTIC_KEYS
_RATE_KEYS = ("requests_per_second", "sessions_per_second")


def _load_fields(data: Any, kind: str, own: tuple[str, ...], nullable: tuple[str, ...]) -> Any:
    """Reject load keys that belong to other load types; drop nulls that mean "not given"."""
    if not isinstance(data, Mapping):
        return data
    foreign = tuple(k for k in _LOAD_KEYS if k not in own)
    data = without_nulls(data, foreign + nullable)
    raise_if([(k, f"not allowed when load type is '{kind}'") for k in foreign if k in data])
    return data


class ConcurrencyLoad(SchemaModel):
    """Closed loop: keep a fixed number of requests (sessions) in flight."""

    type: Literal["concurrency"] = "concurrency"
    """Load kind: 'concurrency' (the default)."""
    concurrency: PositiveInt = 10
    """Requests (or sessions) kept in flight."""

    @model_validator(mode="before")
    @classmethod
    def _fields(cls, data: Any) -> Any:
        """Only `concurrency` is accepted."""
        return _load_fields(data, "concurrency", ("concurrency",), ())


class PoissonLoad(SchemaModel):
    """Open loop with exponential inter-arrival gaps."""

    type: Literal["poisson"] = "poisson"
    """Load kind: 'poisson'."""
    requests_per_second: Rate | None = None
    """Mean arrival rate of requests (synthetic sources)."""
    sessions_per_second: Rate | None = None
    """Mean arrival rate of sessions (synthetic-session sources)."""
    seed: NonNegativeInt = 42
    """Seed of the arrival-time generator."""

    @model_validator(mode="before")
    @classmethod
    def _fields(cls, data: Any) -> Any:
        """Only the rates and `seed` are accepted."""
        return _load_fields(data, "poisson", _RATE_KEYS + ("seed",), _RATE_KEYS + ("seed",))

    @property
    def rate(self) -> float | None:
        """Whichever rate is set (requests or sessions per second)."""
        return self.requests_per_second if self.requests_per_second is not None else self.sessions_per_second


class ConstantRateLoad(SchemaModel):
    """Open loop with evenly spaced arrivals."""

    type: Literal["constant_rate"] = "constant_rate"
    """Load kind: 'constant_rate'."""
    requests_per_second: Rate | None = None
    """Arrival rate of requests (synthetic sources)."""
    sessions_per_second: Rate | None = None
    """Arrival rate of sessions (synthetic-session sources)."""

    @model_validator(mode="before")
    @classmethod
    def _fields(cls, data: Any) -> Any:
        """Only the rates are accepted."""
        return _load_fields(data, "constant_rate", _RATE_KEYS, _RATE_KEYS)

    @property
    def rate(self) -> float | None:
        """Whichever rate is set (requests or sessions per second)."""
        return self.requests_per_second if self.requests_per_second is not None else self.sessions_per_second


class AgenticSnapshotSelection(SchemaModel):
    """One lane's initial cut: the source play it starts from and where that play is cut."""

    source_play_id: Annotated[str, Strict(), MinLen(1)]
    """Upstream AISimulate 0.13 key: the source play (its `agentic_play_outcomes` / per-request `play_id` in a run without snapshot, e.g. `weka:<hash>:play:<id>`)."""
    t_star_ms: Annotated[float, Ge(0)]
    """Upstream AISimulate 0.13 key: the cut, in ms of the play's recorded time (0 = its first request's start); requests that started before it are history, the others are replayed, each released `recorded start − t_star_ms` (divided by the speedup) after the run starts, or after its replayed parents as recorded. Must lie within the play's first and last request starts."""


class AgenticSnapshotOptions(SchemaModel):
    """AgentX request-boundary snapshots: every lane starts inside a play, cut at `t_star_ms`."""

    seed: Annotated[int, Strict(), Ge(0), Le(2**64 - 1)]
    """Upstream AISimulate 0.13 key: names the snapshot plays (`agentic-v1:<graph digest>:<seed>:<lane>:<ordinal>`) and seeds the draw of each lane's cut when `initial_selections` is omitted (lane k starts in the k-th play of the corpus, cut between 1/4 and 3/4 of its recorded span, as 0.13 draws it)."""
    initial_selections: Annotated[list[AgenticSnapshotSelection], MinLen(1)] | None = None
    """Upstream AISimulate 0.13 key: the cut of every lane, in lane order (exactly one per lane; with `corpus_cursor`). Omitted: drawn from `seed`."""
    corpus_cursor: Annotated[int, Strict(), Ge(0), Le(2**64 - 1)] | None = None
    """Upstream AISimulate 0.13 key: the corpus position of the next play to draw after the initial ones (with `initial_selections`; at least the number of lanes). Only continuous profiles draw further plays."""


class AgenticProfileOptions(SchemaModel):
    """A continuous agentic profile (AISimulate 0.13): the snapshot lanes go on with the corpus' next plays until admission closes."""

    duration_seconds: PositiveNumber = 3600.0
    """Upstream AISimulate 0.13 key: admission closes this long after the start: no request is sent and no play starts at or after it; requests in flight finish."""
    response_grace_seconds: Annotated[float, Ge(0)] = 30.0
    """Upstream AISimulate 0.13 key: grace for in-flight responses after the cutoff: what still runs at the deadline is canceled there (as 0.13)."""
    cancel_drain_seconds: Annotated[float, Ge(0)] = 10.0
    """Upstream AISimulate 0.13 key: drain after cancelling at the grace deadline (its deadline is reported; canceled requests end at once)."""
    tree_idle_cap_seconds: PositiveNumber = 300.0
    """Upstream AISimulate 0.13 key: a play with none of its requests in flight for this long has its timers moved earlier so the next fires then (listed in `idle_shifts`)."""
    global_idle_cap_seconds: PositiveNumber = 10.0
    """Upstream AISimulate 0.13 key: a server with no request in flight for this long has every timer moved earlier so the next fires then (listed in `idle_shifts`)."""


class TraceTimestampsLoad(SchemaModel):
    """Open loop on the trace's own timestamps (trace sources only)."""

    type: Literal["trace_timestamps"] = "trace_timestamps"
    """Load kind: 'trace_timestamps'."""
    speedup: PositiveNumber = 1.0
    """Divides every arrival time and inter-turn delay."""
    agentic_lanes: PositiveInt | None = None
    """Upstream AISimulate 0.13 key (agentic traces: weka, agentic_mooncake, agent-aware dynamo): replay the plays closed loop on this many lanes — plays in corpus order, play k on lane k mod lanes, each lane running its plays one after another, a play starting when the lane's previous play has ended (its times counted from then); at most the number of plays. Omitted = every play on its own timestamps."""
    agentic_snapshot: AgenticSnapshotOptions | None = None
    """Upstream AISimulate 0.13 key (weka traces in servesim): start every lane inside a play, at a request boundary — lane k replays the requests of `initial_selections[k]`'s play that started at or after its cut, and only that play; the graph digest is that of the trace at speedup 1, the speedup still divides the replayed times. Requires `agentic_lanes`; reported as `agentic_snapshots`."""
    agentic_warmup: bool = False
    """Upstream AISimulate 0.13 key: before the measured replay, every snapshot lane sends its primers (each conversation's last request of history) then 10 warm-up repeats of them, one after another with a one-token answer; the replay starts at the barrier after the last one, and the report counts from there (the preparation is listed in `agentic_phases`). Requires `agentic_snapshot`."""
    agentic_warmup_policy: Literal["repeated_prefixes", "live_trajectory_v1"] | None = None
    """Upstream AISimulate 0.13 key: how `agentic_warmup` warms: 'repeated_prefixes' (the default: primers and repeated prompts) or 'live_trajectory_v1' (primers replayed live, then the lanes' trajectories with one-token answers; requires `agentic_warmup` and `agentic_profile`, 0.13's rule)."""
    agentic_profile: AgenticProfileOptions | None = None
    """Upstream AISimulate 0.13 key: continuous profile over a duration (requires `agentic_snapshot`; after the warm-up's barrier with `agentic_warmup`): every lane, when its play is over, starts the corpus' next play (from `corpus_cursor`) until admission closes; reported as `agentic_profile`, the summary over the observation window."""

    @model_validator(mode="before")
    @classmethod
    def _fields(cls, data: Any) -> Any:
        """Only `speedup` and the agentic keys are accepted."""
        return _load_fields(data, "trace_timestamps", ("speedup",) + _AGENTIC_KEYS, ("speedup",) + _AGENTIC_KEYS)

    @model_validator(mode="after")
    def _agentic_rules(self) -> "TraceTimestampsLoad":
        """AISimulate 0.13's rules between the agentic keys."""
        snap = self.agentic_snapshot
        problems = []
        if self.agentic_warmup and snap is None:
            problems.append(("agentic_warmup", "requires agentic_snapshot (0.13's rule)"))
        if self.agentic_profile is not None and snap is None:
            problems.append(("agentic_profile", "requires agentic_snapshot (0.13's rule)"))
        if snap is not None:
            if self.agentic_lanes is None:
                problems.append(("agentic_snapshot", "requires positive agentic_lanes (0.13's rule)"))
            if (snap.initial_selections is None) != (snap.corpus_cursor is None):
                problems.append(("agentic_snapshot", "initial_selections and corpus_cursor must be specified together (0.13's rule)"))
            elif snap.initial_selections is not None and self.agentic_lanes is not None:
                sel = snap.initial_selections
                if len(sel) != self.agentic_lanes:
                    problems.append(("agentic_snapshot.initial_selections", f"must contain exactly one selection per lane ({len(sel)} for {self.agentic_lanes} lanes; 0.13's rule)"))
                if snap.corpus_cursor is not None and snap.corpus_cursor < len(sel):
                    problems.append(("agentic_snapshot.corpus_cursor", f"cannot precede the initial lane draws ({snap.corpus_cursor} < {len(sel)}; 0.13's rule)"))
        if self.agentic_warmup_policy == "live_trajectory_v1" and (not self.agentic_warmup or self.agentic_profile is None):
            problems.append(("agentic_warmup_policy", "live_trajectory_v1 requires agentic_warmup and agentic_profile (0.13's rule)"))
        raise_if(problems)
        return self


LoadConfig = Annotated[
    Union[
        Annotated[ConcurrencyLoad, Tag("concurrency")],
        Annotated[PoissonLoad, Tag("poisson")],
        Annotated[ConstantRateLoad, Tag("constant_rate")],
        Annotated[TraceTimestampsLoad, Tag("trace_timestamps")],
    ],
    Discriminator(type_tag("concurrency")),
]

# --------------------------------------------------------------------------------------------
# traffic.stop and the section
# --------------------------------------------------------------------------------------------

REQUEST_STOPS = ("requests", "requests_per_load_unit")
SESSION_STOPS = ("sessions", "sessions_per_load_unit")


class StopConfig(SchemaModel):
    """When the workload ends: a request/session count (synthetic) or a time cap (trace)."""

    requests: RequestCount | None = None
    """Number of requests (synthetic)."""
    requests_per_load_unit: PositiveNumber | None = None
    """Requests per unit of load (concurrency or rate): count = max(1, round(ratio x unit))."""
    sessions: RequestCount | None = None
    """Number of sessions (synthetic-session)."""
    sessions_per_load_unit: PositiveNumber | None = None
    """Sessions per unit of load (concurrency or rate): count = max(1, round(ratio x unit))."""
    max_virtual_time_seconds: PositiveSeconds | None = None
    """Simulated-time cap (trace sources only)."""

    def given(self, keys: tuple[str, ...]) -> list[str]:
        """Which of `keys` are set."""
        return [k for k in keys if getattr(self, k) is not None]


class TrafficConfig(SchemaModel):
    """What arrives, when, and until when."""

    source: SourceConfig
    """Where requests come from: synthetic, synthetic-session or trace."""
    load: LoadConfig
    """When requests arrive: concurrency, poisson, constant_rate or trace_timestamps."""
    stop: StopConfig | None = None
    """When the workload ends (required for synthetic sources)."""
    client_timeout_seconds: PositiveSeconds | None = None
    """servesim extension: clients abort a request still unfinished this long after sending it (as load generators do, e.g. inference-perf's 300 s); it is reported as 'timed_out', its KV freed at the worker's next pass boundary, and it is left out of the latency statistics. Aggregated deployments only; omitted = clients wait for ever (the reference)."""

    @model_validator(mode="after")
    def _combination_rules(self) -> "TrafficConfig":
        """Source, load and stop must fit together."""
        if isinstance(self.source, TraceSource):
            problems = _trace_rules(self.source, self.load, self.stop)
        else:
            problems = _synthetic_rules(self.source, self.load, self.stop)
        raise_if(problems)
        return self


def _trace_rules(source: TraceSource, load: Any, stop: StopConfig | None) -> list[tuple[str, str]]:
    """Loads and stops a trace source accepts."""
    problems = []
    if not isinstance(load, (TraceTimestampsLoad, ConcurrencyLoad)):
        problems.append(("load.type", f"trace sources need 'trace_timestamps' or 'concurrency' load (got '{load.type}')"))
    if stop is not None:
        problems += [(f"stop.{k}", "not allowed for trace sources (only max_virtual_time_seconds)") for k in stop.given(REQUEST_STOPS + SESSION_STOPS)]
    if source.format in ("agentic_mooncake", "weka"):
        if not isinstance(load, TraceTimestampsLoad):
            problems.append(("load.type", f"format '{source.format}' requires 'trace_timestamps' load (got '{load.type}')"))
        if stop is not None and stop.max_virtual_time_seconds is not None:
            problems.append(("stop.max_virtual_time_seconds", f"not supported with format '{source.format}'"))
    if getattr(load, "agentic_lanes", None) is not None and source.format not in ("weka", "agentic_mooncake", "dynamo"):
        problems.append(("load.agentic_lanes", f"requires format weka, agentic_mooncake or an agent-aware dynamo trace (format is '{source.format}')"))
    if getattr(load, "agentic_snapshot", None) is not None and source.format != "weka":
        problems.append(("load.agentic_snapshot", f"servesim builds snapshots of weka traces only (format is '{source.format}')"))
    if source.format == "applied_compute_agentic" and not isinstance(load, ConcurrencyLoad):
        problems.append(("load.type", f"format 'applied_compute_agentic' requires 'concurrency' load (got '{load.type}')"))
    return problems


def _synthetic_rules(source: SyntheticSource | SyntheticSessionSource, load: Any, stop: StopConfig | None) -> list[tuple[str, str]]:
    """Loads and stops synthetic sources accept."""
    sessions = isinstance(source, SyntheticSessionSource)
    problems = []
    if isinstance(load, TraceTimestampsLoad):
        problems.append(("load.type", f"'trace_timestamps' load needs a trace source (source is '{source.type}')"))
    if isinstance(load, (PoissonLoad, ConstantRateLoad)):
        problems += _rate_rules(load, "sessions_per_second" if sessions else "requests_per_second", source.type)
    if stop is None:
        problems.append(("stop", f"is required for '{source.type}' sources"))
        return problems
    if stop.max_virtual_time_seconds is not None:
        problems.append(("stop.max_virtual_time_seconds", "is trace-only"))
    wanted, unwanted = (SESSION_STOPS, REQUEST_STOPS) if sessions else (REQUEST_STOPS, SESSION_STOPS)
    problems += [(f"stop.{k}", f"not allowed for '{source.type}' sources (use {' or '.join(wanted)})") for k in stop.given(unwanted)]
    if len(stop.given(wanted)) != 1:
        problems.append(("stop", f"exactly one of {', '.join(wanted)} is required for '{source.type}' sources"))
    elif not problems:
        problems += _size_rules(source, load, stop, stop.given(wanted)[0])
    return problems


def _size_rules(source: SyntheticSource | SyntheticSessionSource, load: Any, stop: StopConfig,
                key: str) -> list[tuple[str, str]]:
    """The run holds at most MAX_REQUESTS requests (sessions x turns for sessions)."""
    count = stop_count(stop, key, load)
    turns = source.session.turns if isinstance(source, SyntheticSessionSource) else 1
    if count * turns <= MAX_REQUESTS:
        return []
    what = f"{count} sessions x {turns} turns" if turns > 1 else f"{count} requests"
    return [(f"stop.{key}", f"makes {what}, more than the {MAX_REQUESTS:,} requests a run may hold")]


def stop_count(stop: StopConfig, key: str, load: Any) -> int:
    """The request or session count `stop.key` resolves to: the count itself, or for a ratio
    ``max(1, round(ratio x load unit))`` (Python's round, half to even)."""
    value = getattr(stop, key)
    if not key.endswith("_per_load_unit"):
        return int(value)
    return max(1, round(value * load_unit(load)))


def load_unit(load: Any) -> float:
    """What a relative stop multiplies: the concurrency or the arrival rate."""
    if isinstance(load, ConcurrencyLoad):
        return load.concurrency
    rate = load.rate if isinstance(load, (PoissonLoad, ConstantRateLoad)) else None
    if rate is None:
        raise ValueError(f"load type '{load.type}' has no load unit")
    return rate


def _rate_rules(load: PoissonLoad | ConstantRateLoad, wanted: str, source_type: str) -> list[tuple[str, str]]:
    """Open-loop loads need the rate whose unit matches the source."""
    other = "requests_per_second" if wanted == "sessions_per_second" else "sessions_per_second"
    problems = []
    if getattr(load, other) is not None:
        problems.append((f"load.{other}", f"rate unit does not match source '{source_type}' (use {wanted})"))
    elif getattr(load, wanted) is None:
        problems.append((f"load.{wanted}", f"is required for '{load.type}' load with source '{source_type}'"))
    return problems


def default_traffic() -> TrafficConfig:
    """The traffic used when the section is omitted: 1024/128 synthetic, concurrency 10, 100 requests."""
    return TrafficConfig(source=SyntheticSource(), load=ConcurrencyLoad(), stop=StopConfig(requests=100))
