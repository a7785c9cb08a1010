"""Lowering one `weka` trace object (a play) to agentic graph nodes (docs/traffic.md, `weka`).

The requests of a play carry no explicit dependencies: they are grouped into **streams** (a
main conversation and worker conversations) by their hash-id prefixes, and the edges between
them are inferred from their recorded times — consecutive requests of a stream, forks (spawns),
replay barriers between streams of one scope, joins of blocking subagents back into their
owner. The rules are AISimulate 0.13's, established from its documented behaviour and checked
against its runs (tests/test_parity_weka.py); the code is servesim's.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from typing import Any

from servesim.traffic.agentic import AgenticNode, Dependency

EPS_S = 1e-6
"""Slack, in seconds, of every time comparison (producer rounding)."""
SEAM_MAX_GAP_S = 3600.0
SEAM_MIN_OVERLAP = 0.5
PREAMBLE_MAX_OUTPUT = 64


class WekaLoweringError(ValueError):
    """A play cannot be lowered; `line` is the line of the entry at fault (None: the play)."""

    def __init__(self, message: str, line: int | None = None) -> None:
        super().__init__(message)
        self.line = line


@dataclass(slots=True)
class Req:
    """One source request of a play, with its position in the source."""

    source_id: str
    order: int
    t: float
    model: str
    input_length: int
    output_length: int
    hash_ids: list[int]
    api_time: float | None
    line: int | None = None

    @property
    def end(self) -> float:
        """Recorded end: start plus api_time (an absent api_time is a zero-width interval)."""
        return self.t + max(self.api_time or 0.0, 0.0)

    def key(self) -> tuple[float, int, str]:
        return (self.t, self.order, self.source_id)


@dataclass(slots=True)
class _Chain:
    requests: list[Req] = field(default_factory=list)
    fork_source: str | None = None
    fork_depth: int = 0
    fork_time: float = 0.0
    forked: bool = False
    spliced_into: int | None = None
    tail_source: str | None = None
    tail_hashes: list[int] = field(default_factory=list)
    tail_end: float = 0.0
    tail_model: str = ""

    def append(self, req: Req) -> None:
        if req.hash_ids:
            self.tail_source, self.tail_hashes = req.source_id, req.hash_ids
            self.tail_end, self.tail_model = req.end, req.model
        self.requests.append(req)


@dataclass(slots=True)
class _Stream:
    session_id: str
    requests: list[Req]
    fork_source: str | None
    scope: str


def lcp(a: list[int], b: list[int]) -> int:
    """Length of the common prefix of two hash-id lists."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def split_preamble(reqs: list[Req]) -> tuple[list[Req], list[Req]]:
    """The first request is a preamble (kept in the main stream, out of chain detection) when it
    shares no prefix with any later one — and, if it answered more than 64 tokens, no hash id."""
    reqs = sorted(reqs, key=Req.key)
    if len(reqs) < 2 or not reqs[0].hash_ids:
        return [], reqs
    first = reqs[0]
    if any(lcp(first.hash_ids, r.hash_ids) > 0 for r in reqs[1:]):
        return [], reqs
    if first.output_length > PREAMBLE_MAX_OUTPUT:
        others = {h for r in reqs[1:] for h in r.hash_ids}
        if any(h in others for h in first.hash_ids):
            return [], reqs
    return [first], reqs[1:]


def _extension(chains: list[_Chain], req: Req) -> int | None:
    """The chain whose tail prompt `req` extends (longest tail wins; same model, tail ended)."""
    best, best_len = None, 0
    for i, c in enumerate(chains):
        n = len(c.tail_hashes)
        if (n == 0 or n > len(req.hash_ids) or n <= best_len or c.tail_model != req.model
                or c.tail_end > req.t + EPS_S or c.tail_hashes != req.hash_ids[:n]):
            continue
        best, best_len = i, n
    return best


