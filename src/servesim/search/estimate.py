"""An analytic estimate of a candidate's report, without a replay (what screening ranks by).

From facts servesim has for every candidate — the role's pass-time model (`prefill`, `decode`)
and its KV capacity — and the workload's means (`servesim.search.profile`), each scheduler
rank is treated as a continuous-batching server in steady state:

* a rank's ``B`` running requests advance one token per pass; a pass costs ``decode(B)`` plus
  the prompt work interleaved with it, so serving ``B`` requests to completion takes
  ``osl · decode(B) + B · prefill₁`` ms of the rank's time (``prefill₁``: one prompt's share of
  the largest prefill batch a pass holds);
* ``B`` is capped by ``max_sequences`` and by the KV pool over the mean context
  ``isl + osl/2``: the rank's capacity is ``μ = B_max / (osl · decode(B_max) + B_max · prefill₁)``
  requests per ms;
* below capacity, ``B`` is the fixed point of Little's law ``B = λ · osl · ITL`` with
  ``ITL = decode(B) / (1 − λ · prefill₁)``; TTFT is the prompt's own (chunked) prefill plus
  a decode step per chunk plus an M/M/1 wait for the prefill work queued ahead of it;
* at or above capacity requests queue: the k-th waits ``k · (1/μ − 1/λ)`` more than the first,
  which is how many of a finite run still meet a TTFT bound;
* a closed loop of N clients runs ``min(N, B_max)`` at a time and its TTFT is what is left of
  a client's cycle ``N / X`` after its decode;
* disaggregated: prefill ranks are prefill-only servers, decode ranks decode-only, the KV
  transfer adds ``bytes · isl / bandwidth`` to TTFT, and the slower pool sets the capacity.

Goodput counts the requests expected to meet the SLA (a soft threshold of 5 % around the
bounds, so ranks change smoothly). Queueing is approximated, prefix reuse taken from the
workload's shareable prefix, the front-end latency (`timing.frontend_ms`, the fused default)
added to TTFT, speculative decoding, routers and planners ignored: the estimate
orders candidates, the replay measures them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

from servesim.config import SimConfig
from servesim.config.schema import Role
from servesim.engine.pass_time import TimingModel
from servesim.search import facts
from servesim.search.profile import Arrivals, Profile

SOFTNESS = 0.05
"""Width of the SLA's soft threshold, as a fraction of the bound."""


