"""SGLang's retraction (engine/sglang/core.py docstring, step 5): while the next tokens do not fit
(free + evictable) and more than one request runs, the running request with the fewest generated
tokens is retracted — the FIRST in running order among equals — until the rest fit; the last one
is never retracted; retracted requests go to the front of the queue, keep their tokens and emit
nothing that pass; a request that emits its last token leaves the running list."""

from __future__ import annotations

from engine_helpers import sglang_rank, sglang_request


def _crowded():
    """Page 1, 60 tokens, reserve ≈ 0: four 4-token prompts of 16 outputs, admitted two per pass
    for the first two passes; their growth outruns the pool."""
    rank = sglang_rank(num_blocks=60, page=1, schedule_conservativeness=0.001)
    reqs = [sglang_request(i, 4, 16) for i in range(1, 5)]
    for q in reqs:
        rank.enqueue(q)
    return rank, reqs


def _until_retraction(rank, reqs, passes=40):
    for i in range(passes):
        order = [r.req for r in rank.running]
        generated = {q.rid: q.generated for q in reqs}
        rank.run_pass(i)
        retracted = [q for q in order if q.preempted and q not in [r.req for r in rank.running]]
        if retracted:
            return i, order, generated, retracted
    raise AssertionError("no retraction")


def _expected_victim(order, generated):
    fewest = min(generated[q.rid] for q in order)
    return next(q for q in order if generated[q.rid] == fewest)


def test_the_fewest_generated_is_retracted_first_in_running_order_among_ties():
    rank, reqs = _crowded()
    _, order, generated, retracted = _until_retraction(rank, reqs)
    victim = _expected_victim(order, generated)
    ties = [q for q in order if generated[q.rid] == generated[victim.rid]]
    assert len(ties) >= 2, "the scenario must exercise the tie-break"
    assert retracted == [victim], "one retraction frees enough: only the victim goes"
    assert victim is ties[0] and order.index(victim) < order.index(ties[1])


def test_a_retracted_request_keeps_its_tokens_and_waits_at_the_front():
    rank, reqs = _crowded()
    _, order, generated, (victim,) = _until_retraction(rank, reqs)
    assert victim.generated == generated[victim.rid], "no token in the pass that retracted it"
    assert [getattr(w, "req", w) for w in rank.waiting][0] is victim
    for q in order:
        if q is not victim:
            assert q.generated == generated[q.rid] + 1, "the others each emit one token"


def test_the_last_running_request_is_never_retracted():
    rank, reqs = _crowded()
    retractions = 0
    for i in range(200):
        order = [r.req for r in rank.running]
        rank.run_pass(i)
        waiting = [getattr(w, "req", w) for w in rank.waiting]
        gone = [q for q in order if q in waiting]
        retractions += len(gone)
        assert len(gone) < max(len(order), 1), "a retraction always leaves one request running"
        if all(q.generated == 16 for q in reqs):
            break
    assert retractions > 0
    assert [q.generated for q in reqs] == [16] * 4, "everything finishes"


def test_a_request_that_emits_its_last_token_leaves_the_running_list():
    rank = sglang_rank(num_blocks=1000, page=1)
    q = sglang_request(1, 10, 3)
    rank.enqueue(q)
    for i in range(3):
        rank.run_pass(i)
        assert (q.generated, bool(rank.running)) == (i + 1, i < 2)
