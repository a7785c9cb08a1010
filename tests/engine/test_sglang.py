"""The SGLang core: token sequences, the radix cache, admission/reservation, retraction,
unservable requests, the `scheduler.sglang` config extension, and invariants on random workloads.

Pass-level tests use fixed timing (prefill 10 ms, decode 5 ms) and page size 1 unless stated.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servesim import simulate
from servesim.build import lower
from servesim.config import parse_config
from servesim.errors import RunError
from servesim.engine.cache.radix import RadixCache, TokenSeq
from servesim.engine.rank import RankConfig, SglangSettings
from servesim.engine.request import EngineRequest
from servesim.engine.sglang.core import SglangRank
from servesim.perf.timing import FixedTiming
from servesim.errors import ConfigError
from servesim.traffic.workload import GENERATED_BASE

# -- helpers ---------------------------------------------------------------------------------


def tokens_of(runs: list[tuple[int, int]]) -> list[int]:
    out: list[int] = []
    for value, count in runs:
        out.extend([value] * count if count > 0 else range(value, value - count))
    return out


def seq(ids: list[int]) -> TokenSeq:
    return TokenSeq([(v, 1) for v in ids])


def request(rid: int, ids: list[int], output: int) -> EngineRequest:
    return EngineRequest(rid, [(v, 1) for v in ids], len(ids), output, GENERATED_BASE + 100_000 * rid)


def fresh(rid: int, n: int, output: int) -> EngineRequest:
    """A request with `n` private prompt tokens (one consecutive run)."""
    return EngineRequest(rid, [(10_000_000 * (rid + 1), -n)], n, output, GENERATED_BASE + 100_000 * rid)


def rank(num_blocks: int = 1000, page: int = 1, max_sequences: int = 256, caching: bool = True,
         reject: bool = True, **knobs) -> SglangRank:
    config = RankConfig(block_size=page, num_blocks=num_blocks, max_sequences=max_sequences,
                        prefix_caching=caching, backend="sglang", reject_unservable=reject,
                        sglang=SglangSettings(**knobs))
    return SglangRank(config, FixedTiming(10, 5))


def run_until(r: SglangRank, done, start: int = 0, limit: int = 10_000):
    """Run passes until `done(result)`; returns (pass index, result)."""
    for p in range(start, start + limit):
        result = r.run_pass(p)
        r.check()
        if done(result):
            return p, result
    raise AssertionError("condition never met")


# -- token sequences -------------------------------------------------------------------------

runs_strategy = st.lists(st.tuples(st.integers(0, 6), st.integers(-4, 4).filter(bool)), min_size=1, max_size=8)


@settings(max_examples=300, deadline=None)
@given(runs_strategy, runs_strategy, st.integers(0, 10), st.integers(0, 10))
def test_common_prefix_is_token_exact_whatever_the_runs(runs_a, runs_b, pos_a, pos_b):
    a, b = TokenSeq(runs_a), TokenSeq(runs_b)
    ta, tb = tokens_of(runs_a), tokens_of(runs_b)
    assert a.length == len(ta) and [a.token_at(i) for i in range(a.length)] == ta
    pos_a, pos_b = min(pos_a, a.length), min(pos_b, b.length)
    limit = min(a.length - pos_a, b.length - pos_b)
    expected = 0
    while expected < limit and ta[pos_a + expected] == tb[pos_b + expected]:
        expected += 1
    assert a.common(pos_a, b, pos_b, limit) == expected
    assert b.common(pos_b, a, pos_a, limit) == expected


def test_equal_histories_are_compared_in_bulk():
    shared = [(v, 1) for v in range(5000)]
    a = TokenSeq(shared + [(1, 3)])
    b = TokenSeq(list(shared) + [(1, 2), (9, 1)])
    assert a.common(0, b, 0, 5003) == 5002
    assert a.common(10, b, 10, 100) == 100


# -- radix cache -----------------------------------------------------------------------------


def insert_new(cache: RadixCache, ids: list[int]) -> tuple[object, int]:
    """Insert a whole sequence from the root the way a request does (lock, insert, unlock)."""
    s = seq(ids)
    matched, node = cache.match_lock(s, len(ids) - len(ids) % cache.page)
    fresh_pages = len(ids) // cache.page - matched // cache.page
    assert cache.reserve(fresh_pages)
    end = len(ids) - len(ids) % cache.page
    leaf, new = cache.insert(node, s, matched, end)
    cache.give_back((end - matched - new) // cache.page)
    cache.dec_lock(node)
    return leaf, new


def test_partial_match_splits_and_the_old_node_keeps_the_suffix():
    cache = RadixCache(100, 1)
    leaf, new = insert_new(cache, [1, 2, 3, 4, 5])
    assert new == 5 and cache.evictable_tokens == 5 and cache.free_pages == 95
    matched, node = cache.match_lock(seq([1, 2, 3, 9]), 4)
    assert matched == 3 and node is not leaf and leaf.parent is node
    assert leaf.length == 2 and node.length == 3
    assert cache.protected_tokens == 3 and cache.evictable_tokens == 2
    cache.dec_lock(node)
    assert cache.check() == (5, 0)


def test_duplicate_content_is_not_stored_twice():
    cache = RadixCache(100, 1)
    insert_new(cache, [1, 2, 3])
    _, new = insert_new(cache, [1, 2, 3])
    assert new == 0 and cache.free_pages == 97
    _, new = insert_new(cache, [1, 2, 3, 4, 5])
    assert new == 2 and cache.free_pages == 95
    assert cache.match_len(seq([1, 2, 3, 4, 5, 6]), 6) == 5
    cache.check()


def test_own_leaf_extends_in_place_but_a_shared_one_gets_a_child():
    cache = RadixCache(100, 4)
    s = seq(list(range(1, 9)))
    matched, root = cache.match_lock(s, 8)
    assert matched == 0 and cache.reserve(1)
    node, _ = cache.insert(root, s, 0, 4)
    cache.inc_lock(node)
    cache.dec_lock(root)
    assert cache.reserve(1)
    same, new = cache.insert(node, s, 4, 8)
    assert same is node and new == 4 and node.length == 8 and cache.protected_tokens == 8
    cache.inc_lock(node)  # a second request now shares the leaf
    assert cache.reserve(1)
    t = seq(list(range(1, 9)) + [20, 21, 22, 23])
    child, new = cache.insert(node, t, 8, 12)
    assert child is not node and child.parent is node and new == 4
    cache.check()


def test_children_are_told_apart_by_their_whole_first_page():
    cache = RadixCache(100, 4)
    insert_new(cache, [1, 2, 3, 4])
    insert_new(cache, [1, 2, 3, 5])
    assert cache.match_len(seq([1, 2, 3, 4]), 4) == 4
    assert cache.match_len(seq([1, 2, 3, 5]), 4) == 4
    assert cache.match_len(seq([1, 2, 3, 6]), 4) == 0
    assert cache.match_len(seq([1, 2, 3, 4, 5, 6, 7]), 4) == 4
    cache.check()


def test_eviction_takes_the_oldest_leaf_newest_pages_first():
    cache = RadixCache(10, 1)
    insert_new(cache, [1, 2, 3, 4])      # oldest
    insert_new(cache, [7, 8, 9])
    assert cache.free_pages == 3
    assert cache.reserve(5)               # needs 2 more pages: cut 2 from the oldest leaf's end
    assert cache.match_len(seq([1, 2, 3, 4]), 4) == 2
    assert cache.match_len(seq([7, 8, 9]), 3) == 3
    cache.give_back(5)
    assert cache.evict(100) == 5 and cache.free_pages == 10 and cache.evictable_tokens == 0
    cache.check()


def test_a_parent_left_as_a_leaf_keeps_its_older_time():
    cache = RadixCache(20, 1)
    insert_new(cache, [1, 2, 3, 4])
    insert_new(cache, [1, 2, 5, 6])       # splits: [1, 2] -> {[3, 4], [5, 6]}
    insert_new(cache, [9, 9])             # newest leaf
    assert cache.evict(4) == 4            # both children of [1, 2] go, oldest first
    assert cache.match_len(seq([1, 2]), 2) == 2
    assert cache.evict(2) == 2            # [1, 2] was touched before [9, 9]
    assert cache.match_len(seq([1, 2]), 2) == 0 and cache.match_len(seq([9, 9]), 2) == 2
    cache.check()


def test_locked_paths_are_never_evicted():
    cache = RadixCache(6, 1)
    insert_new(cache, [1, 2, 3, 4])
    matched, node = cache.match_lock(seq([1, 2, 3, 4]), 4)
    assert matched == 4 and cache.evictable_tokens == 0
    assert not cache.reserve(3)
    assert cache.evict(10) == 0
    cache.dec_lock(node)
    assert cache.reserve(3) and cache.check() == (3, 0)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["insert", "evict"]),
                          st.lists(st.integers(0, 3), min_size=1, max_size=9)), max_size=25),
       st.sampled_from([1, 2, 3]))
def test_random_cache_operations_keep_the_books(ops, page):
    cache = RadixCache(12, page)
    for op, ids in ops:
        if op == "evict":
            cache.evict(len(ids))
        elif (len(ids) // page) * page <= cache.free_pages * page + cache.evictable_tokens:
            insert_new(cache, ids)
        evictable, protected = cache.check()
        assert protected == 0
        assert cache.free_pages + evictable // page == cache.total_pages


# -- admission and reservation ----------------------------------------------------------------


def test_admission_needs_prompt_plus_clipped_output_strictly_below_the_room():
    r = rank(num_blocks=200)
    fits, too_big = fresh(1, 100, 99), fresh(2, 100, 100)
    r.enqueue(fits)
    first = r.run_pass(0)
    assert first.admitted == [(fits, 0)]
    r2 = rank(num_blocks=200)
    r2.enqueue(too_big)
    result = r2.run_pass(0)
    assert not result.admitted and result.rejected == [too_big]
    assert "do not fit" in too_big.reject_reason


def test_running_requests_reserve_their_remaining_output_at_the_ratio():
    r = rank(num_blocks=200)
    a, b = fresh(1, 50, 100), fresh(2, 50, 100)
    r.enqueue(a)
    r.enqueue(b)
    result = r.run_pass(0)
    assert result.admitted == [(a, 0)], "b needs 150 < 200 - 150"
    p, result = run_until(r, lambda res: res.admitted, start=1)
    assert result.admitted == [(b, 0)] and a.generated == a.max_output and p == 100
    assert r.running and not r.waiting


def test_ratio_decays_per_pass_and_resets_on_retraction():
    r = rank(schedule_conservativeness=0.5)
    assert r.ratio == 0.35 and r.ratio_min == 0.35 * 0.14
    step = (0.35 - 0.35 * 0.14) / 600
    r.enqueue(fresh(1, 10, 2000))
    for p in range(700):
        r.run_pass(p)
    assert r.ratio == r.ratio_min
    assert r.ratio_decay == step


def test_long_prompts_are_chunked_on_the_remaining_budget_and_each_chunk_is_an_admission():
    r = rank(chunked_prefill_size=64)
    a = request(1, list(range(5000, 5150)), 2)
    r.enqueue(a)
    chunks = []
    for p in range(3):
        result = r.run_pass(p)
        chunks.append((result.admitted, result.prefill_ms, result.decode_ms))
    assert chunks == [([(a, 0)], 10.0, 0.0), ([(a, 64)], 10.0, 0.0), ([(a, 128)], 10.0, 5.0)]
    assert a.generated == 1


def test_cached_tokens_count_against_the_chunk_budget_and_short_prompts_wait_whole():
    r = rank(chunked_prefill_size=64)
    warm = request(1, list(range(5000, 5150)), 2)
    r.enqueue(warm)
    run_until(r, lambda res: res.finished)
    cached, other = request(2, list(range(5000, 5050)), 2), request(3, list(range(9000, 9040)), 2)
    r.enqueue(cached)
    r.enqueue(other)
    result = r.run_pass(10)
    assert result.admitted == [(cached, 50)], "50 cached tokens leave 14 of the 64-token budget"
    assert result.prefill_ms == 0.0, "a fully cached prompt needs no prefill"
    assert r.run_pass(11).admitted == [(other, 0)]


def test_continuation_chunks_never_match_the_cache_again():
    r = rank(chunked_prefill_size=64)
    ids = list(range(5000, 5150))
    r.enqueue(request(1, ids, 2))
    run_until(r, lambda res: res.finished)
    again = request(2, ids, 2)
    r.enqueue(again)
    reused = [r.run_pass(p).admitted[0][1] for p in range(10, 13)]
    assert reused == [64, 64, 128]


def test_max_batched_tokens_plays_no_role():
    config = RankConfig(block_size=1, num_blocks=1000, max_batched_tokens=8, backend="sglang")
    r = SglangRank(config, FixedTiming(10, 5))
    a = fresh(1, 150, 1)
    r.enqueue(a)
    assert r.run_pass(0).finished == [a]


def test_output_zero_finishes_at_its_prefill_without_a_token():
    r = rank()
    a = fresh(1, 20, 0)
    r.enqueue(a)
    result = r.run_pass(0)
    assert result.finished == [a] and a.generated == 0 and result.decode_ms == 0.0
    assert not result.first_tokens


def test_retraction_takes_the_fewest_outputs_and_keeps_the_cached_prefix():
    r = rank(num_blocks=200, schedule_conservativeness=0.0)
    a, b = fresh(1, 20, 100), fresh(2, 20, 100)
    r.enqueue(a)
    r.enqueue(b)
    _, result = run_until(r, lambda res: res.preemptions)
    assert list(r.waiting)[0].req is b and r.ratio == 0.0 and b.preempted
    assert (a.generated, b.generated) == (81, 79), "a got its token in the retracting pass"
    _, result = run_until(r, lambda res: any(q is b for q, _ in res.admitted))
    assert result.admitted == [(b, 80)] and a.generated == a.max_output


def test_first_tokens_are_reported():
    r = rank()
    a = fresh(1, 20, 3)
    r.enqueue(a)
    assert r.run_pass(0).first_tokens == [a]
    assert r.run_pass(1).first_tokens == []


# -- unservable requests ---------------------------------------------------------------------


def test_a_blocked_head_waits_while_requests_run_and_is_rejected_once_none_does():
    r = rank(num_blocks=200)
    small, huge = fresh(1, 20, 10), fresh(2, 190, 20)
    r.enqueue(small)
    r.enqueue(huge)
    assert r.run_pass(0).admitted == [(small, 0)]
    p, result = run_until(r, lambda res: res.rejected, start=1)
    assert result.rejected == [huge] and p == small.max_output
    assert "KV tokens" in huge.reject_reason and not r.has_work()


def test_a_lone_request_that_outgrows_the_pool_is_rejected_with_its_tokens():
    r = rank(num_blocks=200, clip_max_new_tokens=50)
    a = fresh(1, 100, 300)
    r.enqueue(a)
    _, result = run_until(r, lambda res: res.rejected)
    assert result.rejected == [a] and a.generated == 100
    assert "outgrew" in a.reject_reason
    assert r.cache.active_blocks == 0


def test_without_rejection_an_unservable_request_stops_the_run():
    """Where the reference stalls the rank (and aborts at the effect-free pass), --unservable
    fail stops the run with the reason."""
    r = rank(num_blocks=200, reject=False)
    r.enqueue(fresh(1, 100, 100))
    with pytest.raises(RunError, match="can never be served: its next 100 prompt tokens"):
        r.run_pass(0)


def test_chunk_budgets_smaller_than_a_page_or_prompt_make_a_request_unservable():
    r = rank(page=4, chunked_prefill_size=2)
    a = fresh(1, 10, 1)
    r.enqueue(a)
    assert r.run_pass(0).rejected == [a] and "smaller than one page" in a.reject_reason
    r = rank(max_prefill_tokens=32, chunked_prefill_size=64)
    b = fresh(2, 40, 1)
    r.enqueue(b)
    assert r.run_pass(0).rejected == [b] and "max_prefill_tokens" in b.reject_reason


def test_partial_prefills_that_block_the_last_runner_are_rolled_back():
    # Conservativeness 0 reserves nothing for running outputs, so a chunk of the long prompt is
    # admitted and then holds the pages the running request needs: the reference spins for ever.
    r = rank(num_blocks=50, page=2, chunked_prefill_size=64, max_prefill_tokens=64,
             schedule_conservativeness=0.0)
    runner, chunked = fresh(1, 30, 37), fresh(2, 89, 10)
    r.enqueue(runner)
    r.run_pass(0)
    r.enqueue(chunked)
    _, result = run_until(r, lambda res: res.preemptions, start=1)
    assert not result.emitted and r.waiting[0].req is chunked and r.waiting[0].pages == 0
    run_until(r, lambda res: runner in res.finished, start=100)


# -- the config extension --------------------------------------------------------------------


def config(backend: str = "sglang", **sglang) -> dict:
    scheduler = {"sglang": sglang} if sglang is not None else {}
    worker = {"scheduler": scheduler, "kv_cache": {"capacity": {"type": "fixed", "blocks": 1000}},
              "timing": {"type": "fixed", "prefill_ms": 10, "decode_ms": 5}}
    engine = {"model": "m", "hardware": "h200_sxm", "backend": backend, "workers": {"aggregated": worker}}
    traffic = {"source": {"type": "synthetic", "input_tokens": 100, "output_tokens": 10},
               "load": {"type": "concurrency", "concurrency": 2}, "stop": {"requests": 4}}
    return {"engine": engine, "traffic": traffic}


def test_sglang_knobs_are_lowered_with_the_reference_defaults():
    run = lower(parse_config(config(schedule_policy="lpm", chunked_prefill_size=64)))
    assert run.pools[0].rank_config.sglang == SglangSettings(schedule_policy="lpm", chunked_prefill_size=64)
    plain = config()
    del plain["engine"]["workers"]["aggregated"]["scheduler"]["sglang"]
    assert lower(parse_config(plain)).pools[0].rank_config.sglang == SglangSettings()


@pytest.mark.parametrize(("knobs", "backend", "message"), [
    ({"chunked_prefill_size": 64}, "vllm", "only allowed when backend is 'sglang'"),
    ({"chunked_prefill_size": "64"}, "sglang", "chunked_prefill_size"),
    ({"max_prefill_tokens": 10.0}, "sglang", "max_prefill_tokens"),
    ({"clip_max_new_tokens": True}, "sglang", "clip_max_new_tokens"),
    ({"chunked_prefill_size": 0}, "sglang", "chunked_prefill_size"),
    ({"schedule_policy": "lifo"}, "sglang", "schedule_policy"),
    ({"schedule_conservativeness": -1}, "sglang", "schedule_conservativeness"),
    ({"page_size": 4}, "sglang", "page_size"),
])
def test_sglang_knobs_are_validated(knobs, backend, message):
    with pytest.raises((ConfigError, ValueError), match=message):
        parse_config(config(backend, **knobs))


# -- invariants on random workloads ----------------------------------------------------------

PREFIXES = [list(range(1000, 1064)), list(range(2000, 2040)), list(range(3000, 3100))]


@st.composite
def workloads(draw):
    knobs = {"schedule_policy": draw(st.sampled_from(["fifo", "lpm"])),
             "chunked_prefill_size": draw(st.sampled_from([16, 40, 64, 8192])),
             "max_prefill_tokens": draw(st.sampled_from([64, 16384])),
             "clip_max_new_tokens": draw(st.sampled_from([8, 4096])),
             "schedule_conservativeness": draw(st.sampled_from([0.0, 0.3, 1.0]))}
    setup = {"page": draw(st.sampled_from([1, 2, 4])), "pool_tokens": draw(st.sampled_from([64, 120, 300, 2000])),
             "max_sequences": draw(st.sampled_from([1, 2, 256])), "caching": draw(st.booleans())}
    requests = []
    for i in range(draw(st.integers(1, 12))):
        ids = draw(st.sampled_from(PREFIXES))[: draw(st.integers(0, 100))] if draw(st.booleans()) else []
        ids = ids + list(range(100_000 * (i + 1), 100_000 * (i + 1) + draw(st.integers(0 if ids else 1, 50))))
        requests.append((draw(st.integers(0, 30)), ids, draw(st.integers(0, 120))))
    return knobs, setup, requests


@settings(max_examples=150, deadline=None)
@given(workloads())
def test_random_workloads_end_and_conserve_pages(workload):
    knobs, setup, specs = workload
    page = setup["page"]
    r = rank(num_blocks=setup["pool_tokens"] // page, page=page, max_sequences=setup["max_sequences"],
             caching=setup["caching"], **knobs)
    arrivals = sorted((at, i) for i, (at, _, _) in enumerate(specs))
    requests = [request(i, ids, out) for i, (_, ids, out) in enumerate(specs)]
    ended: dict[int, str] = {}
    p = 0
    while len(ended) < len(requests):
        while arrivals and arrivals[0][0] <= p:
            r.enqueue(requests[arrivals.pop(0)[1]])
        if r.has_work():
            result = r.run_pass(p)
            r.check()
            assert result.has_effect, "with rejection on, a rank never stalls"
            for q in result.finished + result.rejected:
                assert q.rid not in ended
                ended[q.rid] = "finished" if q in result.finished else "rejected"
        p += 1
        assert p < 20_000, "the workload must drain"
    for q in requests:
        spans = q.token_spans
        assert spans == sorted(spans) and sum(spans[i + 1] - spans[i] for i in range(0, len(spans), 2)) == q.generated
        if ended[q.rid] == "finished":
            assert q.generated == q.max_output
        else:
            assert q.reject_reason
    assert r.cache.active_blocks == 0 and r.cache.protected_tokens == 0


@settings(max_examples=100, deadline=None)
@given(workloads())
def test_kv_events_track_exactly_the_pages_in_the_tree(workload):
    """What the KV router's indexer learns from the radix cache's events is, after every pass,
    the set of pages resident in the tree: no page stored twice, none removed unannounced."""
    knobs, setup, specs = workload
    page = setup["page"]
    r = rank(num_blocks=setup["pool_tokens"] // page, page=page, max_sequences=setup["max_sequences"], **knobs)
    resident: set[int] = set()

    def listen(kind: str, key: int) -> None:
        if kind == "stored":
            assert key not in resident
            resident.add(key)
        else:
            resident.remove(key)

    r.cache.listener = listen
    arrivals = sorted((at, i) for i, (at, _, _) in enumerate(specs))
    requests = [request(i, ids, out) for i, (_, ids, out) in enumerate(specs)]
    for p in range(20_000):
        while arrivals and arrivals[0][0] <= p:
            r.enqueue(requests[arrivals.pop(0)[1]])
        if not (arrivals or r.has_work()):
            break
        if r.has_work():
            r.run_pass(p)
            assert resident == r.cache.cached_keys()
    assert not r.has_work()


@st.composite
def sglang_configs(draw) -> dict:
    cfg = config(**{"schedule_policy": draw(st.sampled_from(["fifo", "lpm"])),
                    "chunked_prefill_size": draw(st.sampled_from([16, 64, 8192])),
                    "schedule_conservativeness": draw(st.sampled_from([0.0, 1.0]))})
    worker = cfg["engine"]["workers"]["aggregated"]
    worker["kv_cache"]["capacity"]["blocks"] = draw(st.sampled_from([150, 400, 5000]))
    worker["scheduler"]["max_sequences"] = draw(st.sampled_from([1, 4, 256]))
    worker["parallelism"] = {"replicas": draw(st.integers(1, 2)), "attention_data": draw(st.integers(1, 2))}
    source = {"type": "synthetic-session", "new_input_tokens_per_turn": draw(st.integers(1, 80)),
              "output_tokens_per_turn": draw(st.integers(1, 60)),
              "session": {"turns": draw(st.integers(2, 3)), "shared_prefix_ratio": 0.5, "prefix_groups": 2}}
    cfg["traffic"] = {"source": source, "load": {"type": "concurrency", "concurrency": draw(st.integers(1, 4))},
                      "stop": {"sessions": draw(st.integers(1, 6))}}
    return cfg


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cfg=sglang_configs())
def test_random_sglang_deployments_keep_request_timelines_monotone(cfg, monkeypatch):
    original = SglangRank.run_pass

    def checked(self, pass_index):
        result = original(self, pass_index)
        self.check()
        return result

    monkeypatch.setattr(SglangRank, "run_pass", checked)
    report = simulate(cfg, capture_per_request=True).to_dict()
    records = report["per_request"]
    assert len(records) == report["num_requests"]
    for rec in records:
        assert rec["terminal_status"] in ("completed", "rejected")
        admissions = [a["at_ms"] for a in rec["admission_history"]]
        assert admissions == sorted(admissions), "chunks and readmissions come in order"
        times = [rec["arrival_time_ms"]] + admissions[:1]
        times += [t for t in (rec["first_token_ms"], rec["last_token_ms"], rec["terminal_time_ms"]) if t is not None]
        assert times == sorted(times), rec
        if admissions and rec["terminal_time_ms"] is not None:
            assert admissions[-1] <= rec["terminal_time_ms"]
    again = simulate(cfg, capture_per_request=True).to_dict()
    for key in ("wall_time_ms", "processed_tokens_per_s", "processed_output_tokens_per_s"):
        report.pop(key), again.pop(key)
    strip = [{k: v for k, v in rec.items() if k != "uuid"} for rec in report.pop("per_request")]
    assert strip == [{k: v for k, v in rec.items() if k != "uuid"} for rec in again.pop("per_request")]
    assert json.dumps(report, sort_keys=True) == json.dumps(again, sort_keys=True)


def test_case_04_config_file_runs_through_the_public_api():
    case = Path(__file__).parent.parent / "cases" / "engine" / "04-sglang-fixed" / "config.yaml"
    report = simulate(case)
    assert report["completed_requests"] == 4 and report["prefix_cache_reused_ratio"] == 0.375
