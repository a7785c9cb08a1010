"""What the schedulers ask the timing model (vLLM `engine.vllm.core`, SGLang `engine.sglang.core`):
a decode phase of n sequences is timed at n, their Σ known tokens, its floor mean and the pool's
tokens; a prefill phase at the chunk count and the floor means of the chunk ends and cached
prefixes — and not at all without a chunk that computes prompt tokens."""

from __future__ import annotations

from engine_helpers import sglang_request, vllm_request
from servesim.engine.rank import RankConfig, SglangSettings, SpeculativeSettings
from servesim.engine.sglang.core import SglangRank
from servesim.engine.vllm.core import VllmRank


class Recording:
    """A timing model that keeps every question (prefill 10 ms, decode 5 ms)."""

    def __init__(self) -> None:
        self.prefills: list[tuple] = []
        self.decodes: list[tuple] = []

    def prefill(self, batch: int, mean_isl: int, mean_prefix: int) -> float:
        self.prefills.append((batch, mean_isl, mean_prefix))
        return 10.0

    def decode(self, batch: int, active_kv_tokens: int, mean_ctx: int, total_kv_tokens: int) -> float:
        self.decodes.append((batch, active_kv_tokens, mean_ctx, total_kv_tokens))
        return 5.0


def vllm(lazy: bool, **overrides) -> tuple[VllmRank, Recording]:
    timing = Recording()
    config = RankConfig(**{"block_size": 16, "num_blocks": 100, "prefix_caching": False, **overrides})
    return VllmRank(config, timing, lazy_decode=lazy), timing


def test_vllm_decode_is_timed_on_the_known_tokens_of_every_decoder():
    for lazy in (False, True):
        rank, timing = vllm(lazy)
        for rid, n in ((1, 10), (2, 11), (3, 14)):
            rank.enqueue(vllm_request(rid, n, 5))
        rank.run_pass(0)
        assert timing.prefills == [(3, (10 + 11 + 14) // 3, 0)]
        assert timing.decodes == [(3, 35, 35 // 3, 1600)], lazy
        rank.run_pass(1)  # each now knows one more token
        assert timing.decodes[1] == (3, 38, 38 // 3, 1600), lazy
        rank.run_pass(2)
        assert timing.decodes[2] == (3, 41, 41 // 3, 1600), lazy
        assert len(timing.prefills) == 1


def test_vllm_a_pass_whose_chunks_compute_no_prompt_charges_no_prefill():
    rank, timing = vllm(False)
    rank.enqueue(vllm_request(1, 20, 3))
    for p in range(3):
        rank.run_pass(p)
    assert timing.prefills == [(1, 20, 0)]
    assert [d[0] for d in timing.decodes] == [1, 1, 1]


def test_vllm_a_decode_rank_never_charges_prefill():
    rank, timing = vllm(False, role="decode")
    r = vllm_request(1, 20, 3)
    rank.enqueue(r)
    for p in range(4):
        rank.run_pass(p)
    assert timing.prefills == []


def test_vllm_a_mid_prefill_request_does_not_decode():
    """Budget 16: a 40-token prompt takes three passes; only the last one has a decoder."""
    rank, timing = vllm(False, max_batched_tokens=16)
    rank.enqueue(vllm_request(1, 40, 3))
    for p in range(3):
        rank.run_pass(p)
    assert timing.prefills == [(1, 16, 0), (1, 32, 16), (1, 40, 32)]
    assert timing.decodes == [(1, 40, 40, 1600)]


def test_sglang_decode_and_prefill_are_timed_on_the_batch():
    timing = Recording()
    config = RankConfig(block_size=1, num_blocks=1000, prefix_caching=True, backend="sglang",
                        sglang=SglangSettings())
    rank = SglangRank(config, timing)
    for rid, n in ((1, 10), (2, 11), (3, 14)):
        rank.enqueue(sglang_request(rid, n, 5))
    rank.run_pass(0)
    assert timing.prefills == [(3, 35 // 3, 0)]
    assert timing.decodes == [(3, 35, 35 // 3, 1000)]
    rank.run_pass(1)
    assert timing.decodes[1] == (3, 38, 38 // 3, 1000) and len(timing.prefills) == 1


def test_vllm_decode_with_drafts_is_timed_on_the_known_tokens_after_each_burst():
    """Drafts always accepted (nextn 2): every step emits 3 tokens, so the second decode sees
    10 + 11 + 14 + 3 · 3 known tokens."""
    spec = SpeculativeSettings(nextn=2, acceptance_rates=(1.0, 1.0))
    rank, timing = vllm(False, speculative=spec)
    for rid, n in ((1, 10), (2, 11), (3, 14)):
        rank.enqueue(vllm_request(rid, n, 20))
    rank.run_pass(0)
    rank.run_pass(1)
    assert timing.decodes == [(3, 35, 35 // 3, 1600), (3, 44, 44 // 3, 1600)]
