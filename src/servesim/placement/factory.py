"""Building a pool's router from the lowered router settings (`servesim.build` fills them)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from servesim.placement.base import Router
from servesim.placement.round_robin import FlatRoundRobin, RoundRobin

PrefillTime = Callable[[int, int, int], float]
"""A pool's prefill time model: (batch, mean prompt end, mean cached prefix) → ms."""


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class RouterSpec:
    """Where requests go: the policy and its knobs (Dynamo's `router:` section)."""

    policy: str = "round_robin"
    """round_robin, kv_router, random or least_loaded."""
    seed: int = 0
    session_affinity: bool = False
    overlap_credit: float = 1.0
    prefill_scale: float = 1.0
    temperature: float = 0.0
    credit_decay: float = 0.0
    request_weight: float = 0.0
    host_weight: float = 0.75
    disk_weight: float = 0.25
    timed_prefill: bool = False
    """kv_router: age charged prefill load over the predicted prefill time ('ais')."""


def make_router(spec: RouterSpec, *, ranks: int, workers: int, block_size: int, prefill_time: PrefillTime,
                flat: bool = False, decode: bool = False) -> Router:
    """The routing policy of one pool of `workers` workers with `ranks` DP ranks each, every
    worker registered.

    In disaggregated serving (`flat`) round robin is one flat rotation over all ranks of the
    pool, and the KV router of the decode pool is overlap-blind (it only balances load), as in
    Dynamo.
    """
    router: Router
    if spec.policy in ("kv_router", "random", "least_loaded"):
        router = _stateful_router(spec, ranks=ranks, block_size=block_size, prefill_time=prefill_time,
                                  flat=flat, decode=decode)
    else:
        router = FlatRoundRobin(ranks) if flat else RoundRobin(ranks)
    for w in range(workers):
        router.worker_added(w)
    if spec.session_affinity:
        from servesim.placement.routers import SessionAffinity

        return SessionAffinity(router)
    return router


def _stateful_router(spec: RouterSpec, *, ranks: int, block_size: int, prefill_time: PrefillTime,
                     flat: bool, decode: bool) -> Router:
    """The KV, random or least-loaded router (`placement.routers`, imported here: a run with
    the default round robin starts without it)."""
    from servesim.placement.routers import KvRouter, KvRouterSettings, LeastLoaded, RandomRouter

    if spec.policy == "random":
        return RandomRouter(ranks, spec.seed)
    if spec.policy == "least_loaded":
        return LeastLoaded(ranks, spec.seed)

    def prefill_duration(isl: int, cached: int) -> float:
        return prefill_time(1, isl, cached) if isl > cached else 0.0

    timed = spec.timed_prefill and not decode
    settings = KvRouterSettings(
        block_size=block_size,
        overlap_credit=0.0 if decode else spec.overlap_credit,
        prefill_scale=spec.prefill_scale,
        temperature=spec.temperature,
        credit_decay=spec.credit_decay,
        request_weight=spec.request_weight,
        host_weight=0.0 if decode else spec.host_weight,
        disk_weight=0.0 if decode else spec.disk_weight,
        track_prefill=not decode,
        track_blocks=not flat or decode,
        assume_reuse=not decode,
        prefill_duration=prefill_duration if timed else None,
    )
    return KvRouter(ranks, settings, spec.seed)
