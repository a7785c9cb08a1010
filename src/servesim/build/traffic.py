"""Lowering the `traffic:` section: the resolved source and load (`servesim.traffic.spec`)."""

from __future__ import annotations

from servesim.config.schema import (
    ConcurrencyLoad,
    ConstantRateLoad,
    PoissonLoad,
    SyntheticSessionSource,
    SyntheticSource,
    TraceSource,
    TraceTimestampsLoad,
    TrafficConfig,
    request_count,
)
from servesim.traffic.spec import LoadSpec, SyntheticSpec, TraceSpec, TrafficSpec


def traffic_spec(traffic: TrafficConfig, *, aggregated: bool, frontend_ms: float = 0.0) -> TrafficSpec:
    """The run's traffic with every default resolved (request counts included); `aggregated`
    tells whether the engines are aggregated (dependency graphs need them); requests reach the
    engine `frontend_ms` after their clients send them."""
    timeout = traffic.client_timeout_seconds
    return TrafficSpec(_source(traffic), _load(traffic), _graph_refusal(traffic, aggregated), frontend_ms=frontend_ms,
                       client_timeout_ms=1000 * timeout if timeout is not None else None)


def _source(traffic: TrafficConfig) -> SyntheticSpec | TraceSpec:
    source = traffic.source
    if isinstance(source, SyntheticSource):
        return SyntheticSpec(_count(traffic), source.input_tokens, source.output_tokens,
                             cached_prefix_tokens=source.cached_prefix_tokens)
    if isinstance(source, SyntheticSessionSource):
        s = source.session
        return SyntheticSpec(_count(traffic), source.new_input_tokens_per_turn, source.output_tokens_per_turn,
                             turns=s.turns, shared_prefix_ratio=s.shared_prefix_ratio,
                             prefix_groups=s.prefix_groups, inter_turn_delay_ms=s.inter_turn_delay_ms)
    assert isinstance(source, TraceSource)
    return TraceSpec(tuple(source.paths), source.format, source.trace_block_size,
                     source.nested_timestamp_basis or "auto")


def _count(traffic: TrafficConfig) -> int:
    count = request_count(traffic)
    assert count is not None, "the schema requires a stop for synthetic sources"
    return count


def _load(traffic: TrafficConfig) -> LoadSpec:
    load = traffic.load
    if isinstance(load, ConcurrencyLoad):
        return LoadSpec("concurrency", concurrency=load.concurrency)
    if isinstance(load, PoissonLoad):
        assert load.rate is not None
        return LoadSpec("poisson", rate=load.rate, seed=load.seed)
    if isinstance(load, ConstantRateLoad):
        assert load.rate is not None
        return LoadSpec("constant_rate", rate=load.rate)
    assert isinstance(load, TraceTimestampsLoad)
    snap = load.agentic_snapshot
    snapshot = None
    if snap is not None:
        chosen = snap.initial_selections
        snapshot = (snap.seed, None if chosen is None else tuple((s.source_play_id, s.t_star_ms) for s in chosen))
    profile = None if load.agentic_profile is None else load.agentic_profile.model_dump()
    return LoadSpec("trace_timestamps", speedup=load.speedup, lanes=load.agentic_lanes, snapshot=snapshot,
                    warmup=load.agentic_warmup, profile=profile,
                    live_warmup=load.agentic_warmup_policy == "live_trajectory_v1",
                    corpus_cursor=snap.corpus_cursor if snap is not None else None)


def _graph_refusal(traffic: TrafficConfig, aggregated: bool) -> str | None:
    """Why an agent-aware Dynamo trace (known only once read) cannot be replayed in this run, in
    the reference's words; the schema refuses the same for `agentic_mooncake` up front."""
    if isinstance(traffic.load, ConcurrencyLoad):
        return "agentic Dynamo trace does not support concurrency load"
    if traffic.stop is not None and traffic.stop.max_virtual_time_seconds is not None:
        return "agentic Dynamo trace does not support max virtual time"
    if not aggregated and not (isinstance(traffic.source, TraceSource) and traffic.source.format == "weka"):
        return "agentic Dynamo trace requires aggregated topology"
    return None
