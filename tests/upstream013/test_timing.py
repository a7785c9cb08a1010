"""0.13's pass convention (`compat: upstream-0.13`, docs/timing.md), checked against AISimulate
0.13's recorded runs (`tests/cases/upstream013/timing.json`, recorded by
`benchmarks/record_013_timing.py`; the reference is never run here): fixed, polynomial and AIC
timing; vLLM, SGLang and TensorRT-LLM; aggregated and disaggregated; prompts in one pass or in
chunks; passes that only prefill, only decode, or both."""

from __future__ import annotations

import copy
import os
from pathlib import Path

import pytest
from cases013 import AIC_REL, assert_reports_match, recorded, run, upstream013, with_trace

CASES_013 = recorded("timing")["cases"]
RECORD_FIELDS = ("input_length", "output_length", "first_admit_ms", "first_token_ms", "last_token_ms", "ttft_ms",
                 "ttst_ms", "itl_ms", "e2e_latency_ms", "reused_input_tokens", "admission_count")
UPSTREAM_SYSTEMS = Path(os.environ.get("SERVESIM_REFERENCE_HOME", Path.home() / ".cache" / "servesim-reference")) / \
    "dynamo" / "lib" / "python3.11" / "site-packages" / "aisimulate_core" / "systems"
EXACT = sorted(n for n, c in CASES_013.items() if not c["aic"])
AIC = sorted(n for n, c in CASES_013.items() if c["aic"])


def test_the_cases_cover_the_convention() -> None:
    """Every backend, both modes, all three timing kinds, chunked prompts."""
    names = set(CASES_013)
    for part in ("vllm-", "sglang-", "trtllm-", "-pd", "-fixed-", "-poly-", "-aic-", "chunked"):
        assert any(part in n for n in names), part
    assert len(AIC) >= 5


@pytest.mark.parametrize("name", EXACT)
def test_fixed_and_polynomial_runs_match_013_field_for_field(name: str, tmp_path: Path) -> None:
    """Every summary field both report and every request's admission and token times equal 0.13's."""
    case = CASES_013[name]
    ours = run(with_trace(case["config"], case["trace"], tmp_path))
    assert_reports_match(ours, case["report"], RECORD_FIELDS)


@pytest.mark.skipif(not UPSTREAM_SYSTEMS.is_dir(), reason="0.13's AIC database not installed")
@pytest.mark.parametrize("name", AIC)
def test_aic_runs_match_013_on_its_database(name: str, tmp_path: Path) -> None:
    """AIC-timed on 0.13's database: every field within 0.5 % (in fact within a few ns: servesim
    rounds a decode step to whole nanoseconds before adding the Q/K-norm latency)."""
    case = CASES_013[name]
    ours = run(with_trace(case["config"], case["trace"], tmp_path), aic_systems_path=str(UPSTREAM_SYSTEMS))
    assert_reports_match(ours, case["report"], RECORD_FIELDS, rel=AIC_REL)


@pytest.mark.parametrize("name", ["vllm-fixed-lone", "vllm-fixed-chunked", "sglang-fixed-mixed"])
def test_the_reference_convention_is_one_decode_later(name: str, tmp_path: Path) -> None:
    """Under `compat: reference` (0.1.0.dev2) a prompt's completion is charged a decode phase and
    its first token comes at the end of it: 5 ms (`decode_ms`) later than in 0.13."""
    case = CASES_013[name]
    ours = run(with_trace(case["config"], case["trace"], tmp_path), compat="reference")
    first = min(case["report"]["per_request"], key=lambda r: r["arrival_time_ms"])
    mine = min(ours["per_request"], key=lambda r: r["arrival_time_ms"])
    assert mine["ttft_ms"] - first["ttft_ms"] == 5.0


@pytest.mark.parametrize("architecture, layers, heads, kv_heads, tp, mem_bw, measured", [
    ("Qwen3ForCausalLM", 36, 32, 8, 1, 4.8e12, 0.9508224),  # Qwen3-8B, H200 (vLLM, SGLang, TRT-LLM)
    ("Qwen3ForCausalLM", 36, 32, 8, 1, 3.35e12, 0.9510052298507465),  # Qwen3-8B, H100
    ("Qwen3ForCausalLM", 36, 32, 8, 1, 7.7e12, 0.9506633142857145),  # Qwen3-8B, B200
    ("Qwen3ForCausalLM", 64, 64, 8, 1, 4.8e12, 1.69095168),  # Qwen3-32B, H200
    ("Qwen3ForCausalLM", 64, 64, 8, 2, 4.8e12, 1.69027584),  # Qwen3-32B, H200, TP 2
    ("Qwen3ForCausalLM", 28, 16, 8, 1, 4.8e12, 0.73939712),  # Qwen3-0.6B and -1.7B, H200
    ("LlamaForCausalLM", 32, 32, 8, 1, 4.8e12, 0.0),  # Llama-3.1-8B: no Q/K norms
])
def test_qk_norm_latency_is_what_013_adds(architecture: str, layers: int, heads: int, kv_heads: int, tp: int,
                                          mem_bw: float, measured: float) -> None:
    """0.13's `generation_attention` minus AIC's, per decode step, as measured on 0.13 (the same
    for every batch and context probed: 1, 4 and 8 sequences, 100 to 4000 tokens)."""
    from servesim.perf.upstream013 import qk_norm_ms

    assert qk_norm_ms(architecture, layers, heads, kv_heads, tp, mem_bw) == pytest.approx(measured, rel=1e-12, abs=0)


