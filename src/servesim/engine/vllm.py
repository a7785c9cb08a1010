"""The vLLM scheduling core of one rank: running-first passes, chunked prefill, prefix caching,
LIFO recompute preemption and the rejection gates.

One call to `run_pass` plans and applies a whole forward pass: the running requests are
scheduled first (one token each when decoding, the rest of the prompt when mid-prefill), then
waiting requests are admitted in FCFS order while slots remain; the pass time is the prefill
time of the batch's prompt chunks plus the decode time of the requests that emit a token.

Steady decoders form a *cohort* that is advanced implicitly: a request that only decodes gains
one token per pass, so its progress is a function of the pass index and only its block-boundary
and finishing passes need work. The cohort always precedes the other ("explicit") running
requests in running order, so scheduling it first is exactly the running-first walk. When the
cohort cannot be advanced as a whole (token budget or KV blocks short), it is dissolved into
explicit requests for that pass. `lazy_decode=False` disables the cohort (the plain algorithm).
"""

from __future__ import annotations

from collections import deque

from servesim.engine.kv import Block, BlockPool
from servesim.engine.rank import DecodePass, ForwardPassMetrics, RankConfig, RankPass, population_variance
from servesim.engine.request import EngineRequest
from servesim.engine.timing import TimingModel
from servesim.errors import RunError
from servesim.runtime.rng import StdRng

OK, BLOCKED, SELF_PREEMPTED = 0, 1, 2
_ALLOC, _CACHE, _FINISH = 0, 1, 2


