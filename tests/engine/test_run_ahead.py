"""A worker that runs a lone vLLM rank ahead (decode-only passes back to back, taken a stretch
at a time up to a horizon) ends every pass and every request exactly where one pass at a time
does, whatever the horizon and however the decode time moves with the batch's KV."""

from __future__ import annotations

from array import array

from hypothesis import given, settings
from hypothesis import strategies as st

from servesim.engine.rank import LONG_SUMS, DecodePass, DecodeRun, RankConfig, running_sums
from servesim.engine.request import EngineRequest
from servesim.engine.vllm.core import VllmRank
from servesim.engine.worker import Worker
from servesim.perf.timing import FixedTiming, PolynomialTiming
from servesim.traffic.workload import GENERATED_BASE, expand_hash_ids


class Shrinking:
    """Decode passes that get shorter as the batch's KV grows: a stretch's first pass is its
    longest, so a stretch sized by it falls short of the horizon."""

    def prefill(self, batch: int, mean_isl: int, mean_prefix: int) -> float:
        return 7.0

    def decode(self, batch: int, active_kv_tokens: int, mean_ctx: int, total_kv_tokens: int) -> float:
        return max(0.5, 30.0 - active_kv_tokens / 16)


TIMINGS = {"fixed": lambda: FixedTiming(10, 3), "polynomial": PolynomialTiming, "shrinking": Shrinking}


def _worker(timing: str, blocks: int) -> Worker:
    config = RankConfig(block_size=4, num_blocks=blocks, max_batched_tokens=64)
    return Worker(0, [VllmRank(config, TIMINGS[timing](), lazy_decode=True)], 0)


def _requests(shapes: list[tuple[int, int]]) -> list[EngineRequest]:
    return [EngineRequest(rid, expand_hash_ids([1000 * rid + i for i in range(-(-prompt // 4))], 4, prompt),
                          prompt, output, GENERATED_BASE + 10_000 * rid)
            for rid, (prompt, output) in enumerate(shapes)]


def _replay(worker: Worker, requests: list[EngineRequest], spans: list[float]) -> list[tuple[float, int]]:
    """Run `worker` to the end; each pass may run ahead to the next of `spans` after its start
    (none: one pass at a time). Returns (end, request id) of every completion."""
    for request in requests:
        worker.enqueue(0, request)
    now, finished, step = 0.0, [], 0
    while worker.holds_requests():
        horizon = now + spans[step % len(spans)] if spans else 0.0
        outcome = worker.start_pass(now, horizon, through_finishes=True, run_on=bool(spans))
        for end, done in outcome.early_finishes:
            finished += [(end, r.rid) for r in done]
        finished += [(outcome.end_ms, r.rid) for _, result in outcome.ranks for r in result.finished]
        worker.finish_pass()
        now, step = outcome.end_ms, step + 1
    return finished


@settings(max_examples=60, deadline=None)
@given(timing=st.sampled_from(sorted(TIMINGS)), blocks=st.sampled_from([12, 40, 400]),
       shapes=st.lists(st.tuples(st.integers(1, 40), st.integers(1, 300)), min_size=1, max_size=6),
       spans=st.lists(st.sampled_from([1.0, 25.0, 400.0, 5000.0, 1e9]), min_size=1, max_size=4))
def test_running_ahead_changes_no_pass_and_no_request(timing: str, blocks: int, shapes: list[tuple[int, int]],
                                                       spans: list[float]) -> None:
    plain, fast = _worker(timing, blocks), _worker(timing, blocks)
    one_by_one, ahead = _requests(shapes), _requests(shapes)
    assert _replay(fast, ahead, spans) == _replay(plain, one_by_one, [])
    assert fast.pass_ends == plain.pass_ends
    assert fast.busy_ms == plain.busy_ms
    assert [(r.generated, r.token_spans) for r in ahead] == [(r.generated, r.token_spans) for r in one_by_one]


@given(start=st.floats(0, 1e7), terms=st.lists(st.floats(0, 1e4) | st.sampled_from([0.1, 1 / 3, 35.123456789]),
                                                 min_size=LONG_SUMS - 3, max_size=LONG_SUMS + 3))
def test_running_sums_add_left_to_right_however_long(start: float, terms: list[float]) -> None:
    expected = [start]
    for term in terms:
        expected.append(expected[-1] + term)
    sums = running_sums(start, terms)
    assert [float(s) for s in sums] == expected
    assert [float(s) for s in running_sums(start, array("d", terms))] == expected  # as `decode_series` gives them
    ends = array("d")
    run = DecodeRun(start, start)
    run.add_many(sums, len(terms), DecodePass(terms[-1], 1, []), ends)
    assert ends.tolist() == expected[1:]
    assert (run.last_start_ms, run.end_ms) == (expected[-2], expected[-1])
    assert type(run.end_ms) is float


@settings(max_examples=40, deadline=None)
@given(timing=st.sampled_from(sorted(TIMINGS)), blocks=st.sampled_from([12, 40, 400]),
       shapes=st.lists(st.tuples(st.integers(1, 40), st.integers(1, 60)), min_size=1, max_size=6))
def test_a_lone_rank_pass_is_the_general_pass(timing: str, blocks: int, shapes: list[tuple[int, int]]) -> None:
    """`Worker._lone_pass` (a worker with one rank) does what the loop over ranks does."""
    lone, general = _worker(timing, blocks), _worker(timing, blocks)
    general._lone = None  # every pass through `_one_pass`
    by_lone, by_loop = _requests(shapes), _requests(shapes)
    assert _replay(lone, by_lone, []) == _replay(general, by_loop, [])
    assert lone.pass_ends == general.pass_ends
    assert lone.busy_ms == general.busy_ms
    assert [(r.generated, r.token_spans) for r in by_lone] == [(r.generated, r.token_spans) for r in by_loop]
