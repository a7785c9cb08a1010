"""Forward-pass metrics (FPM): what a rank publishes about each pass, for scaling policies.

Both schedulers build their record here, from what they scheduled and what still waits, so
the definitions live in one place.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from servesim.engine.request import EngineRequest


@dataclass(slots=True, eq=False, repr=False)
class ForwardPassMetrics:
    """One rank's forward-pass metrics (FPM) for one pass, as Dynamo's planner consumes them.

    Scheduled prefills are the requests with prompt tokens computed this pass; scheduled
    decodes those with only generated tokens to compute; queued prefills are waiting requests
    that never started; queued decodes are preempted requests waiting to resume. Lengths are
    sequence lengths at scheduling time; variances are population variances.
    """

    num_prefill_requests: int = 0
    sum_prefill_tokens: int = 0
    var_prefill_length: float = 0.0
    sum_prefill_kv_tokens: int = 0
    num_decode_requests: int = 0
    sum_decode_kv_tokens: int = 0
    var_decode_kv_tokens: float = 0.0
    num_queued_prefill: int = 0
    sum_queued_prefill_tokens: int = 0
    var_queued_prefill_length: float = 0.0
    num_queued_decode: int = 0
    sum_queued_decode_kv_tokens: int = 0
    var_queued_decode_kv_tokens: float = 0.0
    wall_time_secs: float = 0.0
    """The worker's pass duration (the DP barrier), filled in by the worker."""


def population_variance(count: int, total: float, total_squares: float) -> float:
    """Variance of `count` values from their sum and sum of squares (0 when count < 2)."""
    if count < 2:
        return 0.0
    mean = total / count
    return max(0.0, total_squares / count - mean * mean)


def _variance_of(values: list[int]) -> float:
    return population_variance(len(values), sum(values), sum(x * x for x in values))


def _queues(m: ForwardPassMetrics, fresh: list[int], resumed: list[int]) -> ForwardPassMetrics:
    """Fill the queue fields: prompt lengths of fresh waiting requests, sequence lengths of
    preempted (retracted) ones."""
    m.num_queued_prefill, m.sum_queued_prefill_tokens = len(fresh), sum(fresh)
    m.var_queued_prefill_length = _variance_of(fresh)
    m.num_queued_decode, m.sum_queued_decode_kv_tokens = len(resumed), sum(resumed)
    m.var_queued_decode_kv_tokens = _variance_of(resumed)
    return m


def vllm_metrics(cohort: tuple[int, int, int], batch: Mapping[EngineRequest, tuple[int, int, int]],
                 waiting: Iterable[EngineRequest]) -> ForwardPassMetrics:
    """A vLLM pass: the decode cohort (size, Σ length, Σ length²), the explicitly scheduled
    requests (request → (tokens, prompt end or −1 when decoding, cached prompt tokens)) and the
    waiting queue."""
    m = ForwardPassMetrics()
    n_dec, dec_sum, dec_sq = cohort
    pre_sum = pre_sq = 0
    for request, (tokens, isl, prefix) in batch.items():
        if isl >= 0:
            m.num_prefill_requests += 1
            m.sum_prefill_tokens += tokens
            m.sum_prefill_kv_tokens += prefix
            pre_sum += request.prompt_len
            pre_sq += request.prompt_len * request.prompt_len
        elif request.generated < request.max_output:
            length = request.length
            n_dec += 1
            dec_sum += length
            dec_sq += length * length
    m.var_prefill_length = population_variance(m.num_prefill_requests, pre_sum, pre_sq)
    m.num_decode_requests, m.sum_decode_kv_tokens = n_dec, dec_sum
    m.var_decode_kv_tokens = population_variance(n_dec, dec_sum, dec_sq)
    waiting = list(waiting)
    return _queues(m, [r.prompt_len for r in waiting if not r.preempted],
                   [r.length for r in waiting if r.preempted])


def sglang_metrics(chunks: list[tuple[int, int, int]], decode_lengths: list[int],
                   waiting: list[tuple[EngineRequest, int]]) -> ForwardPassMetrics:
    """An SGLang pass: its prefill chunks (prompt length, chunk end, reused tokens), the lengths
    of the decoding requests before their token, and the waiting queue after the pass
    (request, known length)."""
    m = ForwardPassMetrics()
    prompts = [prompt for prompt, _, _ in chunks]
    m.num_prefill_requests = len(chunks)
    m.sum_prefill_tokens = sum(end - reused for _, end, reused in chunks)
    m.sum_prefill_kv_tokens = sum(reused for _, _, reused in chunks)
    m.var_prefill_length = _variance_of(prompts)
    m.num_decode_requests, m.sum_decode_kv_tokens = len(decode_lengths), sum(decode_lengths)
    m.var_decode_kv_tokens = _variance_of(decode_lengths)
    return _queues(m, [r.prompt_len for r, _ in waiting if not r.preempted],
                   [length for r, length in waiting if r.preempted])
