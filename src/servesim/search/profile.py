"""The workload of a recommend config reduced to what an analytic estimate needs.

Mean prompt, cached-prefix and output lengths, the request count, and how requests arrive: an
open-loop rate (requests per ms; infinite for a burst) or a closed loop of N clients. The trace
or synthetic source is read once per search; each candidate only changes the load (its
`traffic.load` knob), which `Profile.arrivals` applies.

The means are taken over a bounded sample, so screening costs the same for 10⁸ requests as for
`PROFILE_REQUESTS`: the sessions in input order until they hold that many requests (a
synthetic workload's sessions are made only that far). The counts (requests, sessions) are the
whole workload's; so is a trace's span of first arrivals.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

from servesim.config import SimConfig
from servesim.config.schema import ConcurrencyLoad, ConstantRateLoad, PoissonLoad, TraceTimestampsLoad
from servesim.traffic.agentic import AgenticGraph
from servesim.traffic.synthetic import SyntheticSessions
from servesim.traffic.workload import Session, Workload

PROFILE_REQUESTS = 20_000
"""Requests the workload's means are taken over (the first sessions holding that many)."""
PROFILE_BLOCKS = 1_000_000
"""Prompt blocks the sample's cached prefixes are looked up over (a long session's growing
prompts are cut there)."""
POISSON_EXACT = 100_000
"""Sessions up to which a Poisson schedule's span is drawn exactly (beyond: its expectation)."""


@dataclass(frozen=True)
class Arrivals:
    """Open loop at `rate_per_ms` requests per ms (inf: all at once) over `span_ms` from the
    first arrival to the last, or a closed loop of `concurrency` clients."""

    rate_per_ms: float = 0.0
    concurrency: int = 0
    span_ms: float = 0.0
    scv: float = 1.0
    """Squared coefficient of variation of the gaps between arrivals (Poisson 1, a fixed rate 0)."""

    @property
    def closed(self) -> bool:
        return self.concurrency > 0


@dataclass(frozen=True)
class Profile:
    """Means over the workload's requests and the shape of its arrivals."""

    requests: int
    isl: float
    """Mean prompt tokens (the whole context of a later turn)."""
    prefix: float
    """Mean prompt tokens another request (or the session's previous turn) may have cached."""
    osl: float
    sessions: int
    turns_per_session: float
    span_ms: float
    """First arrival of the last session minus that of the first, at speedup 1 (traces)."""
    chains: int = 0
    """An agentic graph's plays (each a chain of dependent requests): a closed loop of as many
    clients, whatever the load; 0 for session workloads."""

    def arrivals(self, config: SimConfig) -> Arrivals:
        """How this candidate's load releases the requests."""
        if self.chains:
            return Arrivals(concurrency=self.chains)
        traffic = config.traffic
        load = traffic.load if traffic is not None else None
        if isinstance(load, ConcurrencyLoad):
            return Arrivals(concurrency=max(1, min(load.concurrency, self.sessions)))
        if isinstance(load, PoissonLoad) and load.rate:
            span = _poisson_span(self.sessions, load.rate, load.seed)
        elif isinstance(load, ConstantRateLoad) and load.rate:
            span = (self.sessions - 1) * 1000.0 / load.rate
            if self.turns_per_session == 1:
                return Arrivals(rate_per_ms=load.rate / 1000.0, span_ms=span, scv=0.0)
        else:
            span = self.span_ms / (load.speedup if isinstance(load, TraceTimestampsLoad) else 1.0)
        if span <= 0 or self.sessions < 2:
            return Arrivals(rate_per_ms=float("inf"))
        return Arrivals(rate_per_ms=(self.sessions - 1) * self.turns_per_session / span, span_ms=span)