def _fork_parent(chains: list[_Chain], hashes: list[int]) -> tuple[int | None, int]:
    """The chain sharing the longest prefix with `hashes` (ties: the longer tail, then the first)."""
    best, best_key = None, (0, 0)
    for i, c in enumerate(chains):
        depth = lcp(c.tail_hashes, hashes)
        key = (depth, len(c.tail_hashes))
        if depth > 0 and key > best_key:
            best, best_key = i, key
    return best, best_key[0]


def detect_chains(reqs: list[Req]) -> tuple[list[_Chain], int, list[int]]:
    """Chains (conversations) of `reqs`, the index of the main one and of the workers."""
    reqs = sorted(reqs, key=Req.key)
    chains: list[_Chain] = []
    owner: dict[str, int] = {}
    forks: dict[str, list[int]] = {}
    by_source = {r.source_id: r for r in reqs}
    for r in reqs:
        if not r.hash_ids:
            if not chains:
                chains.append(_Chain())
            owner[r.source_id] = 0
            chains[0].requests.append(r)
            continue
        if not chains:
            chains.append(_Chain())
            target: int | None = 0
        else:
            target = _extension(chains, r)
            if target is None and all(not c.tail_hashes for c in chains):
                target = 0
        if target is not None:
            owner[r.source_id] = target
            chains[target].append(r)
            continue
        parent, depth = _fork_parent(chains, r.hash_ids)
        fork_source = chains[parent].tail_source if parent is not None else None
        chain = _Chain(fork_source=fork_source, fork_depth=depth, fork_time=r.t, forked=True)
        index = len(chains)
        chains.append(chain)
        owner[r.source_id] = index
        chain.append(r)
        if fork_source is not None and depth > 0:
            forks.setdefault(fork_source, []).append(index)
    _resolve_seams(chains, forks, owner, by_source)
    live = [i for i, c in enumerate(chains) if c.spliced_into is None]
    main = min(live, key=lambda i: chains[i].requests[0].key()) if live else 0
    workers = sorted((i for i in live if i != main), key=lambda i: chains[i].requests[0].key())
    return chains, main, workers


def _seam_eligible(chain: _Chain, tail: Req) -> bool:
    if not chain.forked or chain.fork_depth == 0 or not chain.requests:
        return False
    first = chain.requests[0]
    gap = first.t - tail.end
    overlap = chain.fork_depth / max(len(tail.hash_ids), 1)
    return (tail.end <= first.t + EPS_S and first.model == tail.model
            and not (gap > SEAM_MAX_GAP_S and overlap < SEAM_MIN_OVERLAP))


def _resolve_seams(chains: list[_Chain], forks: dict[str, list[int]], owner: dict[str, int],
                   by_source: dict[str, Req]) -> None:
    """Splice a fork that resumes its parent's tail back onto the parent (a conversation that
    was only interrupted), then re-point the other forks of that tail at the new tail."""
    keys = sorted(forks)
    aliases: dict[int, int] = {}
    processed: set[str] = set()
    while keys:
        source = keys.pop(0)
        if source in processed:
            continue
        processed.add(source)
        own = owner[source]
        while own in aliases:
            own = aliases[own]
        if chains[own].tail_source != source:
            continue
        tail = by_source[source]
        registered = [i for i in forks[source] if chains[i].spliced_into is None]
        eligible = [i for i in registered if _seam_eligible(chains[i], tail)]
        if not eligible:
            continue
        elected = max(eligible, key=lambda i: (chains[i].fork_depth, -chains[i].fork_time, -i))
        moved, chains[elected].requests = chains[elected].requests, []
        for r in moved:
            owner[r.source_id] = own
        target, src = chains[own], chains[elected]
        target.requests.extend(moved)
        target.tail_source, target.tail_hashes = src.tail_source, src.tail_hashes
        target.tail_end, target.tail_model = src.tail_end, src.tail_model
        src.spliced_into = own
        aliases[elected] = own
        new_source = target.tail_source
        if new_source is None:
            continue
        new_tail = by_source[new_source]
        for i in registered:
            if i == elected or chains[i].spliced_into is not None:
                continue
            first = chains[i].requests[0]
            if new_tail.t > first.t + EPS_S:
                continue
            depth = lcp(target.tail_hashes, first.hash_ids)
            if depth == 0:
                continue
            chains[i].fork_source, chains[i].fork_depth = new_source, depth
            forks.setdefault(new_source, []).append(i)
            processed.discard(new_source)
            if new_source not in keys:
                keys.append(new_source)
                keys.sort()