class _Steps:
    """A decode model answering its arguments, to see what the wrapper asks."""

    def prefill(self, batch: int, mean_isl: int, mean_prefix: int) -> float:
        return 7.0

    def decode(self, batch: int, active_kv_tokens: int, mean_ctx: int, total_kv_tokens: int) -> float:
        return mean_ctx / 1000.0


def test_decode_steps_are_asked_at_one_token_less_and_carry_the_norms() -> None:
    from servesim.perf.upstream013 import Upstream013Decode

    model = Upstream013Decode(_Steps(), 0.5)  # type: ignore[arg-type]
    assert model.prefill(1, 100, 0) == 7.0
    assert model.decode(2, 602, 301, 10_000) == pytest.approx(0.3 + 0.5)
    series = model.decode_series(2, range(602, 610, 2), 10_000)
    assert list(series) == [model.decode(2, a, a // 2, 10_000) for a in range(602, 610, 2)]


def test_the_switch_is_one_config_key_and_one_flag(tmp_path: Path) -> None:
    """`--compat upstream-0.13` on the CLI (before or after the command) is the config key."""
    import json
    import subprocess
    import sys

    import yaml

    case = CASES_013["vllm-fixed-burst"]
    config = with_trace(case["config"], case["trace"], tmp_path)
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")}
    outputs = []
    for argv in (["--compat", "upstream-0.13", "predict"], ["predict", "--compat", "upstream-0.13"]):
        out = tmp_path / f"out{len(outputs)}"
        done = subprocess.run([sys.executable, "-m", "servesim", *argv, "-c", str(tmp_path / "config.yaml"),
                               "--format", "json", "--output-dir", str(out)], capture_output=True, text=True, env=env)
        assert done.returncode == 0, done.stderr
        outputs.append(json.loads((out / "prediction.json").read_text()))
    for report in outputs:
        assert report["provenance"]["compat"] == "upstream-0.13"
        assert report["mean_ttft_ms"] == case["report"]["mean_ttft_ms"]


def test_alike_requests_leave_the_steady_lane_under_the_switch() -> None:
    """The steady lane replays 0.1.0.dev2's pass arithmetic: a run it takes by default (requests
    all alike, open loop, a pool that cannot bind) takes the general engine under the switch."""
    from servesim import simulate
    from servesim.config.load import parse_config

    config = copy.deepcopy(recorded("power")["cases"]["fixed-timing"]["config"])
    config["traffic"].update(load={"type": "poisson", "requests_per_second": 20, "seed": 3}, stop={"requests": 200})
    config["engine"]["workers"]["aggregated"].update(scheduler={"max_sequences": 16},
                                                     kv_cache={"capacity": {"type": "fixed", "blocks": 5000}})
    default = simulate(parse_config(config))
    assert default.provenance["replay_loop"] == "steady lane"
    ours = simulate(parse_config(upstream013(config)))
    assert ours.provenance["replay_loop"] != "steady lane"
    assert ours.to_dict()["mean_ttft_ms"] < default.to_dict()["mean_ttft_ms"] - 2.0


@pytest.mark.parametrize("key, value", [("mixed_pass", "fused"), ("frontend_ms", 2.0), ("dp_sync_ms", 0.5)])
def test_fidelity_keys_contradict_the_switch(key: str, value: object) -> None:
    """0.13 sums mixed passes and has no front-end latency or DP sync: asking for them under the
    switch is refused (exit 2) naming both keys, as under `compat: reference`."""
    from servesim.config.load import parse_config
    from servesim.errors import ConfigError

    config = upstream013(recorded("power")["cases"]["aic-no-power-data"]["config"])
    config["engine"]["workers"]["aggregated"].setdefault("timing", {"type": "default"})[key] = value
    with pytest.raises(ConfigError, match=rf"timing\.{key}: .* contradicts compat: 'upstream-0.13'"):
        parse_config(config)