@dataclass
class RoleModel:
    """What the estimate knows about one role's scheduler ranks."""

    timing: TimingModel
    ranks: int
    kv_tokens: int
    max_sequences: int
    chunk: int
    """Prompt tokens of one request a pass prefills at most."""
    prefill_tokens: int
    """Prompt tokens a pass prefills at most over all requests."""
    prefix_caching: bool

    def decode_ms(self, batch: float, ctx: int) -> float:
        """One decode step of `batch` (fractional: interpolated) sequences of context `ctx`."""
        lo = max(1, int(batch))
        low = self.timing.decode(lo, lo * ctx, ctx, self.kv_tokens)
        if batch <= lo:
            return low
        high = self.timing.decode(lo + 1, (lo + 1) * ctx, ctx, self.kv_tokens)
        return low + (high - low) * (batch - lo)

    def prefill_ms(self, isl: int, prefix: int) -> float:
        """One prompt alone, in chunks of `chunk` tokens."""
        total, pos = 0.0, prefix
        while pos < isl:
            end = min(isl, pos + self.chunk)
            total += self.timing.prefill(1, end, pos)
            pos = end
        return total

    def prefill_share_ms(self, isl: int, prefix: int) -> float:
        """One prompt's share of the largest prefill batch a pass holds."""
        new = max(1, isl - prefix)
        batch = min(self.max_sequences, self.prefill_tokens // new)
        if batch <= 1 or new > self.chunk:
            return self.prefill_ms(isl, prefix)
        return self.timing.prefill(batch, isl, prefix) / batch

    def max_batch(self, ctx: int) -> int:
        return max(1, min(self.max_sequences, self.kv_tokens // max(1, ctx)))


@dataclass
class Gaps:
    """The gaps between a running request's tokens: a decode pass, or (a fraction of them) a
    pass that also prefills someone's prompt."""

    decode_ms: float
    prefill_share: float = 0.0
    """Fraction of the gaps that carry prefill work."""
    prefill_ms: float = 0.0
    """The prefill work such a gap carries."""

    @classmethod
    def interleaved(cls, decode_ms: float, busy: float, pass_prefill_ms: float) -> Gaps:
        """Decode passes of `decode_ms` with prefill passes of `pass_prefill_ms` taking a fraction
        `busy` of the time."""
        if busy <= 0 or pass_prefill_ms <= 0:
            return cls(decode_ms)
        itl = decode_ms / max(1e-9, 1 - busy)
        return cls(decode_ms, min(1.0, busy * itl / pass_prefill_ms), pass_prefill_ms)

    @property
    def itl_ms(self) -> float:
        return self.decode_ms + self.prefill_share * self.prefill_ms

    @property
    def per_user(self) -> float:
        """Tokens per second of a request, averaged over its gaps (the report's mean of 1000 / gap)."""
        return 1000.0 * ((1 - self.prefill_share) / self.decode_ms
                         + self.prefill_share / (self.decode_ms + self.prefill_ms))


@dataclass
class Service:
    """How a candidate serves the workload, per request and overall."""

    ttft_ms: float
    """TTFT of a request that does not queue behind a backlog."""
    gaps: Gaps
    rate_per_ms: float
    """Requests completed per ms while the system is busy."""
    drain_ms: float
    """From the last arrival to the last completion (a request on an emptying system)."""
    wait_ms: float = 0.0
    """Mean queueing wait of a stable open loop (0 otherwise)."""
    busy: float = 0.0
    """Probability a request waits at all."""
    backlog_ms: float = 0.0
    """Extra TTFT per request of arrival order when arrivals outpace service (the mean wait is
    the larger of this drift's and `wait_ms`)."""

    @property
    def itl_ms(self) -> float:
        return self.gaps.itl_ms


def role_model(config: SimConfig, role: str, timing: TimingModel) -> RoleModel:
    engine = config.engine
    worker = engine.roles[cast(Role, role)]
    par, scheduler = worker.parallelism, worker.scheduler
    chunk = prefill_tokens = scheduler.max_batched_tokens
    if engine.backend == "sglang":
        knobs = scheduler.sglang
        chunk = knobs.chunked_prefill_size if knobs is not None else 8192
        prefill_tokens = knobs.max_prefill_tokens if knobs is not None else 16384
    return RoleModel(timing, par.replicas * par.attention_data, facts.kv_tokens_per_rank(config, role),
                     scheduler.max_sequences_for(cast(Role, role)), chunk, prefill_tokens,
                     worker.kv_cache.prefix_caching)


def estimate(config: SimConfig, models: Mapping[str, RoleModel], prof: Profile) -> dict[str, Any]:
    """Estimated report fields of one candidate (the keys `servesim.search.score` reads)."""
    arrivals = prof.arrivals(config)
    first = models.get("aggregated") or models["prefill"]
    request = _Request(max(1, round(prof.isl)), int(prof.prefix) if first.prefix_caching else 0, max(1, round(prof.osl)))
    if config.engine.mode == "aggregated":
        service = _aggregated(models["aggregated"], arrivals, prof.requests, request)
    else:
        service = _disaggregated(models["prefill"], models["decode"], arrivals, prof.requests, request,
                                 _transfer_ms(config, request.new))
    service.ttft_ms += _frontend_ms(config)
    return _report(config, service, arrivals, prof)


def _frontend_ms(config: SimConfig) -> float:
    """The front-end latency every request's TTFT includes (`timing.frontend_ms`, fused defaults)."""
    from servesim.build.apply import frontend_ms
    from servesim.build.resolve import resolve_fidelity

    return frontend_ms(next(iter(resolve_fidelity(config).engine.roles.values())))


@dataclass(frozen=True)
class _Request:
    """The mean request: prompt tokens, the cached part of them, output tokens."""

    isl: int
    prefix: int
    osl: int

    @property
    def ctx(self) -> int:
        """Mean context of a running request."""
        return self.isl + self.osl // 2

    @property
    def new(self) -> int:
        """Prompt tokens to compute."""
        return max(1, self.isl - self.prefix)


def _aggregated(m: RoleModel, arrivals: Arrivals, n: int, r: _Request) -> Service:
    """Ranks that prefill and decode in the same passes."""
    first, share, ctx = m.prefill_ms(r.isl, r.prefix), m.prefill_share_ms(r.isl, r.prefix), r.ctx
    chunks = math.ceil(r.new / m.chunk)
    drain = first + chunks * m.decode_ms(1, ctx) + (r.osl - 1) * m.decode_ms(1, ctx)
    top = m.max_batch(ctx)
    if arrivals.closed:  # the clients start together: waves of prefills, then their decodes
        clients = min(arrivals.concurrency, n) / m.ranks
        batch = min(clients, top)
        rate = batch / (batch * share + r.osl * m.decode_ms(batch, ctx))
        passes = max(1, math.ceil(batch * r.new / m.prefill_tokens))
        gaps = Gaps(m.decode_ms(batch, ctx), min(1.0, passes / (2 * r.osl)), batch * share / passes)
        ttft = first + (batch - 1) * share / 2 + chunks * m.decode_ms(batch, ctx) + (clients - batch) / rate
        return Service(ttft, gaps, rate * m.ranks, 0.0)
    capacity = top / (r.osl * m.decode_ms(top, ctx) + top * share)
    lam = min(arrivals.rate_per_ms / m.ranks, capacity)
    busy = lam * share
    batch = top if lam >= capacity else _little(lambda b: lam * r.osl * m.decode_ms(b, ctx) / (1 - busy), top)
    gaps = Gaps.interleaved(m.decode_ms(batch, ctx), busy, first / chunks)
    ttft = first + chunks * m.decode_ms(batch, ctx) + gaps.itl_ms * min(1.0, batch) / 2
    queue = _Queue(arrivals.scv / m.ranks, n / m.ranks)
    service = Service(ttft, gaps, lam * m.ranks, drain, backlog_ms=_backlog(capacity * m.ranks, arrivals.rate_per_ms))
    return _queued(service, queue.prefill(busy, first), queue.slots(top, batch, ttft + (r.osl - 1) * gaps.itl_ms))


def _disaggregated(pre: RoleModel, dec: RoleModel, arrivals: Arrivals, n: int, r: _Request,
                   transfer: float) -> Service:
    """Prefill-only ranks, then a KV transfer, then decode-only ranks."""
    first, ctx, top = pre.prefill_ms(r.isl, r.prefix), r.ctx, dec.max_batch(r.ctx)
    prefill_rate = pre.ranks / pre.prefill_share_ms(r.isl, r.prefix)
    drain = first + transfer + r.osl * dec.decode_ms(1, ctx)
    if arrivals.closed:
        clients = min(arrivals.concurrency, n)
        batch = min(clients / dec.ranks, top)
        rate = min(prefill_rate, dec.ranks * batch / (r.osl * dec.decode_ms(batch, ctx)))
        itl = dec.decode_ms(batch, ctx)
        ttft = max(first + transfer + itl, clients / rate - (r.osl - 1) * itl)
        return Service(ttft, Gaps(itl), rate, 0.0)
    capacity = min(prefill_rate, dec.ranks * top / (r.osl * dec.decode_ms(top, ctx)))
    lam = min(arrivals.rate_per_ms, capacity)
    batch = _little(lambda b: lam / dec.ranks * r.osl * dec.decode_ms(b, ctx), top)
    itl = dec.decode_ms(batch, ctx)
    service = Service(first + transfer + itl, Gaps(itl), lam, drain,
                      backlog_ms=_backlog(capacity, arrivals.rate_per_ms))
    return _queued(service, _Queue(arrivals.scv / pre.ranks, n / pre.ranks).prefill(lam / prefill_rate, first),
                   _Queue(arrivals.scv / dec.ranks, n / dec.ranks).slots(top, batch, r.osl * itl))


@dataclass(frozen=True)
class _Queue:
    """Waits of one rank's queue for a run of `requests` arriving with squared coefficient of
    variation `spread` (a Poisson stream dealt round-robin over k ranks: 1/k).

    Each wait is the steady-state one (Kingman's G/D/1 scaling) but at most what a finite run
    started empty builds up at full load — a reflected random walk: on average over the run
    ``(2/3) · sqrt(2 · requests · spread / π)`` requests ahead — so the estimate is continuous
    across the capacity, where a backlog takes over."""

    spread: float
    requests: float

    def _ahead(self) -> float:
        return 2 / 3 * math.sqrt(2 * self.requests * self.spread / math.pi)

    def prefill(self, busy: float, service_ms: float) -> tuple[float, float]:
        """(probability of waiting, mean wait) before a prompt's prefill of `service_ms`."""
        steady = self.spread / 2 * busy / (1 - busy) * service_ms if busy < 1 else math.inf
        return min(1.0, busy), min(steady, self._ahead() * service_ms)

    def slots(self, slots: int, load: float, hold_ms: float) -> tuple[float, float]:
        """(probability of waiting, mean wait) for one of `slots` running slots, each held
        `hold_ms`, under an offered load of `load` slots (Erlang C)."""
        if load <= 0:
            return 0.0, 0.0
        waits, steady = 1.0, math.inf
        if load < slots:
            blocking = 1.0
            for k in range(1, slots + 1):
                blocking = load * blocking / (k + load * blocking)
            waits = slots * blocking / (slots - load * (1 - blocking))
            steady = self.spread / 2 * waits * hold_ms / (slots - load)
        return waits, min(steady, self._ahead() * hold_ms / slots)


def _queued(s: Service, *waits: tuple[float, float]) -> Service:
    """`s` with independent waits (probability, mean) merged into one exponential-tailed wait."""
    stay = 1.0
    for p, _ in waits:
        stay *= 1 - min(1.0, p)
    s.busy = 1 - stay
    s.wait_ms = sum(mean for _, mean in waits)
    return s


def _transfer_ms(config: SimConfig, tokens: int) -> float:
    kv = config.engine.kv_transfer
    if kv is None or kv.bandwidth_gb_per_second is None or not isinstance(kv.bytes_per_token, (int, float)):
        return 0.0
    return tokens * kv.bytes_per_token / (kv.bandwidth_gb_per_second * 1e6)


def _little(batch_for: Any, top: int) -> float:
    """The fixed point B = batch_for(B) (running requests under an arrival rate), at most `top`."""
    batch = 1.0
    for _ in range(40):
        nxt = min(float(top), max(0.0, batch_for(max(1.0, batch))))
        if abs(nxt - batch) < 1e-3:
            return nxt
        batch = nxt
    return batch


def _backlog(rate: float, arrival: float) -> float:
    """Extra wait per request index when requests arrive at `arrival` and leave at `rate` (/ms)."""
    return max(0.0, 1.0 / rate - (1.0 / arrival if math.isfinite(arrival) and arrival > 0 else 0.0))


def _report(config: SimConfig, s: Service, arrivals: Arrivals, prof: Profile) -> dict[str, Any]:
    """Report fields from the service estimate."""
    n, osl = prof.requests, max(1, round(prof.osl))
    if arrivals.closed:
        duration = n / s.rate_per_ms
    elif s.backlog_ms > 0 or not math.isfinite(arrivals.rate_per_ms):
        duration = n / s.rate_per_ms + s.drain_ms
    else:
        duration = arrivals.span_ms + prof.turns_per_session * s.drain_ms + s.wait_ms
    mean_ttft = min(s.ttft_ms + max(s.wait_ms, s.backlog_ms * n / 2), duration)
    good = n * _meets(config, s, n, osl)
    seconds = duration / 1000.0
    gpus = sum(w.parallelism.replicas * w.parallelism.tensor * w.parallelism.pipeline * w.parallelism.attention_data
               for w in config.engine.roles.values())
    return {
        "output_throughput_tok_s": n * osl / seconds, "request_throughput_rps": n / seconds,
        "goodput_output_throughput_tok_s": good * osl / seconds, "goodput_request_throughput_rps": good / seconds,
        "mean_ttft_ms": mean_ttft, "mean_itl_ms": s.itl_ms, "mean_tpot_ms": s.itl_ms,
        "mean_e2e_latency_ms": mean_ttft + (osl - 1) * s.itl_ms,
        "mean_output_token_throughput_per_user": s.gaps.per_user,
        "completed_requests": n, "num_requests": n, "total_output_tokens": n * osl,
        "gpu_hours": gpus * seconds / 3600.0, "duration_ms": duration,
    }


def _meets(config: SimConfig, s: Service, n: int, osl: int) -> float:
    """Expected fraction of the requests that meet the SLA (1 without one)."""
    sla = config.evaluation.sla if config.evaluation is not None else None
    if sla is None:
        return 1.0
    e2e, ttft, itl = (sla.per_request(metric) for metric in ("e2e_ms", "ttft_ms", "itl_ms"))
    if e2e is not None:
        return _under(e2e, s.ttft_ms + (osl - 1) * s.itl_ms, s, n)
    fraction = _under(float(ttft or math.inf), s.ttft_ms, s, n)
    return fraction * (_soft(float(itl), s.itl_ms) if osl > 1 and itl is not None else 1.0)


def _under(bound: float, base: float, s: Service, n: int) -> float:
    """Fraction of requests whose latency (`base` plus their wait) stays under `bound`."""
    if s.backlog_ms * n / 2 > s.wait_ms:
        return min(1.0, max(0.0, (bound - base) / s.backlog_ms) / n) * _soft(bound, base)
    tail = s.busy * math.exp(-max(0.0, bound - base) / s.wait_ms * s.busy) if s.wait_ms > 0 else 0.0
    return _soft(bound, base) * (1.0 - tail)


def _soft(bound: float, value: float) -> float:
    """≈1 well under `bound`, ≈0 well over it, 0.5 at it."""
    x = (bound - value) / (SOFTNESS * bound)
    return 1.0 / (1.0 + math.exp(-max(-50.0, min(50.0, x))))