@functools.lru_cache(maxsize=256)
def _poisson_span(sessions: int, rate: float, seed: int) -> float:
    """The last first-arrival of the seeded Poisson schedule (what the run will draw; beyond
    `POISSON_EXACT` sessions its expectation, which a draw of that many hardly leaves)."""
    from servesim.traffic.synthetic import poisson_schedule

    if sessions > POISSON_EXACT:
        return (sessions - 1) * 1000.0 / rate

    return functools.reduce(lambda _previous, arrival: arrival, poisson_schedule(sessions, rate, seed), 0.0)


def profile(config: SimConfig) -> Profile:
    """The workload of `config` (the source read with the config's own rules)."""
    from servesim.build.traffic import traffic_spec

    assert config.traffic is not None
    engine = config.engine
    role = next(iter(engine.roles))
    spec = traffic_spec(config.traffic, aggregated=engine.mode == "aggregated")
    workload = spec.workload(engine.block_size(role))
    if isinstance(workload, AgenticGraph):
        return _graph_profile(workload)
    return _session_profile(workload)


def _session_profile(workload: Workload) -> Profile:
    """The sampled sessions in arrival order; a prompt's cacheable prefix is its leading blocks
    some earlier prompt already held (an unbounded cache) plus, for a later turn of an
    accumulating session, the whole previous context."""
    isl = prefix = osl = 0.0
    count = 0
    seen: set[int] = set()
    order = sorted(_sample(workload.sessions), key=lambda s: s.first_arrival_ms or 0.0)
    blocks = 0
    for session in order:
        context = 0
        if blocks >= PROFILE_BLOCKS:
            break
        for index, turn in enumerate(session.turns):
            if blocks >= PROFILE_BLOCKS:
                break
            blocks += min(PROFILE_BLOCKS, len(turn.block_values))
            prompt = context + turn.input_length if workload.accumulate else turn.input_length
            shared = min(_seen_prefix(turn.block_values, seen) * turn.block_size, turn.input_length)
            cached = context + shared if workload.accumulate and index else shared
            isl += prompt
            prefix += max(0, min(cached, prompt - 1))
            osl += turn.max_output_tokens
            context = prompt + turn.max_output_tokens
            count += 1
    sessions = len(workload.sessions)
    n = max(1, count)
    requests = workload.num_requests
    return Profile(requests, isl / n, prefix / n, max(1.0, osl / n), sessions,
                   requests / max(1, sessions), _span(workload.sessions))


def _sample(sessions: Sequence[Session]) -> list[Session]:
    """The first sessions, in input order, until they hold `PROFILE_REQUESTS` requests."""
    out: list[Session] = []
    held = 0
    for index in range(len(sessions)):
        if held >= PROFILE_REQUESTS:
            break
        session = sessions[index]
        out.append(session)
        held += len(session.turns)
    return out


def _span(sessions: Sequence[Session]) -> float:
    """Last first arrival minus the first (0 when fewer than two sessions have one); a
    synthetic workload's sessions carry none (its load places them), so they are not made."""
    if isinstance(sessions, SyntheticSessions):
        return 0.0
    present = [s.first_arrival_ms for s in sessions if s.first_arrival_ms is not None]
    return max(present) - min(present) if len(present) > 1 else 0.0


def _seen_prefix(values: Sequence[int], seen: set[int]) -> int:
    """Leading values already in `seen` (then every value is added to it)."""
    values = values[:PROFILE_BLOCKS]
    leading = 0
    for value in values:
        if value not in seen:
            break
        leading += 1
    seen.update(values)
    return leading


def _graph_profile(graph: AgenticGraph) -> Profile:
    """An agentic graph: its plays run side by side, each a chain of requests (a closed loop of
    one client per play); cached prefixes are not estimated (none)."""
    nodes = graph.nodes
    n = max(1, len(nodes))
    plays = max(1, len(graph.play_sizes()))
    return Profile(len(nodes), sum(node.input_length for node in nodes) / n, 0.0,
                   max(1.0, sum(node.output_length for node in nodes) / n), plays, n / plays, 0.0, chains=plays)