def streams(namespace: str, prefix: str, reqs: list[Req]) -> list[_Stream]:
    """The streams of one level (the play's top level or a subagent): main first, then workers."""
    preamble, rest = split_preamble(reqs)
    chains, main, workers = detect_chains(rest)
    scope = f"{namespace}:scope:{prefix}"
    head = chains[main]
    out = [_Stream(f"{namespace}:session:{prefix}", sorted(head.requests + preamble, key=Req.key),
                   head.fork_source, scope)]
    for k, i in enumerate(workers):
        out.append(_Stream(f"{namespace}:session:{prefix}:worker:{k}", sorted(chains[i].requests, key=Req.key),
                           chains[i].fork_source, scope))
    return out


def ms(seconds: float) -> float:
    """Seconds to milliseconds, floored at 0 and rounded to the nanosecond (half away from 0)."""
    ns = max(seconds, 0.0) * 1e9
    whole = float(int(ns))
    if ns - whole >= 0.5:
        whole += 1.0
    return whole / 1e6


class _Deps:
    """Dependencies per target source id; an edge equal in (parent, trigger, relation) to one
    already there is dropped (the first writer's delay wins)."""

    def __init__(self) -> None:
        self.edges: dict[str, list[tuple[str, str, float, str]]] = {}

    def add(self, target: str, parent: str, trigger: str, delay_ms: float, relation: str) -> None:
        edges = self.edges.setdefault(target, [])
        if not any(e[0] == parent and e[1] == trigger and e[3] == relation for e in edges):
            edges.append((parent, trigger, delay_ms, relation))


@dataclass(slots=True)
class Subagent:
    """A subagent marker of the play's top level, its nested requests already on the play's
    clock (`t` canonical)."""

    outer_index: int
    agent_id: str
    blocking: bool
    end: float
    """When its owner may resume: marker time + duration_ms, else its last nested end."""
    requests: list[Req]
    line: int | None


def lower_play(namespace: str, play_id: str, top: list[Req], subagents: list[Subagent],
               block_size: int, source_name: str, hash_identity: Any, play_line: int | None
               ) -> list[AgenticNode]:
    """The nodes of one play (`hash_identity(domain, identity)` allocates hash ids)."""
    if not top:
        raise WekaLoweringError("has no parent requests", play_line)
    all_streams = streams(namespace, "root", top)
    parent_count = len(all_streams)
    root_stream = next(s for s in all_streams if s.session_id.endswith(":root"))
    joins: list[tuple[str, list[str]]] = []
    for sa in subagents:
        owner = max(((si, r) for si, s in enumerate(all_streams[:parent_count]) for r in s.requests
                     if r.order < sa.outer_index), key=lambda p: p[1].order, default=None)
        if owner is None:
            raise WekaLoweringError(f"has subagent {sa.agent_id} at outer index {sa.outer_index} without a "
                                    "preceding parent request", sa.line)
        if not sa.requests:
            continue
        prefix = f"subagent:{sa.outer_index}:{sa.agent_id}"
        child = streams(namespace, prefix, sa.requests)
        child_root = next(s for s in child if s.session_id.endswith(f":{prefix}"))
        child_root.fork_source = owner[1].source_id
        for s in child:
            s.scope = child_root.session_id
        target = None
        if sa.blocking:
            after = [r for r in all_streams[owner[0]].requests if r.order > sa.outer_index and r.t + EPS_S >= sa.end]
            target = min(after, key=lambda r: r.order).source_id if after else None
        all_streams.extend(child)
        if target is not None:
            terminals = [s.requests[-1].source_id for s in child if s.requests]
            if terminals:
                joins.append((target, terminals))
    return _nodes(namespace, play_id, all_streams, root_stream, joins, block_size, source_name, hash_identity)


