"""Engine knobs the reference's YAML does not expose, as servesim config extensions: speculative
decoding (`workers.<role>.speculative`, every backend) and vLLM FIFO preemption
(`scheduler.preemption_mode`).

Parity: engine case 08's direct specs and random speculative-decoding specs under KV pressure
(case 09, generated and run by `benchmarks/difftest_engine.py`) must equal the reference's reports
on every per-request and summary field.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from direct_specs import assert_matches_reference, run_spec

from servesim import simulate
from servesim.engine.rank import RankConfig, SpeculativeSettings
from servesim.engine.request import EngineRequest
from servesim.engine.sglang.core import SglangRank
from servesim.perf.timing import FixedTiming
from servesim.engine.factory import make_rank
from servesim.engine.vllm.core import VllmRank
from servesim.errors import ConfigError, RunError
from servesim.traffic.workload import GENERATED_BASE

CASES = Path(__file__).parent.parent / "cases" / "engine"
KNOBS = CASES / "08-direct-runtime-knobs"
RANDOM = CASES / "09-spec-decode-random"
LIVELOCK = CASES / "12-vllm-fifo-spec-livelock"
KNOB_NAMES = ["spec_decode_rates_1_1", "spec_decode_rates_1_0", "spec_decode_rates_half_seed42",
              "spec_decode_nextn3_seed42", "spec_decode_nextn3_seed7", "spec_decode_nextn3_dp2",
              "vllm_fifo_preemption", "ns_rounding"]


@pytest.mark.parametrize("path", [KNOBS / f"spec_{n}.json" for n in KNOB_NAMES]
                         + sorted(RANDOM.glob("spec_*.json")), ids=lambda p: p.stem[5:])
def test_direct_spec_matches_reference(path: Path) -> None:
    expected = json.loads(path.with_name("report_" + path.name.removeprefix("spec_")).read_text())
    assert_matches_reference(run_spec(path, unservable="fail"), expected)


def test_random_cases_exercise_preemption_and_rejection() -> None:
    """The random cases are worth their place: they preempt, reuse and reject."""
    records = [r for p in RANDOM.glob("report_*.json") for r in json.loads(p.read_text())["per_request"]]
    assert sum(r["readmission_count"] for r in records) > 100
    assert sum(r["reused_input_tokens"] for r in records) > 500
    assert any(r["terminal_status"] == "rejected" for r in records)


def test_a_fifo_livelock_under_a_time_cap_runs_to_the_cap_like_the_reference() -> None:
    """FIFO preemption with drafts: the oldest request preempts itself for its draft blocks while
    the readmitted one ends each pass a token short of decoding — for ever, the clock advancing.
    Under a cap the reference ends with every request incomplete; so does servesim."""
    expected = json.loads((LIVELOCK / "report_capped.json").read_text())
    report = run_spec(LIVELOCK / "spec_capped.json")
    assert report["incomplete_requests"] == 10
    assert_matches_reference(report, expected)


def test_a_fifo_livelock_without_a_cap_fails_where_the_reference_spins() -> None:
    with pytest.raises(RunError, match="evicts and readmits its 10 requests for ever"):
        run_spec(LIVELOCK / "spec_uncapped.json")


# -- the burst mechanics, pass by pass -----------------------------------------------------


def spec_rank(rates: tuple[float, ...], num_blocks: int = 1000, block_size: int = 16,
              backend: str = "vllm") -> VllmRank:
    config = RankConfig(block_size=block_size, num_blocks=num_blocks, backend=backend,
                        speculative=SpeculativeSettings(nextn=len(rates), acceptance_rates=rates))
    rank = make_rank(config, FixedTiming(10, 5))
    assert isinstance(rank, VllmRank)
    return rank


def fresh(rid: int, n: int, output: int, values: list[int] | None = None) -> EngineRequest:
    runs = [(v, 1) for v in values] if values is not None else [(10_000_000 * (rid + 1), -n)]
    return EngineRequest(rid, runs, n, output, GENERATED_BASE + 100_000 * rid)


@pytest.mark.parametrize(("rates", "per_pass"), [((1.0, 1.0), 3), ((1.0, 0.0), 2), ((0.0,), 1)])
def test_certain_acceptance_gives_fixed_bursts(rates: tuple[float, ...], per_pass: int) -> None:
    rank = spec_rank(rates)
    r = fresh(0, 50, 10)
    rank.enqueue(r)
    counts = []
    for p in range(20):
        before = r.generated
        result = rank.run_pass(p)
        counts.append(r.generated - before)
        assert result.decode_ms == 5.0, "one decode call per pass whatever the burst"
        if result.finished:
            break
    assert counts == [per_pass] * (10 // per_pass) + ([10 % per_pass] if 10 % per_pass else [])
    assert r.token_spans[-1] == len(counts), "all tokens of a burst share their pass"
    assert rank.pool.active_blocks == 0


def test_sglang_bursts_and_returns_the_spare_pages() -> None:
    config = RankConfig(block_size=4, num_blocks=100, backend="sglang",
                        speculative=SpeculativeSettings(nextn=2, acceptance_rates=(1.0, 1.0)))
    rank = SglangRank(config, FixedTiming(10, 5))
    r = fresh(0, 10, 8)
    rank.enqueue(r)
    counts = []
    for p in range(10):  # bounded: a stuck rank fails the assertion instead of hanging
        if not rank.has_work():
            break
        before = r.generated
        rank.run_pass(p)
        rank.check()
        counts.append(r.generated - before)
    assert counts == [3, 3, 2]
    assert rank.pool.free_pages * 4 + rank.pool.evictable_tokens == 400


def test_burst_leaves_one_dangling_token_and_only_the_blocks_it_uses() -> None:
    rank = spec_rank((1.0, 1.0, 1.0), block_size=4)
    r = fresh(0, 8, 20)
    rank.enqueue(r)
    for p in range(3):
        rank.run_pass(p)
        assert r.computed == r.length - 1
        assert len(r.lease) == -(-r.computed // 4), "the burst's spare room is given back"
        rank.pool.check()


def test_vllm_prefix_hits_lose_a_block_and_trtllm_hits_do_not() -> None:
    values = list(range(100, 148))
    for backend, reused in (("vllm", 16), ("trtllm", 32)):
        rank = spec_rank((0.0,), block_size=16, backend=backend)
        first = fresh(0, 48, 1, values)
        rank.enqueue(first)
        rank.run_pass(0)
        second = fresh(1, 40, 1, values[:40])
        rank.enqueue(second)
        admitted = rank.run_pass(1).admitted
        assert admitted == [(second, reused)], backend


def test_fifo_preemption_evicts_the_oldest_request() -> None:
    report = run_spec(KNOBS / "spec_vllm_fifo_preemption.json")
    records = {r["session_id"]: r for r in report["per_request"]}
    assert records["r0"]["readmission_count"] == 1 and records["r1"]["readmission_count"] == 0


def test_same_seed_same_bursts_and_seed_changes_them() -> None:
    def run(seed: int) -> list[float]:
        config = {"engine": {"model": "m", "hardware": "h200_sxm", "context_length": 4096, "workers": {"aggregated": {
            "timing": {"type": "fixed", "prefill_ms": 10, "decode_ms": 5},
            "kv_cache": {"capacity": {"type": "fixed", "blocks": 500}},
            "speculative": {"num_speculative_tokens": 3, "acceptance_rates": [0.6, 0.5, 0.5], "seed": seed}}}},
            "traffic": {"source": {"type": "synthetic", "input_tokens": 50, "output_tokens": 40},
                        "load": {"type": "concurrency", "concurrency": 4}, "stop": {"requests": 12}}}
        return [r["e2e_latency_ms"] for r in simulate(config, capture_per_request=True).to_dict()["per_request"]]

    assert run(1) == run(1)
    assert run(1) != run(2)


@pytest.mark.parametrize(("backend", "key", "value"), [
    ("sglang", "preemption_mode", "fifo"),
    ("trtllm", "preemption_mode", "lifo"),
])
def test_extensions_are_rejected_where_they_do_not_apply(backend: str, key: str, value: str) -> None:
    config = {"engine": {"model": "m", "hardware": "h200_sxm", "backend": backend,
                         "workers": {"aggregated": {"scheduler": {key: value}}}},
              "traffic": {"source": {"type": "synthetic"}, "load": {"type": "concurrency"}}}
    with pytest.raises(ConfigError, match=f"scheduler.{key}: only allowed when backend is 'vllm'"):
        simulate(config)


def test_speculative_rejects_out_of_range_settings() -> None:
    for bad in ({"num_speculative_tokens": 0}, {"num_speculative_tokens": 6},
                {"num_speculative_tokens": 2, "acceptance_rates": [1.5]}):
        config = {"engine": {"model": "m", "hardware": "h200_sxm",
                             "workers": {"aggregated": {"speculative": bad}}},
                  "traffic": {"source": {"type": "synthetic"}, "load": {"type": "concurrency"}}}
        with pytest.raises(ConfigError, match="speculative"):
            simulate(config)


@pytest.mark.parametrize("backend", ["vllm", "sglang"])
def test_a_request_outgrowing_the_pool_with_its_burst_is_rejected_not_looped(backend: str) -> None:
    """The reference preempts (vLLM) or stalls (SGLang) for ever; servesim rejects with a reason."""
    config = {"engine": {"model": "m", "hardware": "h200_sxm", "backend": backend, "workers": {"aggregated": {
        "timing": {"type": "fixed", "prefill_ms": 10, "decode_ms": 5},
        "kv_cache": {"block_size": 16, "capacity": {"type": "fixed", "blocks": 5}},
        "speculative": {"num_speculative_tokens": 3, "acceptance_rates": [1, 1, 1]}}}},
        "traffic": {"source": {"type": "synthetic", "input_tokens": 50, "output_tokens": 40},
                    "load": {"type": "concurrency", "concurrency": 1}, "stop": {"requests": 2}}}
    if backend == "vllm":
        config["engine"]["context_length"] = 4096
    report = simulate(config, capture_per_request=True).to_dict()
    assert [r["terminal_status"] for r in report["per_request"]] == ["rejected", "rejected"]
    assert all(r["output_length"] < 40 for r in report["per_request"])
    if backend == "vllm":  # admitted, then rejected once its burst no longer fits (SGLang: at admission)
        assert all(r["output_length"] > 0 for r in report["per_request"])