class VllmRank:
    """Scheduler, KV pool and timing of one rank running the vLLM policy."""

    def __init__(self, config: RankConfig, timing: TimingModel, *, lazy_decode: bool = True,
                 sampler_seed: int = 0) -> None:
        self.config = config
        self.timing = timing
        spec = config.speculative
        self._sampler = StdRng((spec.seed + sampler_seed) % (1 << 64)) if spec is not None else None
        self.lazy_decode = lazy_decode and spec is None and not config.preempt_first
        """Whether steady decoders join the cohort; off when a burst or a FIFO victim could
        touch a cohort member."""
        self.pool = BlockPool(config.num_blocks, config.prefix_caching)
        self.waiting: deque[EngineRequest] = deque()
        self.running: dict[EngineRequest, None] = {}
        """Every running request, in running (admission) order."""
        self.explicit: list[EngineRequest] = []
        """Running requests outside the cohort, in running order (all after the cohort)."""
        self.cohort: dict[EngineRequest, None] = {}
        self.total_kv_tokens = config.num_blocks * config.block_size
        self.generation = 0
        """Capacity generation: bumped by every completion, hold and preemption."""
        self.pending: deque[EngineRequest] = deque()
        """Decode role: requests waiting for a destination reservation, in arrival order."""
        self._holds = config.role == "prefill"
        self._charges_prefill = config.role != "decode"
        self._next_order = 0
        self._cohort_len = 0
        """Σ sequence length of the cohort at the start of the next pass."""
        self._cohort_len_sq = 0
        """Σ squared sequence length of the cohort at the start of the next pass."""
        self._events: dict[int, list[tuple[int, EngineRequest, int]]] = {}
        """Cohort work by pass index: (kind, request, epoch); stale epochs are skipped."""
        self._next_decode = (0, 0, 0.0)
        """(cohort size, Σ length, duration) of the last `next_decode_ms` answer."""
        # Per-pass scratch state.
        self._budget = 0
        self._pass: RankPass = RankPass()
        self._batch: dict[EngineRequest, tuple[int, int, int]] = {}
        self._prefill_shape = (0, 0, 0)
        """(batch, mean isl, mean prefix) of the pass's prefill phase, when it has one."""
        self._decode_shape = (0, 0)
        """(requests, Σ sequence length) of the pass's decode phase, when it has one."""

    # -- queue interface --------------------------------------------------------------------

    def enqueue(self, request: EngineRequest) -> None:
        """A request routed to this rank joins the tail of the waiting queue."""
        self.waiting.append(request)

    def has_work(self) -> bool:
        return bool(self.running or self.waiting)

    def num_requests(self) -> int:
        return len(self.running) + len(self.waiting)

    def can_run_ahead(self, pass_index: int) -> bool:
        """Whether pass `pass_index` would only advance the decode cohort (nothing else)."""
        return (bool(self.cohort) and not self.explicit and not self.waiting and not self.pending
                and self._cohort_fits(pass_index))

    def next_decode_ms(self) -> float:
        """Duration of the next pass if it only advances the cohort."""
        n = len(self.cohort)
        total = self._cohort_len
        ms = self.timing.decode(n, total, total // n, self.total_kv_tokens)
        self._next_decode = (n, total, ms)
        return ms

    def decode_pass(self, pass_index: int) -> DecodePass:
        """Pass `pass_index` when it only advances the cohort (`can_run_ahead`): the same state
        changes as `run_pass`, without its general machinery."""
        n = len(self.cohort)
        total = self._cohort_len
        known_n, known_total, duration = self._next_decode
        if known_n != n or known_total != total:
            duration = self.timing.decode(n, total, total // n, self.total_kv_tokens)
        metrics = None
        if self.config.record_metrics:
            self._batch = {}
            metrics = self._forward_pass_metrics()
        self._apply_cohort_events(pass_index)
        self._cohort_len_sq += 2 * total + n
        self._cohort_len = total + n
        done: list[EngineRequest] = []
        self._finish_cohort_members(pass_index, done)
        if done:
            self._complete(done)
        return DecodePass(duration, n, done, metrics)

    # -- the pass ---------------------------------------------------------------------------

    def run_pass(self, pass_index: int) -> RankPass:
        """Plan and apply one forward pass; tokens are credited to worker pass `pass_index`."""
        self._budget = self.config.max_batched_tokens
        self._pass = result = RankPass()
        self._batch = {}
        if self.cohort and not self._cohort_fits(pass_index):
            self._dissolve_cohort(pass_index)
        self._advance_cohort(pass_index)
        self._schedule_explicit()
        if not result.preemptions:
            self._admit_waiting()
        result.prefill_ms = self._prefill_time()
        if self.config.record_metrics:
            result.metrics = self._forward_pass_metrics()
        self._emit_tokens(pass_index)
        if result.prefill_ms and result.decode_ms and self.config.fused_mixed_pass:
            result.prefill_ms, result.decode_ms = 0.0, self._fused_time()
        return result

    # -- the cohort of steady decoders ------------------------------------------------------

    def _cohort_fits(self, pass_index: int) -> bool:
        """Whether every cohort member gets its token and block this pass."""
        if len(self.cohort) > self.config.max_batched_tokens:
            return False
        events = self._events.get(pass_index)
        if not events or len(events) <= self.pool.free:
            return True
        allocs = sum(1 for kind, r, epoch in events if kind == _ALLOC and r.epoch == epoch)
        return allocs <= self.pool.free

    def _advance_cohort(self, pass_index: int) -> None:
        """Schedule one token for every cohort member: budget, new blocks, completed blocks."""
        n = len(self.cohort)
        if not n:
            return
        self._budget -= n
        self._pass.scheduled_tokens += n
        self._apply_cohort_events(pass_index)

    def _apply_cohort_events(self, pass_index: int) -> None:
        """The cohort's block work in pass `pass_index`: new blocks, and blocks completed."""
        events = self._events.get(pass_index)
        if not events:
            return
        bs = self.config.block_size
        pool = self.pool
        allocs = [r for kind, r, epoch in events if kind == _ALLOC and r.epoch == epoch]
        if allocs:
            pool.allocate(len(allocs))
            for r in allocs:
                r.lease.append(None)
                if len(r.lease) <= r.shared_blocks and self.config.prefix_caching:
                    self._schedule_event(r, pass_index + bs - 1, _CACHE)
                else:
                    self._schedule_event(r, pass_index + bs, _ALLOC)
        for kind, r, epoch in events:
            if kind == _CACHE and r.epoch == epoch:
                steps = pass_index - r.anchor
                block = (r.computed + steps + 1) // bs - 1
                key = r.full_block_keys(block + 1, bs, r.generated + steps)[block]
                r.lease[block] = pool.store(key)
                self._schedule_event(r, pass_index + 1, _ALLOC)

    def _schedule_event(self, r: EngineRequest, at: int, kind: int) -> None:
        """Queue a block event unless the request finishes before that pass."""
        if kind != _FINISH and at >= r.anchor + self._steps_left(r):
            return
        events = self._events.get(at)
        if events is None:
            self._events[at] = [(kind, r, r.epoch)]
        else:
            events.append((kind, r, r.epoch))

    def _steps_left(self, r: EngineRequest) -> int:
        """Tokens the request will still emit from its anchor pass on (≥ 1)."""
        left = r.max_output - r.generated
        limit = self.config.max_model_len
        if limit is not None:
            room = limit - r.prompt_len - r.generated
            if room < left:
                return room
        return left

    def _join_cohort(self, r: EngineRequest, anchor: int) -> None:
        """Make a request that just emitted a token (and needs more) a steady decoder."""
        r.anchor = anchor
        r.epoch += 1
        self.cohort[r] = None
        length = r.prompt_len + r.generated
        self._cohort_len += length
        self._cohort_len_sq += length * length
        bs = self.config.block_size
        c = r.computed
        self._schedule_event(r, anchor + self._steps_left(r) - 1, _FINISH)
        alloc_at = anchor + (-c) % bs
        cache_at = anchor + (-(c + 1)) % bs
        if cache_at < alloc_at and c // bs < r.shared_blocks and self.config.prefix_caching:
            self._schedule_event(r, cache_at, _CACHE)
        else:
            self._schedule_event(r, alloc_at, _ALLOC)

    def _leave_cohort(self, r: EngineRequest, pass_index: int) -> None:
        """Bring a member's counters to the start of pass `pass_index` and drop it from the cohort."""
        steps = pass_index - r.anchor
        r.computed += steps
        r.generated += steps
        if steps:
            spans = r.token_spans
            if spans and spans[-1] == r.anchor:
                spans[-1] = pass_index
            else:
                spans.append(r.anchor)
                spans.append(pass_index)
        r.epoch += 1
        del self.cohort[r]
        length = r.prompt_len + r.generated
        self._cohort_len -= length
        self._cohort_len_sq -= length * length

    def _dissolve_cohort(self, pass_index: int) -> None:
        """Turn every cohort member back into an explicit request, keeping running order."""
        for r in list(self.cohort):
            self._leave_cohort(r, pass_index)
        self._events.clear()
        self._cohort_len = self._cohort_len_sq = 0
        self.explicit = list(self.running)

    def _finish_cohort_members(self, pass_index: int, done: list[EngineRequest]) -> None:
        """Members whose last token is this pass's, in running order."""
        events = self._events.pop(pass_index, None)
        if not events:
            return
        finishing = [r for kind, r, epoch in events if kind == _FINISH and r.epoch == epoch]
        if len(finishing) > 1:
            finishing.sort(key=_running_order)
        for r in finishing:
            self._leave_cohort(r, pass_index + 1)
            done.append(r)

    # -- explicit requests ------------------------------------------------------------------

    def _schedule_explicit(self) -> None:
        explicit = self.explicit
        i = 0
        while i < len(explicit) and self._budget > 0:
            request = explicit[i]
            hits = self._cache_hits(request) if request.computed == 0 else []
            status = self._schedule(request, hits)
            if status == BLOCKED:
                break
            if status == OK:
                i += 1

    def _admit_waiting(self) -> None:
        """Admit waiting requests in FCFS order while slots remain (head-of-line blocking).

        While destinations are pending on a decode rank, only prebuilt requests are admitted,
        each time the first one in waiting order.
        """
        waiting, running, result = self.waiting, self.running, self._pass
        max_sequences = self.config.max_sequences
        prebuilt_only = bool(self.pending)
        while waiting and len(running) < max_sequences:
            request = next((r for r in waiting if r.prebuilt), None) if prebuilt_only else waiting[0]
            if request is None:
                break
            if self._must_reject(request):
                waiting.remove(request)
                result.rejected.append(request)
                continue
            hits = [] if request.prebuilt else self._cache_hits(request)
            if not request.prebuilt and not self._fits(request, hits):
                break
            budget_before = self._budget
            if self._schedule(request, hits) != OK:
                break
            if waiting[0] is request:
                waiting.popleft()
            else:
                waiting.remove(request)
            request.prebuilt = False
            request.order = self._next_order
            self._next_order += 1
            running[request] = None
            self.explicit.append(request)
            request.admissions += 1
            result.admitted.append((request, len(hits) * self.config.block_size))
            if self._budget == 0 and budget_before == 0:
                break

    # -- gates ------------------------------------------------------------------------------

    def _must_reject(self, request: EngineRequest) -> bool:
        """Context-limit and (fresh requests only) pool-limit rejection.

        A preempted request whose prompt and generated tokens outgrew the whole pool can never
        be readmitted: the reference then stalls the worker until the run fails; servesim
        rejects it with a reason (unless `reject_unservable` is off). With speculative decoding
        the same holds as soon as its tokens plus the room for one burst outgrow the pool (the
        reference then preempts and readmits it for ever; without `reject_unservable` the run
        fails).
        """
        limit = self.config.max_model_len
        if limit is not None and request.prompt_len >= limit:
            return True
        if request.prebuilt:
            return False
        bs = self.config.block_size
        blocks = -(-request.length // bs)
        if not request.preempted:
            return blocks > self.config.num_blocks
        tokens = request.length
        if self._sampler is not None:
            tokens += min(self.config.speculative.nextn + 1, self._tokens_left(request))
        blocks = -(-tokens // bs)
        if blocks <= self.config.num_blocks:
            return False
        reason = (f"its {tokens} tokens{' (with room for a speculative burst)' if tokens > request.length else ''} "
                  f"need {blocks} KV blocks, more than the {self.config.num_blocks} a rank has")
        if self.config.reject_unservable:
            request.reject_reason = reason
            return True
        if tokens > request.length:
            raise RunError(f"a request can never complete: {reason}; the reference preempts and "
                           f"readmits it for ever")
        return False

    def _cache_hits(self, request: EngineRequest) -> list[Block]:
        """Resident leading blocks of the known sequence.

        While the request still has tokens to generate, its last token must be computed (to
        sample from), so a fully cached sequence recomputes its last block.
        """
        if not self.config.prefix_caching:
            return []
        bs = self.config.block_size
        limit = self._cache_limit(request)
        shared = min(limit, request.shared_blocks)
        hits = self.pool.prefix_hits(request.full_block_keys(shared, bs), shared) if shared > 0 else []
        if len(hits) == shared < limit:
            for block in request.own_blocks[: limit - shared]:
                if block.refs < 0:
                    break
                hits.append(block)
        if hits and self._sampler is not None and self.config.backend == "vllm":
            hits.pop()  # vLLM's EAGLE/MTP rule: speculative decoding recomputes one more block
        return hits

    def _cache_limit(self, request: EngineRequest) -> int:
        """How many leading full blocks a cache hit may cover."""
        bs = self.config.block_size
        if request.generated < request.max_output:
            return (request.length - 1) // bs
        return request.length // bs

    def _fits(self, request: EngineRequest, hits: list[Block]) -> bool:
        """Whether the whole known sequence fits next to the active blocks."""
        bs = self.config.block_size
        active_hits = sum(1 for b in hits if b.refs > 0)
        needed = -(-request.length // bs) - active_hits
        return needed <= self.config.num_blocks - self.pool.active

    # -- scheduling one request -------------------------------------------------------------

    def _schedule(self, request: EngineRequest, hits: list[Block]) -> int:
        """Compute up to the budget's worth of the request's pending tokens."""
        bs = self.config.block_size
        pool = self.pool
        cached = len(hits) * bs
        before = request.computed + cached
        remaining = request.length - before
        desired = remaining if remaining < self._budget else self._budget
        if desired == 0 and remaining > 0:
            return BLOCKED
        after = before + desired
        fresh_lease = not request.lease
        if hits and fresh_lease:
            for block in hits:
                pool.pin(block)
            request.lease = list(hits)
        need = -(-after // bs) - len(request.lease)
        while need > 0 and not pool.allocate(need):
            victim = self._victim()
            if victim is None:
                if fresh_lease:
                    pool.release(request.lease, len(request.lease), keep_private=True)
                    request.lease = []
                return BLOCKED
            self._preempt(victim)
            if victim is request:
                return SELF_PREEMPTED
        if fresh_lease and request.own_blocks:
            request.own_blocks = []
        if need > 0:
            request.lease.extend([None] * need)
        if self.config.prefix_caching and after // bs > before // bs:
            self._cache_completed(request, before // bs, after // bs)
        request.computed = after
        self._record_scheduled(request, before, desired)
        return OK

    def _cache_completed(self, request: EngineRequest, first: int, stop: int) -> None:
        """Make the shareable ones of blocks [first, stop), just completed, visible to the cache."""
        stop = min(stop, request.shared_blocks)
        if stop <= first:
            return
        keys = request.full_block_keys(stop, self.config.block_size)
        lease = request.lease
        store = self.pool.store
        for b in range(first, stop):
            if lease[b] is None:
                lease[b] = store(keys[b])

    def _record_scheduled(self, request: EngineRequest, before: int, tokens: int) -> None:
        prompt_len = request.prompt_len
        prompt_before = before if before < prompt_len else prompt_len
        after = before + tokens
        prompt_tokens = (after if after < prompt_len else prompt_len) - prompt_before
        self._budget -= tokens
        self._pass.scheduled_tokens += tokens
        isl = prompt_before + prompt_tokens if prompt_tokens > 0 else -1
        self._batch[request] = (tokens, isl, prompt_before)

    def _victim(self) -> EngineRequest | None:
        """The request to preempt when an allocation fails: the last running one (the first
        with FIFO preemption)."""
        if not self.running:
            return None
        victim = next(iter(self.running)) if self.config.preempt_first else next(reversed(self.running))
        if victim in self.cohort:
            raise AssertionError("a cohort member was chosen as a preemption victim")
        return victim

    def _preempt(self, victim: EngineRequest) -> None:
        """Release the victim's KV and send it to the front of the waiting queue."""
        del self.running[victim]
        self.explicit.remove(victim)
        bs = self.config.block_size
        victim.own_blocks = self.pool.release(victim.lease, victim.computed // bs, keep_private=True)
        victim.lease = []
        victim.computed = 0
        victim.preempted = True
        scheduled = self._batch.pop(victim, None)
        if scheduled is not None:
            self._budget += scheduled[0]
            self._pass.scheduled_tokens -= scheduled[0]
        self.waiting.appendleft(victim)
        self._pass.preemptions += 1
        self.generation += 1

    # -- timing and emission ----------------------------------------------------------------

    def _prefill_time(self) -> float:
        if not self._charges_prefill:
            return 0.0
        count = total_isl = total_prefix = 0
        for _tokens, isl, prefix in self._batch.values():
            if isl >= 0:
                count += 1
                total_isl += isl
                total_prefix += prefix
        if count == 0:
            return 0.0
        mean_isl, mean_prefix = total_isl // count, total_prefix // count
        if mean_isl == mean_prefix:
            return 0.0
        self._prefill_shape = (count, mean_isl, mean_prefix)
        return self.timing.prefill(count, mean_isl, mean_prefix)

    def _decoding_shape(self, ready: list[EngineRequest]) -> tuple[int, int]:
        """(requests, Σ sequence length) that decode in this pass; a request whose prompt ends in
        it samples its first token from the prefill forward and is not among them."""
        batch = self._batch
        decoding = [r for r in ready if r not in batch or batch[r][1] < 0]
        return len(self.cohort) + len(decoding), self._cohort_len + sum(r.prompt_len + r.generated for r in decoding)

    def _fused_time(self) -> float:
        """This pass as one forward pass over its prompt chunks and decode tokens."""
        count, mean_isl, mean_prefix = self._prefill_shape
        n, total = self._decode_shape
        if n == 0:
            return self._pass.prefill_ms
        return self.timing.mixed(count, mean_isl, mean_prefix, n, total, total // n,  # type: ignore[attr-defined]
                                 self.total_kv_tokens)

    def _forward_pass_metrics(self) -> ForwardPassMetrics:
        """This pass's scheduled work and the queues, as forward-pass metrics."""
        m = ForwardPassMetrics()
        n_dec = len(self.cohort)
        dec_sum, dec_sq = self._cohort_len, self._cohort_len_sq
        pre_sq = 0
        for request, (tokens, isl, prefix) in self._batch.items():
            if isl >= 0:
                m.num_prefill_requests += 1
                m.sum_prefill_tokens += tokens
                m.sum_prefill_kv_tokens += prefix
                pre_sq += request.prompt_len * request.prompt_len
            elif request.generated < request.max_output:
                length = request.length
                n_dec += 1
                dec_sum += length
                dec_sq += length * length
        pre_sum = sum(r.prompt_len for r, (_, isl, _) in self._batch.items() if isl >= 0)
        m.var_prefill_length = population_variance(m.num_prefill_requests, pre_sum, pre_sq)
        m.num_decode_requests, m.sum_decode_kv_tokens = n_dec, dec_sum
        m.var_decode_kv_tokens = population_variance(n_dec, dec_sum, dec_sq)
        fresh = [r.prompt_len for r in self.waiting if not r.preempted]
        resumed = [r.length for r in self.waiting if r.preempted]
        m.num_queued_prefill, m.sum_queued_prefill_tokens = len(fresh), sum(fresh)
        m.var_queued_prefill_length = population_variance(len(fresh), sum(fresh), sum(x * x for x in fresh))
        m.num_queued_decode, m.sum_queued_decode_kv_tokens = len(resumed), sum(resumed)
        m.var_queued_decode_kv_tokens = population_variance(len(resumed), sum(resumed), sum(x * x for x in resumed))
        return m

    def _emit_tokens(self, pass_index: int) -> None:
        """Complete output-0 requests, then give every decode-ready request one token."""
        result = self._pass
        ready: list[EngineRequest] = []
        done: list[EngineRequest] = []
        for request in self.explicit:
            if request.computed >= request.length:
                if request.generated >= request.max_output:
                    done.append(request)
                else:
                    ready.append(request)
        if self._holds:
            self._hold(done + ready)
            return
        if self._sampler is not None:
            ready = self._reserve_draft_blocks(ready)
        n_cohort = len(self.cohort)
        n = n_cohort + len(ready)
        if n:
            total = self._cohort_len + sum(r.prompt_len + r.generated for r in ready)
            result.decode_ms = self.timing.decode(n, total, total // n, self.total_kv_tokens)
            if self.config.fused_mixed_pass:
                self._decode_shape = self._decoding_shape(ready)
        result.emitted = n
        self._cohort_len_sq += 2 * self._cohort_len + n_cohort
        self._cohort_len += n_cohort
        self._finish_cohort_members(pass_index, done)
        limit = self.config.max_model_len
        joining = self.lazy_decode
        for request in ready:
            first = request.generated == 0
            if self._sampler is not None:
                self._emit_burst(request, pass_index)
            else:
                request.generated += 1
                request.add_token_pass(pass_index)
            if first:
                result.first_tokens.append(request)
            if request.generated >= request.max_output or (limit is not None and request.length >= limit):
                done.append(request)
            elif joining and self.explicit[0] is request:
                self.explicit.pop(0)
                self._join_cohort(request, pass_index + 1)
                continue
            joining = False
        result.finished.extend(done)
        if done:
            self._complete(done)

    def _complete(self, done: list[EngineRequest]) -> None:
        """Requests finished in this pass leave the rank and release their blocks."""
        self.generation += len(done)
        bs = self.config.block_size
        for request in done:
            del self.running[request]
            self.pool.release(request.lease, request.computed // bs)
            request.lease = []
        if self.explicit:
            finished = set(done)
            self.explicit = [r for r in self.explicit if r not in finished]

    def abort(self, request: EngineRequest, pass_index: int) -> None:
        """Drop a request its client gave up on, between passes (`pass_index` is the next one):
        a running request releases its KV (full blocks stay cached), a waiting one leaves."""
        if request not in self.running:
            if request in self.waiting:
                self.waiting.remove(request)
                request.own_blocks = []
            return
        if request in self.cohort:
            self._leave_cohort(request, pass_index)
        del self.running[request]
        if request in self.explicit:
            self.explicit.remove(request)
        self.pool.release(request.lease, request.computed // self.config.block_size)
        request.lease = []
        self.generation += 1

    # -- speculative decoding ----------------------------------------------------------------

    def _reserve_draft_blocks(self, ready: list[EngineRequest]) -> list[EngineRequest]:
        """Give every ready request room for a full burst (preempting LIFO when short).

        The room is temporary: after the burst a request keeps only the blocks of its computed
        tokens (`_emit_burst`).
        """
        burst_max = self.config.speculative.nextn + 1
        bs = self.config.block_size
        kept = []
        for request in ready:
            if request not in self.running:
                continue  # preempted to make room for an earlier request
            burst = min(burst_max, self._tokens_left(request))
            need = -(-(request.length + burst) // bs) - len(request.lease)
            while need > 0 and not self.pool.allocate(need):
                victim = self._victim()
                self._preempt(victim)
                if victim is request:
                    break
            if request in self.running:
                request.lease.extend([None] * max(0, need))
                kept.append(request)
        return [r for r in kept if r in self.running]

    def _tokens_left(self, request: EngineRequest) -> int:
        """Output tokens the request may still produce (its budget and the context limit)."""
        left = request.max_output - request.generated
        limit = self.config.max_model_len
        return left if limit is None else min(left, limit - request.length)

    def _emit_burst(self, request: EngineRequest, pass_index: int) -> None:
        """One verified draft burst: 1 + the leading accepted drafts, within the output left."""
        spec = self.config.speculative
        sampler = self._sampler
        left = self._tokens_left(request)
        burst = 1
        for rate in spec.acceptance_rates:
            if not sampler.bernoulli(rate):
                break
            burst += 1
        burst = min(burst, left)
        before = request.computed
        request.generated += burst
        request.computed += burst - 1  # the drafts are verified; the last token stays dangling
        for _ in range(burst):
            request.add_token_pass(pass_index)
        bs = self.config.block_size
        if self.config.prefix_caching and request.computed // bs > before // bs:
            self._cache_completed(request, before // bs, request.computed // bs)
        keep = -(-request.computed // bs)
        if len(request.lease) > keep:
            self.pool.release(request.lease[keep:], 0)
            del request.lease[keep:]

    # -- disaggregated serving ---------------------------------------------------------------

    def _hold(self, prompts_done: list[EngineRequest]) -> None:
        """Prefill role: requests whose prompt is complete leave running, keeping their KV."""
        if not prompts_done:
            return
        self._pass.held.extend(prompts_done)
        self.generation += len(prompts_done)
        for request in prompts_done:
            del self.running[request]
        done = set(prompts_done)
        self.explicit = [r for r in self.explicit if r not in done]

    def release_held(self, request: EngineRequest) -> None:
        """Prefill role: free a held request's KV once it has been transferred (or dropped)."""
        self.pool.release(request.lease, request.computed // self.config.block_size)
        request.lease = []

    def try_reserve(self) -> tuple[EngineRequest, int] | None:
        """Decode role: one attempt to reserve KV for the front pending destination.

        Returns the reserved request and how many of its prompt tokens must be transferred (its
        blocks not already resident here, in whole blocks), or None.
        """
        if not self.pending:
            return None
        request = self.pending[0]
        if request.reserve_attempt == self.generation:
            return None
        if len(self.running) >= self.config.max_sequences:
            request.reserve_attempt = self.generation
            return None
        bs = self.config.block_size
        full = min(request.prompt_len // bs, request.shared_blocks)
        hits = self.pool.prefix_hits(request.full_block_keys(full, bs), full) if full > 0 else []
        fresh = -(-request.prompt_len // bs) - len(hits)
        if fresh > self.pool.free - sum(1 for b in hits if b.refs == 0):
            request.reserve_attempt = self.generation
            return None
        for block in hits:
            self.pool.pin(block)
        self.pool.allocate(fresh)
        request.lease = hits + [None] * fresh
        self.pending.popleft()
        return request, fresh * bs

    def activate(self, request: EngineRequest) -> None:
        """Decode role: the transferred prompt becomes cache-visible and the request waits."""
        bs = self.config.block_size
        if self.config.prefix_caching:
            self._cache_completed(request, 0, request.prompt_len // bs)
        request.computed = request.prompt_len
        request.prebuilt = True
        self.waiting.append(request)


def _running_order(request: EngineRequest) -> int:
    return request.order