def _nodes(namespace: str, play_id: str, all_streams: list[_Stream], root_stream: _Stream,
           joins: list[tuple[str, list[str]]], block_size: int, source_name: str, hash_identity: Any
           ) -> list[AgenticNode]:
    by_source = {r.source_id: r for s in all_streams for r in s.requests}
    root_time = min(r.t for r in by_source.values())
    row_id = {sid: f"{namespace}:request:{sid}" for sid in by_source}
    deps = _Deps()
    for s in all_streams:
        for prev, r in zip(s.requests, s.requests[1:], strict=False):
            deps.add(r.source_id, row_id[prev.source_id], "completion", ms(r.t - prev.end), "sequence")
    for s in all_streams:
        if not s.requests or s.fork_source is None:
            continue
        first, parent = s.requests[0], by_source[s.fork_source]
        if first.t < parent.end:
            deps.add(first.source_id, row_id[parent.source_id], "dispatch", ms(first.t - parent.t), "spawn")
        else:
            deps.add(first.source_id, row_id[parent.source_id], "completion", ms(first.t - parent.end), "spawn")
    _barriers(all_streams, row_id, deps)
    for target_id, terminals in joins:
        target = by_source[target_id]
        for terminal_id in terminals:
            terminal = by_source[terminal_id]
            gap = target.t - terminal.end  # negative when duration_ms understates the subagent: no wait
            deps.add(target_id, row_id[terminal_id], "completion", ms(gap), "join")
    root = root_stream.requests[0]
    for s in all_streams:
        if not s.requests:
            continue
        first = s.requests[0]
        if first.source_id == root.source_id or deps.edges.get(first.source_id):
            continue
        deps.add(first.source_id, row_id[root.source_id], "dispatch", ms(first.t - root.t), "spawn")
    nodes = []
    for s in all_streams:
        for r in s.requests:
            rid = row_id[r.source_id]
            nodes.append(AgenticNode(
                request_id=rid, play_id=play_id, session_id=s.session_id, model=r.model,
                input_length=r.input_length, output_length=r.output_length,
                hash_ids=_hashes(rid, r, block_size, source_name, hash_identity),
                not_before_ms=ms(r.t - root_time),
                recorded_api_time_ms=None if r.api_time is None else ms(r.api_time),
                dependencies=[Dependency(*e) for e in deps.edges.get(r.source_id, [])],
                line=r.line or 0))
    nodes.sort(key=lambda n: n.request_id)
    return nodes


def _barriers(all_streams: list[_Stream], row_id: dict[str, str], deps: _Deps) -> None:
    """Replay barriers: a request waits for the latest request of every other stream of its
    scope that had ended when it started (minus those another such request already covers)."""
    scopes: dict[str, list[_Stream]] = {}
    for s in all_streams:
        scopes.setdefault(s.scope, []).append(s)
    for group in scopes.values():
        for target_stream in group:
            for target in target_stream.requests:
                frontier = []
                for other in group:
                    if other is target_stream:
                        continue
                    done = [c for c in other.requests if c.t < target.t and c.end <= target.t + EPS_S]
                    if done:
                        frontier.append(max(done, key=lambda c: (c.end, c.t, c.source_id)))
                for c in frontier:
                    if any(c.t < later.t and c.end <= later.t + EPS_S for later in frontier):
                        continue
                    deps.add(target.source_id, row_id[c.source_id], "completion", 0.0, "replay_barrier")


def _hashes(request_id: str, r: Req, block_size: int, source_name: str, hash_identity: Any) -> array:
    """One hash id per full block (the source's, else a private one) and a private partial tail."""
    full, partial = divmod(r.input_length, block_size)
    out = array("Q")
    for b in range(full):
        identity = (f"source:{source_name}:{r.hash_ids[b]}" if b < len(r.hash_ids)
                    else f"private:missing:{request_id}:{b}")
        out.append(hash_identity("weka-full-block", identity))
    if partial:
        out.append(hash_identity("weka-partial-tail", f"{request_id}:{full}:{r.input_length}"))
    return out
