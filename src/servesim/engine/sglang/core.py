"""The SGLang scheduling core of one rank (the reference wheel's behaviour).

One call to `run_pass` is one scheduler iteration:

1. with `lpm` (and prefix caching on, at most 128 waiting) the waiting queue is stably and
   permanently re-sorted: longest radix match of each request's full pages first, except that a
   request with at most 32 tokens cached whose first 32 tokens (rounded up to pages) repeat an
   earlier such request's goes last; `fifo` leaves the queue alone;
2. prefill admission takes waiting heads while running slots remain (strict head of line). The
   next chunk is the whole uncomputed rest when that is at most `chunked_prefill_size`, else the
   page-floored remaining chunk budget (never a partial fit of a short prompt). The chunk, cached
   tokens included and rounded up to pages, plus min(remaining output, clip_max_new_tokens) when
   it completes the prompt, must be below ``free + evictable − Σ running min(remaining output,
   clip) × new_token_ratio``, and within the remaining `max_prefill_tokens` and chunk budgets.
   A request's first chunk matches the radix tree on the chunk's own tokens and reuses every
   matched page (no "last token" cap); continuation chunks never match again. Every chunk is an
   admission whose reused tokens are the tokens it did not compute. `max_batched_tokens` plays
   no role. A failed allocation resets the ratio;
3. the prefill time of the batch (`bs` chunks, floor means of chunk ends and prefixes; zero when
   they are equal, e.g. a fully cached prompt);
4. chunked requests cache their page-aligned prefix and return to the front of the queue,
   completed prompts join the running list (output-0 requests finish at once, without a token);
5. the decode step: every running request (including the ones whose prefill just completed)
   needs room for one more token; while the pool (free + evictable) is short and more than one
   request runs, the one with the fewest generated tokens (first in running order) is retracted
   — its private pages freed, its cached prefix unlocked, its tokens kept — to the front of the
   queue, and the ratio resets; the others each emit a token, finished ones move their sequence
   into the tree, the others cache their full pages;
6. the ratio (0.7 × schedule_conservativeness at first and after every reset) decays by
   (init − 0.14·init) / 600 down to 0.14·init.

**Unservable requests** (with `RankConfig.reject_unservable`, servesim's default). Where the
reference stalls for ever, servesim rejects the request with `EngineRequest.reject_reason` and
the run goes on. The rules only act where the reference would make no progress any more, so any
run the reference completes is reproduced unchanged:

* *at admission*: at the start of a pass in which **no request is running** on the rank, the
  waiting head is rejected when even an otherwise idle rank with full per-pass budgets could not
  admit its next chunk: that chunk (in whole pages) plus its output reserve is not below the
  pool minus the pages the request already holds, or the chunk is empty (chunked_prefill_size <
  page size), or it exceeds max_prefill_tokens or chunked_prefill_size. The check repeats for
  the new head. While requests run, a blocked head just waits, as in the reference;
* *in decode*: when retraction has left a single running request and its sequence plus the next
  token no longer fits the whole pool, that request is rejected (keeping the tokens it emitted);
* *deadlock*: after a pass with no effect at all (the lone running request needs pages held by
  partially prefilled waiting requests, which in turn cannot continue), those partial prefills
  are rolled back like retractions: they keep their queue position and prefill again later.

Without `reject_unservable` none of this happens and such a rank stalls (its worker is parked
and the run ends in the reference's "effect-free zero-duration pass" error).
"""

from __future__ import annotations

from array import array
from collections import deque

from servesim.engine.handoff import RankHandoff
from servesim.engine.metrics import sglang_metrics
from servesim.engine.pass_time import TimingModel
from servesim.engine.cache.radix import RadixCache
from servesim.engine.rank import DecodePass, DecodeRun, RankConfig, RankPass, decode_one_by_one
from servesim.engine.request import EngineRequest
from servesim.engine.sglang.admission import lpm_order, never_admissible
from servesim.engine.sglang.handoff import SglangHandoff
from servesim.engine.sglang.kv import PageLeases, SgRequest
from servesim.engine.speculative import DraftSampler
from servesim.errors import RunError

RATIO_INIT, RATIO_MIN_FACTOR, RATIO_DECAY_STEPS = 0.7, 0.14, 600.0

