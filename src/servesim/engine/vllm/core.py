"""The vLLM scheduling core of one rank: running-first passes, chunked prefill, prefix caching,
recompute preemption and the rejection gates (vLLM's or TensorRT-LLM's, `engine.vllm.policy`).

One call to `run_pass` plans and applies a whole forward pass: the running requests are
scheduled first (one token each when decoding, the rest of the prompt when mid-prefill), then
waiting requests are admitted in FCFS order while slots remain; the pass time is the prefill
time of the batch's prompt chunks plus the decode time of the requests that emit a token (or,
with a `MixedPassTiming` model, one fused forward pass: `PassPlan.fused_ms`).

Steady decoders form a *cohort* (`engine.vllm.cohort`) that is advanced implicitly. The cohort
always precedes the other ("explicit") running requests in running order, so scheduling it
first is exactly the running-first walk. When the cohort cannot be advanced as a whole (token
budget or KV blocks short), it is dissolved into explicit requests for that pass.
`lazy_decode=False` disables the cohort (the plain algorithm).
"""

from __future__ import annotations

from collections import deque
from enum import IntEnum

from servesim.engine.vllm.cohort import DecodeCohort, cohort_refusal
from servesim.engine.handoff import RankHandoff
from servesim.engine.cache.kv import Block, BlockPool
from servesim.engine.vllm.livelock import LivelockGuard
from servesim.engine.metrics import vllm_metrics
from servesim.engine.pass_time import MixedPassTiming, TimingModel
from servesim.engine.vllm.plan import PassPlan
from servesim.engine.vllm.policy import VllmPolicy
from servesim.engine.rank import RankConfig, RankPass
from servesim.engine.request import EngineRequest
from servesim.engine.speculative import DraftSampler
from servesim.engine.vllm.ahead import VllmRunAhead
from servesim.engine.vllm.handoff import VllmHandoff
from servesim.engine.vllm.offload import VllmHostOffload
from servesim.engine.cache.host import HostTier


class Scheduled(IntEnum):
    """How scheduling one request in a pass went."""

    OK = 0
    BLOCKED = 1
    """It (and everything after it) waits for a later pass."""
    SELF_PREEMPTED = 2
    """Making room for it preempted the request itself."""


