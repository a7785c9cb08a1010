"""The plan of one vLLM pass (`engine.vllm.plan.PassPlan`): scheduled tokens leave the budget, a
preemption gives them back with its prompt chunk, a chunk counts only the prompt tokens it
computes (a chunk ending exactly at the prompt's end is one, a pure decode is none), the prefill
batch is timed at floor means, and a fused pass counts as decoders exactly the ready requests
that computed no prompt token in it."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from engine_helpers import vllm_request
from servesim.engine.vllm.plan import PassPlan


def test_a_prompt_chunk_ending_at_the_prompt_end_is_a_chunk():
    plan = PassPlan(100)
    r = vllm_request(1, 40, 3)
    plan.schedule(r, 24, 16)  # tokens 24..40: the last 16 of the prompt
    assert plan.budget == 84 and plan.result.scheduled_tokens == 16
    assert plan.batch[r] == (16, 40, 24)
    assert plan.prefill_batch() == (1, 40, 24)


def test_a_decode_token_right_after_the_prompt_is_no_chunk():
    plan = PassPlan(100)
    r = vllm_request(1, 40, 3)
    plan.schedule(r, 40, 1)
    assert plan.batch[r] == (1, -1, 40)
    assert plan.prefill_batch() == (0, 0, 0)


def test_a_chunk_crossing_the_prompt_end_counts_its_prompt_part():
    plan = PassPlan(100)
    r = vllm_request(1, 40, 3)
    plan.schedule(r, 39, 2)
    assert plan.batch[r] == (2, 40, 39)


def test_the_prefill_batch_is_the_floor_mean_of_the_chunks():
    plan = PassPlan(1000)
    a, b, c = vllm_request(1, 10, 2), vllm_request(2, 21, 2), vllm_request(3, 30, 2)
    plan.schedule(a, 0, 10)
    plan.schedule(b, 4, 17)
    plan.schedule(c, 30, 1)  # a decode: not a chunk
    assert plan.prefill_batch() == (2, (10 + 21) // 2, (0 + 4) // 2)


def test_a_preemption_gives_back_the_tokens_and_the_chunk():
    plan = PassPlan(100)
    a, b = vllm_request(1, 30, 2), vllm_request(2, 50, 2)
    plan.schedule(a, 0, 30)
    plan.schedule(b, 10, 40)
    plan.unschedule(a)
    assert plan.budget == 60 and plan.result.scheduled_tokens == 40
    assert plan.prefill_batch() == (1, 50, 10)
    assert plan.result.preemptions == 1
    assert a not in plan.batch


def test_a_preempted_decode_gives_back_its_token_but_no_chunk():
    plan = PassPlan(100)
    a, b = vllm_request(1, 30, 2), vllm_request(2, 50, 2)
    plan.schedule(a, 30, 1)
    plan.schedule(b, 0, 50)
    plan.unschedule(a)
    assert (plan.budget, plan.result.scheduled_tokens, plan.chunks) == (50, 50, 1)


def test_a_request_preempted_before_it_was_scheduled_only_counts_the_preemption():
    plan = PassPlan(100)
    plan.unschedule(vllm_request(1, 30, 2))
    assert (plan.budget, plan.result.scheduled_tokens, plan.result.preemptions) == (100, 0, 1)


def test_the_cohort_spends_one_token_per_member():
    plan = PassPlan(10)
    plan.schedule_cohort(4)
    assert (plan.budget, plan.result.scheduled_tokens) == (6, 4)


@given(st.lists(st.tuples(st.integers(1, 64), st.integers(0, 80), st.integers(1, 40)), min_size=1, max_size=6),
       st.data())
def test_unscheduling_everything_restores_the_empty_plan(specs, data):
    plan = PassPlan(10_000)
    requests = []
    for i, (prompt, before, tokens) in enumerate(specs):
        r = vllm_request(i + 1, prompt, 2)
        plan.schedule(r, before, tokens)
        requests.append(r)
    assert plan.budget == 10_000 - sum(t for _, _, t in specs)
    assert plan.chunks == sum(1 for p, b, _ in specs if b < p)
    for r in data.draw(st.permutations(requests)):
        plan.unschedule(r)
    assert (plan.budget, plan.result.scheduled_tokens) == (10_000, 0)
    assert (plan.chunks, plan.chunk_ends, plan.chunk_starts) == (0, 0, 0)


class Mixed:
    """A fused-pass timing that records what it was asked."""

    def __init__(self) -> None:
        self.asked: tuple = ()

    def mixed(self, *args):
        self.asked = args
        return 7.0


def test_a_fused_pass_decodes_the_ready_requests_without_a_prompt_chunk():
    plan = PassPlan(1000)
    finishing, decoding, other = vllm_request(1, 40, 3), vllm_request(2, 20, 3), vllm_request(3, 10, 3)
    plan.schedule(finishing, 24, 16)  # its prompt ends here: its first token comes from the prefill
    plan.schedule(decoding, 20, 1)
    decoding.generated = 2  # length 22
    timing = Mixed()
    assert plan.fused_ms(timing, [finishing, decoding, other], (3, 300), 5000) == 7.0
    n, total = 3 + 2, 300 + 22 + 10
    assert timing.asked == (1, 40, 24, n, total, total // n, 5000)


def test_a_fused_pass_without_decoders_is_its_prefill():
    plan = PassPlan(1000)
    r = vllm_request(1, 40, 3)
    plan.schedule(r, 0, 40)
    plan.result.prefill_ms = 12.5
    timing = Mixed()
    assert plan.fused_ms(timing, [r], (0, 0), 5000) == 12.5
    assert timing.asked == ()