Chunk = tuple[SgRequest, int, int]
"""One prefill chunk of a pass: (request, chunk end, reused tokens)."""


class SglangRank(SglangHandoff):
    """Scheduler, radix cache and timing of one rank running the SGLang policy."""

    _no_extend = 0
    """Passes left that may not extend (`RankConfig.prefill_decode_interval`, upstream 0.13)."""

    def release(self) -> None:
        """At the end of a run: unlink the radix tree (its parent/child cycles), so the rank's
        memory returns with its last reference."""
        self.cache.release()

    def __init__(self, config: RankConfig, timing: TimingModel, *, sampler_seed: int = 0) -> None:
        self.config = config
        self.settings = config.sglang
        self.timing = timing
        self.page = config.block_size
        self.total_tokens = config.num_blocks * config.block_size
        self.cache = RadixCache(config.num_blocks, config.block_size, config.prefix_caching)
        self.handoff = RankHandoff(config.role)
        self.leases = PageLeases(self.cache, self.handoff)
        self.waiting: deque[SgRequest] = deque()
        self.running: list[SgRequest] = []
        self._context = 0
        """Σ length of the running requests."""
        self.ratio_init = RATIO_INIT * self.settings.schedule_conservativeness
        self.ratio_min = self.ratio_init * RATIO_MIN_FACTOR
        self.ratio_decay = (self.ratio_init - self.ratio_min) / RATIO_DECAY_STEPS
        self.ratio = self.ratio_init
        spec = config.speculative if config.role != "prefill" else None  # a prefill step never drafts
        self.drafts = DraftSampler(spec, sampler_seed) if spec is not None else None
        self._burst_max = self.drafts.max_burst if self.drafts is not None else 1
        """Tokens a decode step may add to one request (1 + draft tokens)."""
        clip = self.settings.clip_max_new_tokens
        self._clip = min(clip, 1) if self.handoff.holds else clip
        """Output tokens admission reserves per request at most: a prefill worker runs every
        request for one output token."""
        self.ready: deque[SgRequest] = deque()
        """Decode role: activated (prebuilt) requests not yet promoted into `running`."""
        self._reserved: dict[EngineRequest, SgRequest] = {}
        """Decode role: reserved destinations whose prompt KV has not arrived yet."""
        self._held: dict[EngineRequest, SgRequest] = {}
        """Prefill role: finished prompts whose KV waits for the transfer."""

    @property
    def pool(self) -> RadixCache:
        """The KV store, with the pool counters (`active`, `num_blocks`) other stages read."""
        return self.cache

    # -- queue interface --------------------------------------------------------------------

    def enqueue(self, request: EngineRequest) -> None:
        """A request routed to this rank joins the tail of the waiting queue."""
        self.waiting.append(SgRequest(request))

    def has_work(self) -> bool:
        """Whether a request is running, waiting or (decode role) activated."""
        return bool(self.running or self.waiting or self.ready)

    def num_requests(self) -> int:
        """Requests running, waiting or (decode role) activated on this rank."""
        return len(self.running) + len(self.waiting) + len(self.ready)

    def num_running(self) -> int:
        return len(self.running)

    def num_waiting(self) -> int:
        return len(self.waiting)

    def can_run_ahead(self, pass_index: int) -> bool:
        """Whether the next pass would only decode: nothing waits and no retraction is needed."""
        if self.waiting or self.ready or self.handoff.pending or self.handoff.holds or not self.running:
            return False
        cache = self.cache
        return self._growth() * self.page <= cache.free_pages * self.page + cache.evictable_tokens

    def decode_pass(self, pass_index: int) -> DecodePass:
        """Pass `pass_index` when it only decodes (`can_run_ahead`)."""
        result = self.run_pass(pass_index)
        return DecodePass(result.prefill_ms + result.decode_ms, result.emitted, result.finished, result.metrics)

    def decode_passes(self, pass_index: int, start_ms: float, horizon_ms: float, through_finishes: bool,
                      ends: array) -> DecodeRun:
        """Decode-only passes back to back (`Worker.start_pass`), one `decode_pass` at a time."""
        return decode_one_by_one(self, pass_index, start_ms, horizon_ms, through_finishes, ends)

    def _growth(self) -> int:
        """Pages the running requests need for their next tokens (without speculative decoding
        a running request holds exactly the pages of its known tokens, so it needs one when
        those fill whole pages)."""
        if self.drafts is not None:
            return sum(self._growth_of(r) for r in self.running)
        page = self.page
        if page == 1:
            return len(self.running)
        return sum(1 for r in self.running if r.length % page == 0)

    def _growth_of(self, r: SgRequest) -> int:
        """Pages `r` needs for its next decode step (a full burst, within its output)."""
        burst = min(self._burst_max, r.remaining_output())
        return max(0, -(-(r.length + burst) // self.page) - r.pages)

    # -- the pass ---------------------------------------------------------------------------

    def run_pass(self, pass_index: int) -> RankPass:
        """Run one scheduler iteration; tokens are credited to worker pass `pass_index`."""
        result = RankPass()
        batch: list[Chunk] = []
        prebuilt = bool(self.ready)
        if prebuilt:
            self._promote(result)
        if self._no_extend and not self.running:
            self._no_extend = 0  # the held passes are idle: 0.13 runs them in no time
        held = self._no_extend > 0
        if held:
            self._no_extend -= 1
        if self.waiting and not (prebuilt or self.handoff.pending or held):
            if self.settings.schedule_policy == "lpm":
                self.waiting = lpm_order(self.waiting, self.cache)
            if not self.running:
                self._reject_unservable(result)
            batch, oom = self._admit(result)
            if oom:
                self.ratio = self.ratio_init
            if self.handoff.charges_prefill:
                result.prefill_ms = self._prefill_time(batch)
            running_before = len(self.running)
            self._place_batch(batch, result)
            if batch and self.config.prefill_emits_first_token:  # 0.13: an extend is a round of its own
                self._no_extend = self.config.prefill_decode_interval
                return self._extend_round(pass_index, result, batch, running_before)
            if batch:  # this pass decodes too: the first of 0.13's rounds without an extend
                self._no_extend = max(0, self.config.prefill_decode_interval - 1)
        decoding: list[SgRequest] = []
        retracted = self._decode(pass_index, result, decoding) if self.running else []
        return self._end_round(result, batch, decoding, retracted)

    def _extend_round(self, pass_index: int, result: RankPass, batch: list[Chunk], old: int) -> RankPass:
        """Upstream 0.13's extend round: the prompts completed in it get their first token from
        the prefill (no decode time), the requests that were running before wait."""
        running = self.running
        settled = running[old:]
        settled_context = sum(r.length for r in settled)
        others = self._context - settled_context
        self.running, self._context = settled, settled_context
        decoding: list[SgRequest] = []
        retracted = self._decode(pass_index, result, decoding) if settled else []
        result.decode_ms = 0.0
        self.running = running[:old] + self.running
        self._context += others
        return self._end_round(result, batch, decoding, retracted)

    def _end_round(self, result: RankPass, batch: list[Chunk], decoding: list[SgRequest],
                   retracted: list[SgRequest]) -> RankPass:
        """What every round ends with: retracted requests back to the queue, the ratio's decay,
        the deadlock check and the metrics."""
        if retracted:
            self.waiting.extendleft(reversed(retracted))
            self.ratio = self.ratio_init
            self.handoff.capacity_changed()
        self.ratio = max(self.ratio - self.ratio_decay, self.ratio_min)
        if not result.has_effect and self.config.reject_unservable:
            self._roll_back_partial_prefills(result)
        if self.config.record_metrics:
            result.metrics = sglang_metrics([(r.req.prompt_len, end, reused) for r, end, reused in batch],
                                            [r.length - 1 for r in decoding],
                                            [(r.req, r.length) for r in self.waiting])
        return result

    # -- admission --------------------------------------------------------------------------

    def _reject_unservable(self, result: RankPass) -> None:
        """With nothing running, drop waiting heads no idle rank could ever admit (with
        ``--unservable fail``, stop the run at the first: the reference stalls there)."""
        while self.waiting:
            r = self.waiting[0]
            reason = never_admissible(r, self.settings, self.page, self._clip, self.total_tokens)
            if reason is None:
                return
            if not self.config.reject_unservable:
                raise RunError(f"a request can never be served: {reason}")
            self.waiting.popleft()
            self.leases.release(r)
            r.req.reject_reason = reason
            result.rejected.append(r.req)

    def _admit(self, result: RankPass) -> tuple[list[Chunk], bool]:
        """Build the prefill batch: (request, chunk end, reused tokens) per chunk; OOM flag."""
        s, page, cache = self.settings, self.page, self.cache
        ratio, clip = self.ratio, self._clip
        reserved = 0.0
        for r in self.running:
            reserved += min(r.remaining_output(), clip) * ratio
        rem_total = (cache.free_pages * page + cache.evictable_tokens) - reserved
        rem_input, rem_chunk = s.max_prefill_tokens, s.chunked_prefill_size
        slots = self.config.max_sequences - len(self.running)
        batch: list[Chunk] = []
        waiting = self.waiting
        while waiting and len(batch) < slots:
            r = waiting[0]
            extend = r.length - r.materialized
            chunk = extend if extend <= s.chunked_prefill_size else rem_chunk // page * page
            if chunk == 0:
                break
            charged = -(-chunk // page) * page
            out = min(r.remaining_output(), clip) if chunk == extend else 0
            if not charged + out < rem_total or charged > rem_input or charged > rem_chunk:
                break
            reused = self.leases.allocate(r, r.materialized + chunk)
            if reused is None:
                return batch, True
            waiting.popleft()
            chunk_end = r.materialized
            rem_total -= charged + out
            rem_input -= charged
            rem_chunk -= charged
            result.admitted.append((r.req, reused))
            result.scheduled_tokens += chunk_end - reused
            batch.append((r, chunk_end, reused))
            if rem_chunk <= 0:
                break
        return batch, False

    def _prefill_time(self, batch: list[Chunk]) -> float:
        """The prefill phase of the pass: the timing model on the chunks' floor means."""
        count = len(batch)
        if not count:
            return 0.0
        mean_isl = sum(end for _, end, _ in batch) // count
        mean_prefix = sum(reused for _, _, reused in batch) // count
        if mean_isl == mean_prefix:
            return 0.0
        return self.timing.prefill(count, mean_isl, mean_prefix)

    def _place_batch(self, batch: list[Chunk], result: RankPass) -> None:
        """Chunked requests back to the queue front, finished prompts to running."""
        partial = []
        for r, _end, _reused in batch:
            if r.materialized < r.length:
                self.leases.cache_prefix(r)
                partial.append(r)
            else:
                self._settle(r, result)
        self.waiting.extendleft(reversed(partial))

    def _settle(self, r: SgRequest, result: RankPass) -> None:
        """A request whose prompt is in: it runs, or (no output left) is held on a prefill rank
        or finishes."""
        if r.remaining_output() > 0:
            self.running.append(r)
            self._context += r.length
        elif self.handoff.holds:
            self._hold(r, result)
        else:
            self.leases.finish(r)
            result.finished.append(r.req)
            self.handoff.capacity_changed()

    # -- decode -----------------------------------------------------------------------------

    def _decode(self, pass_index: int, result: RankPass, decoding: list[SgRequest]) -> list[SgRequest]:
        """One token for every running request, retracting under memory pressure.

        `decoding` receives the requests that got a token."""
        retracted, growth = self._make_room(result)
        running = self.running
        if not running or not self.cache.reserve(growth):
            return retracted
        n = len(running)
        total = self._context
        result.decode_ms = self.timing.decode(n, total, total // n, self.total_tokens)
        result.scheduled_tokens += n
        decoding.extend(running)
        if self.handoff.holds:
            self._hold_running(result)
            return retracted
        result.emitted = n
        done: list[SgRequest] = []
        page, cache, leases, drafts = self.page, self.cache, self.leases, self.drafts
        caching = cache.caching
        added = 0
        for r in running:
            req = r.req
            if drafts is None:
                burst = 1
                r.pages = -(-(r.length + 1) // page)
            else:
                burst = drafts.burst(r.remaining_output())
                held = r.pages + self._growth_of(r)
                r.pages = -(-(r.length + burst) // page)
                cache.give_back(held - r.pages)  # the room reserved for a full burst is temporary
            added += burst
            if req.generated == 0:
                result.first_tokens.append(req)
            req.generated += burst
            for _ in range(burst):
                req.add_token_pass(pass_index)
            r.length = r.materialized = req.computed = r.length + burst
            if req.generated >= req.max_output:
                leases.finish(r)
                done.append(r)
            elif caching:
                leases.grow(r)
        self._context += added
        if done:
            self.running = [r for r in running if r.req.generated < r.req.max_output]
            self._context -= sum(r.length for r in done)
            result.finished.extend(r.req for r in done)
            self.handoff.capacity_changed(len(done))
        return retracted

    def _make_room(self, result: RankPass) -> tuple[list[SgRequest], int]:
        """Retract fewest-output requests while the next tokens do not fit (never the last one);
        deal with a lone request that still does not fit (`_stalled`). Returns the retracted
        requests and the pages the remaining ones need."""
        page, cache, running = self.page, self.cache, self.running
        growth = self._growth()
        retracted: list[SgRequest] = []
        while cache.free_pages * page + cache.evictable_tokens < growth * page and len(running) > 1:
            victim = min(range(len(running)), key=lambda i: running[i].req.generated)
            growth -= self._growth_of(running[victim])
            self._retract(running.pop(victim), result, retracted)
        if len(running) == 1 and cache.free_pages * page + cache.evictable_tokens < growth * page:
            growth = self._stalled(result, retracted, growth)
        return retracted, growth

    def _stalled(self, result: RankPass, retracted: list[SgRequest], growth: int) -> int:
        """The lone running request's next token does not fit; returns the pages still needed.

        The reference emits nothing and, on a decode worker, spins for ever. servesim (with
        `reject_unservable`) rejects the request if its sequence has outgrown the whole pool;
        on a decode worker whose other pages are held by reserved or activated destinations, it
        retracts the request so that those can run first (without `reject_unservable` the run
        fails there, as the reference never finishes)."""
        r = self.running[0]
        need = -(-(r.length + min(self._burst_max, r.remaining_output())) // self.page) * self.page
        reject = self.config.reject_unservable
        if need > self.total_tokens and reject:
            self.running.pop()
            self._context -= r.length
            self.leases.release(r)
            r.req.reject_reason = (f"sequence of {r.length + 1} tokens outgrew the KV pool "
                                   f"({self.total_tokens} tokens)")
            result.rejected.append(r.req)
            return 0
        if self.config.role != "decode":
            return growth
        if not reject:
            raise RunError(f"a decode worker stalls: its only running request ({r.length} tokens) needs "
                           f"a KV page and none is free; the reference spins for ever here")
        if self._reserved or self.ready:
            self._retract(self.running.pop(), result, retracted)
            return 0
        return growth

    def _retract(self, r: SgRequest, result: RankPass, retracted: list[SgRequest]) -> None:
        """Take `r` out of `running`: private pages freed, cached prefix unlocked, tokens kept."""
        self._context -= r.length
        self.leases.release(r)
        r.req.preempted = True
        retracted.append(r)
        result.preemptions += 1

    def abort(self, request: EngineRequest, pass_index: int) -> None:
        """Drop a request its client gave up on, between passes: a running request frees its
        private pages and unlocks its cached prefix, a waiting one leaves."""
        running = next((r for r in self.running if r.req is request), None)
        if running is not None:
            self.running.remove(running)
            self._context -= running.length
            self.leases.release(running)
            self.handoff.capacity_changed()
            return
        waiting = next((r for r in self.waiting if r.req is request), None)
        if waiting is not None:
            self.waiting.remove(waiting)
            self.leases.release(waiting)

    def _roll_back_partial_prefills(self, result: RankPass) -> None:
        """Deadlock breaker: release the KV of every partially prefilled waiting request.

        Reached only after a pass with no effect at all, i.e. where the reference stalls for
        ever: the only pages that can still block progress are held by chunked requests waiting
        for their next chunk (the lone running request needs them, or they block each other).
        They keep their queue position and prefill again later; the ratio resets as after a
        retraction."""
        for r in self.waiting:
            if r.node is not None:
                self.leases.release(r)
                r.req.preempted = True
                result.preemptions += 1
        if result.preemptions:
            self.ratio = self.ratio_init

    def check(self) -> None:
        """Assert page conservation: free + evictable + protected + private == total."""
        assert self._context == sum(r.length for r in self.running)
        assert all(r.materialized == r.length for r in self.running)
        self.leases.check([*self.running, *self.waiting, *self.ready, *self._held.values()],
                          list(self._reserved.values()))