class VllmRank(VllmHandoff, VllmRunAhead, VllmHostOffload):
    """Scheduler, KV pool and timing of one rank running the vLLM core."""

    def __init__(self, config: RankConfig, timing: TimingModel, *, policy: VllmPolicy | None = None,
                 lazy_decode: bool = True, sampler_seed: int = 0) -> None:
        self.config = config
        self.timing = timing
        self.mixed = timing if isinstance(timing, MixedPassTiming) else None
        """The timing of fused mixed passes, when the model has one (`timing.mixed_pass: fused`)."""
        self.policy = policy if policy is not None else VllmPolicy(config)
        spec = config.speculative
        self.drafts = DraftSampler(spec, sampler_seed) if spec is not None else None
        self.lazy_decode = lazy_decode and cohort_refusal(config) is None
        """Whether steady decoders join the cohort (`engine.vllm.cohort.cohort_refusal`: off when a
        burst or a FIFO victim could touch a cohort member)."""
        self.pool = BlockPool(config.num_blocks, config.prefix_caching)
        self.host = HostTier(config.host) if config.host is not None else None
        if self.host is not None and config.host is not None and config.host.gpu_gone_first:
            self.host.follow_gpu(lambda key: self.pool.lookup(key) is not None)
            self.pool.tier_hook = self.host.gpu_event
        self._pass_stores: list[EngineRequest] = []
        """With a host tier: the requests whose blocks this pass copies to host memory."""
        self._pass_store_blocks = 0
        """The host-memory KV tier (`engine.vllm.offload`), if any."""
        self.now = 0.0
        """With a host tier: when the pass being planned starts (set by the worker)."""
        self.waiting: deque[EngineRequest] = deque()
        self.running: dict[EngineRequest, None] = {}
        """Every running request, in running (admission) order."""
        self.explicit: list[EngineRequest] = []
        """Running requests outside the cohort, in running order (all after the cohort)."""
        self.cohort = DecodeCohort(self.pool, config)
        self.total_kv_tokens = config.num_blocks * config.block_size
        self.handoff = RankHandoff(config.role)
        self._next_order = 0
        watch = config.preempt_first and config.role == "aggregated" and config.stop_livelocks
        self.livelock = LivelockGuard() if watch else None
        """FIFO preemption can make two requests evict each other for ever (see `engine.vllm.livelock`)."""

    # -- queue interface --------------------------------------------------------------------

    def enqueue(self, request: EngineRequest) -> None:
        """A request routed to this rank joins the tail of the waiting queue."""
        self.policy.on_enqueue(request)
        self.waiting.append(request)
        if self.livelock is not None:
            self.livelock.forget()

    def has_work(self) -> bool:
        return bool(self.running or self.waiting)

    def num_requests(self) -> int:
        return len(self.running) + len(self.waiting)

    def num_running(self) -> int:
        return len(self.running)

    def num_waiting(self) -> int:
        return len(self.waiting)

    # -- the pass ---------------------------------------------------------------------------

    def run_pass(self, pass_index: int) -> RankPass:
        """Plan and apply one forward pass; tokens are credited to worker pass `pass_index`."""
        plan = PassPlan(self.config.max_batched_tokens)
        cohort = self.cohort
        members = cohort.members
        if members and not cohort.fits(pass_index, self.config.max_batched_tokens):
            cohort.dissolve(pass_index)
            self.explicit = list(self.running)
        if members:
            plan.schedule_cohort(len(members))
            cohort.apply_block_events(pass_index)
        if self.explicit:
            self._schedule_explicit(plan)
        result = plan.result
        if not result.preemptions:
            self._admit_waiting(plan)
        result.prefill_ms = self._prefill_time(plan)
        if self.config.record_metrics:
            result.metrics = vllm_metrics((len(cohort), cohort.length_sum, cohort.length_sq_sum),
                                          plan.batch, self.waiting)
        self._emit_tokens(plan, pass_index)
        if self.livelock is not None:
            self.livelock.after_pass(self, result)
        return result

    def _schedule_explicit(self, plan: PassPlan) -> None:
        """The running requests outside the cohort, in running order, while budget remains."""
        explicit = self.explicit
        i = 0
        while i < len(explicit) and plan.budget > 0:
            request = explicit[i]
            hits = self._cache_hits(request) if request.computed == 0 else []
            status = self._schedule(plan, request, hits)
            if status == Scheduled.BLOCKED:
                break
            if status == Scheduled.OK:
                i += 1

    def _admit_waiting(self, plan: PassPlan) -> None:
        """Admit waiting requests in FCFS order while slots remain (head-of-line blocking).

        While destinations are pending on a decode rank, only prebuilt requests are admitted,
        each time the first one in waiting order.
        """
        if self.host is not None:
            return self._admit_waiting_host(plan)
        waiting, running, result, policy = self.waiting, self.running, plan.result, self.policy
        max_sequences = self.config.max_sequences
        prebuilt_only = bool(self.handoff.pending)
        while waiting and len(running) < max_sequences:
            request = next((r for r in waiting if r.prebuilt), None) if prebuilt_only else waiting[0]
            if request is None:
                break
            if policy.must_reject(request):
                waiting.remove(request)
                result.rejected.append(request)
                continue
            hits = [] if request.prebuilt else self._cache_hits(request)
            if not request.prebuilt and not policy.fits(request, hits, self.pool, running):
                break
            budget_before = plan.budget
            if self._schedule(plan, request, hits) != Scheduled.OK:
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
            if plan.budget == 0 and budget_before == 0:
                break

    def _cache_hits(self, request: EngineRequest) -> list[Block]:
        """Resident leading blocks of the known sequence (shareable ones by key, then the
        request's own blocks kept from before a preemption), within the policy's limit."""
        if not self.config.prefix_caching or (request.shared_blocks <= 0 and not request.own_blocks):
            return []  # nothing it holds could be cached
        bs = self.config.block_size
        limit = self.policy.cache_limit(request)
        shared = min(limit, request.shared_blocks)
        hits = self.pool.prefix_hits(request.full_block_keys(shared, bs), shared) if shared > 0 else []
        if len(hits) == shared < limit:
            for block in request.own_blocks[: limit - shared]:
                if block.refs < 0:  # evicted
                    break
                hits.append(block)
        if hits and self.drafts is not None and self.policy.drafts_recompute_a_block:
            hits.pop()
        return hits

    # -- scheduling one request -------------------------------------------------------------

    def _schedule(self, plan: PassPlan, request: EngineRequest, hits: list[Block], loaded: int = 0) -> Scheduled:
        """Compute up to the budget's worth of the request's pending tokens (after `loaded`
        blocks loaded from host memory beyond the `hits`, which count as cached)."""
        bs = self.config.block_size
        pool = self.pool
        cached = (len(hits) + loaded) * bs
        before = request.computed + cached
        remaining = request.length - before
        desired = remaining if remaining < plan.budget else plan.budget
        if desired == 0 and remaining > 0:
            return Scheduled.BLOCKED
        after = before + desired
        fresh_lease = not request.lease
        if hits and fresh_lease:
            pool.pin_all(hits)
            request.lease = list(hits)
        need = -(-after // bs) - len(request.lease)
        if self.config.state_blocks:
            need += self._state_need(request, before)
        while need > 0 and not pool.allocate(need):
            victim = self._victim()
            if victim is None:
                if fresh_lease:
                    pool.release(request.lease, len(request.lease), keep_private=True)
                    request.lease = []
                return Scheduled.BLOCKED
            self._preempt(plan, victim)
            if victim is request:
                return Scheduled.SELF_PREEMPTED
        if fresh_lease and request.own_blocks:
            request.own_blocks = []
        if need > 0:
            request.lease.extend([None] * need)
        if self.config.prefix_caching and after // bs > before // bs - loaded:
            self._cache_completed(request, before // bs - loaded, after // bs)
        request.computed = after
        plan.schedule(request, before, desired)
        return Scheduled.OK

    def _state_need(self, request: EngineRequest, before: int) -> int:
        """Blocks of hybrid-model state the request holds in a pass starting at `before`
        computed tokens (upstream 0.13's state cache): its running state, plus — from the pass
        after its first pass that ended on a block boundary — the state's copy kept there."""
        states = self.config.state_blocks
        bs = self.config.block_size
        if before and (before % bs == 0 or len(request.lease) > -(-before // bs) + states):
            return 2 * states
        return states

    def _cache_completed(self, request: EngineRequest, first: int, stop: int) -> None:
        """Make the shareable ones of blocks [first, stop), just completed, visible to the cache."""
        if self.host is not None:
            self._store_to_host(request, first, stop)
        stop = min(stop, request.shared_blocks)
        if stop <= first:
            return
        self.pool.store_completed(request.full_block_keys(stop, self.config.block_size), request.lease, first, stop)

    def _victim(self) -> EngineRequest | None:
        """The policy's preemption victim (never a cohort member)."""
        victim = self.policy.victim(self.running)
        if victim is not None and victim in self.cohort:
            raise AssertionError("a cohort member was chosen as a preemption victim")
        return victim

    def _preempt(self, plan: PassPlan, victim: EngineRequest) -> None:
        """Release the victim's KV and send it to the front of the waiting queue."""
        del self.running[victim]
        self.explicit.remove(victim)
        bs = self.config.block_size
        victim.own_blocks = self.pool.release(victim.lease, victim.computed // bs, keep_private=True,
                                              due=victim.store_due)
        victim.lease = []
        victim.computed = 0
        victim.preempted = True
        plan.unschedule(victim)
        self.waiting.appendleft(victim)
        self.handoff.capacity_changed()

    # -- timing and emission ----------------------------------------------------------------

    def _prefill_time(self, plan: PassPlan) -> float:
        """The prefill phase of the pass's prompt chunks (0 without prompt work to charge)."""
        if plan.chunks == 0 or not self.handoff.charges_prefill:
            return 0.0
        count, mean_isl, mean_prefix = plan.prefill_batch()
        if mean_isl == mean_prefix:
            return 0.0
        return self.timing.prefill(count, mean_isl, mean_prefix)

    def _emit_tokens(self, plan: PassPlan, pass_index: int) -> None:
        """Complete output-0 requests, then give every decode-ready request one token (or a
        speculative burst)."""
        result = plan.result
        ready: list[EngineRequest] = []
        done: list[EngineRequest] = []
        ready_length = 0
        for request in self.explicit:
            length = request.prompt_len + request.generated
            if request.computed >= length:
                if request.generated >= request.max_output:
                    done.append(request)
                else:
                    ready.append(request)
                    ready_length += length
        if self.handoff.holds:
            self._hold(done + ready, result)
            return
        if self.drafts is not None:
            ready = self._reserve_draft_blocks(plan, ready)
            ready_length = sum(r.prompt_len + r.generated for r in ready)
            done = [r for r in done if r in self.running]  # a preempted one runs again later
        cohort = self.cohort
        members = len(cohort.members)
        n = members + len(ready)
        timed = ready
        if self.config.prefill_emits_first_token and ready:
            timed = [r for r in ready if r.generated]  # a first token comes with the prefill
            ready_length = sum(r.prompt_len + r.generated for r in timed)
        decoders = members + len(timed)
        if decoders and self.mixed is not None and result.prefill_ms:
            result.prefill_ms, result.decode_ms = 0.0, plan.fused_ms(self.mixed, timed, (
                members, cohort.length_sum), self.total_kv_tokens)
        elif decoders:
            total = cohort.length_sum + ready_length
            result.decode_ms = self.timing.decode(decoders, total, total // decoders, self.total_kv_tokens)
        result.emitted = n
        if self.host is not None:
            self._submit_stores(result)
        cohort.advance()
        done += cohort.finish(pass_index)
        limit = self.config.max_model_len
        joining = self.lazy_decode
        for request in ready:
            first = request.generated == 0
            if self.drafts is not None:
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
                cohort.join(request, pass_index + 1)
                continue
            joining = False
        result.finished.extend(done)
        if done:
            self._complete(done)

    def _complete(self, done: list[EngineRequest]) -> None:
        """Requests finished in this pass leave the rank and release their blocks."""
        self.handoff.capacity_changed(len(done))
        bs = self.config.block_size
        running, release = self.running, self.pool.release
        for request in done:
            del running[request]
            release(request.lease, request.computed // bs, private_from=request.shared_blocks, due=request.store_due)
            request.lease = []
        if self.explicit:
            finished = set(done)
            self.explicit = [r for r in self.explicit if r not in finished]

    def abort(self, request: EngineRequest, pass_index: int) -> None:
        """Drop a request its client gave up on, between passes (`pass_index` is the next one):
        a running request releases its KV like a finished one, a waiting one leaves."""
        if self.livelock is not None:
            self.livelock.forget()
        if request in self.running:
            if request in self.cohort:
                self.cohort.leave(request, pass_index)
            self._complete([request])
        elif request in self.waiting:
            self.waiting.remove(request)
            request.own_blocks = []
            if self.host is not None:
                self._drop_load(request)

    # -- speculative decoding ----------------------------------------------------------------

    def _reserve_draft_blocks(self, plan: PassPlan, ready: list[EngineRequest]) -> list[EngineRequest]:
        """Give every ready request room for a full burst (preempting when short).

        The room is temporary: after the burst a request keeps only the blocks of its computed
        tokens (`_emit_burst`).
        """
        assert self.drafts is not None
        burst_max = self.drafts.max_burst
        bs = self.config.block_size
        limit = self.config.max_model_len
        kept = []
        for request in ready:
            if request not in self.running:
                continue  # preempted to make room for an earlier request
            burst = min(burst_max, request.tokens_left(limit))
            need = -(-(request.length + burst) // bs) - len(request.lease)
            while need > 0 and not self.pool.allocate(need):
                victim = self._victim()
                assert victim is not None, "vLLM always has a running request to preempt here"
                self._preempt(plan, victim)
                if victim is request:
                    break
            if request in self.running:
                request.lease.extend([None] * max(0, need))
                kept.append(request)
        return [r for r in kept if r in self.running]

    def _emit_burst(self, request: EngineRequest, pass_index: int) -> None:
        """One verified draft burst: 1 + the leading accepted drafts, within the output left."""
        assert self.drafts is not None
        burst = self.drafts.burst(request.tokens_left(self.config.max_model_len))
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
