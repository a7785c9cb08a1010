"""`PassPlan` keeps its prompt-chunk sums as requests are scheduled and preempted: they always
equal the sums over the batch it holds."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from servesim.engine.vllm.plan import PassPlan
from servesim.engine.request import EngineRequest
from servesim.traffic.workload import GENERATED_BASE, expand_hash_ids


def _request(rid: int, prompt: int) -> EngineRequest:
    return EngineRequest(rid, expand_hash_ids(list(range(-(-prompt // 4))), 4, prompt), prompt, 8,
                         GENERATED_BASE + 100 * rid)


def _from_batch(plan: PassPlan) -> tuple[int, int, int]:
    chunks = [(isl, before) for _tokens, isl, before in plan.batch.values() if isl >= 0]
    if not chunks:
        return 0, 0, 0
    return len(chunks), sum(i for i, _ in chunks) // len(chunks), sum(b for _, b in chunks) // len(chunks)


@given(steps=st.lists(st.tuples(st.integers(1, 200), st.integers(0, 220), st.integers(1, 64), st.booleans()),
                      min_size=1, max_size=12))
def test_prompt_chunk_sums_follow_the_batch(steps: list[tuple[int, int, int, bool]]) -> None:
    plan = PassPlan(10_000)
    scheduled: list[EngineRequest] = []
    for rid, (prompt, before, tokens, preempt) in enumerate(steps):
        if preempt and scheduled:
            plan.unschedule(scheduled.pop(0))
        else:
            request = _request(rid, prompt)
            plan.schedule(request, before, tokens)
            scheduled.append(request)
        assert plan.prefill_batch() == _from_batch(plan)
