"""`timing.dp_sync_ms`: the per-pass cost of a DP worker's step synchronisation."""

from __future__ import annotations

import numpy as np
import pytest

from servesim import simulate
from servesim.build import lower
from servesim.config import parse_config
from servesim.engine.pass_time import MixedPassTiming
from servesim.errors import ConfigError
from servesim.build.apply import dp_sync_ms
from servesim.studies.calibrate import calibrate
from servesim.perf.calibration import Calibration
from servesim.perf.dpsync import DEFAULT_MS, dp_synced
from servesim.studies.validate import simulated_latencies
from simulated_runs import measured_from

MOE = "Qwen/Qwen3-30B-A3B"
DENSE = "Qwen/Qwen3-8B"


def _config(timing: dict, *, model: str = MOE, dp: int = 2, backend: str = "vllm", requests: int = 24,
            rate: float = 12.0, same_time: bool = False) -> dict:
    parallelism = {"attention_data": dp, "moe_expert": dp} if model == MOE and dp > 1 else {"attention_data": dp}
    worker = {"parallelism": parallelism, "scheduler": {"max_batched_tokens": 2048, "max_sequences": 32},
              "kv_cache": {"block_size": 16}, "timing": timing}
    load = {"type": "constant_rate", "requests_per_second": 1e6 if same_time else rate}
    return {"engine": {"model": model, "hardware": "h200_sxm", "backend": backend, "workers": {"aggregated": worker}},
            "traffic": {"source": {"type": "synthetic", "input_tokens": 700, "output_tokens": 40},
                        "load": load, "stop": {"requests": requests}}}


def _sync(config: dict) -> float:
    parsed = parse_config(config)
    return dp_sync_ms(parsed.engine, parsed.engine.workers.aggregated)


def test_the_key_parses_and_bad_values_name_it():
    assert _sync(_config({"type": "roofline", "dp_sync_ms": 2.5})) == 2.5
    assert _sync(_config({"type": "default", "dp_sync_ms": 0})) == 0.0
    for bad in (-1, "3", float("inf")):
        with pytest.raises(ConfigError, match="dp_sync_ms"):
            parse_config(_config({"type": "roofline", "dp_sync_ms": bad}))
    with pytest.raises(ConfigError, match="dp_sync_ms"):  # not a key of the reference's kinds
        parse_config(_config({"type": "fixed", "prefill_ms": 5, "decode_ms": 5, "dp_sync_ms": 1}))


def test_defaults_per_mode_backend_and_model():
    assert _sync(_config({"type": "roofline"})) == 0.0  # sum: the reference
    assert _sync(_config({"type": "roofline", "mixed_pass": "sum"})) == 0.0
    assert _sync(_config({"type": "roofline", "mixed_pass": "fused"})) == DEFAULT_MS == 3.0
    assert _sync(_config({"type": "roofline", "mixed_pass": "fused"}, dp=1)) == 0.0
    # vLLM runs a dense model's DP ranks as independent engines; other backends are unmeasured
    assert _sync(_config({"type": "roofline", "mixed_pass": "fused"}, model=DENSE)) == 0.0
    assert _sync(_config({"type": "roofline", "mixed_pass": "fused"}, backend="sglang")) == 0.0
    # an explicit value wins in either mode, and means nothing without attention DP
    assert _sync(_config({"type": "roofline", "dp_sync_ms": 1.5})) == 1.5
    assert _sync(_config({"type": "roofline", "mixed_pass": "fused", "dp_sync_ms": 0})) == 0.0
    assert _sync(_config({"type": "roofline", "mixed_pass": "fused", "dp_sync_ms": 4}, dp=1)) == 0.0


def test_every_pass_of_the_role_pays_it_once():
    plain = lower(parse_config(_config({"type": "roofline", "mixed_pass": "fused", "dp_sync_ms": 0}))).pools[0].timing
    synced = lower(parse_config(_config({"type": "roofline", "mixed_pass": "fused"}))).pools[0].timing
    assert isinstance(plain, MixedPassTiming) and isinstance(synced, MixedPassTiming)
    assert synced.prefill(2, 900, 100) == pytest.approx(plain.prefill(2, 900, 100) + 3.0, abs=1e-6)
    assert synced.decode(16, 16 * 800, 800, 10**6) == pytest.approx(plain.decode(16, 16 * 800, 800, 10**6) + 3.0,
                                                                    abs=1e-6)
    args = (1, 600, 0, 12, 12 * 900, 900, 10**6)
    assert synced.mixed(*args) == pytest.approx(plain.mixed(*args) + 3.0, abs=1e-6)  # one forward, one sync
    # sum mode has no mixed pass of its own: a prefill pass plus a decode pass, each paying it
    summed = lower(parse_config(_config({"type": "roofline", "mixed_pass": "sum", "dp_sync_ms": 3.0}))).pools[0].timing
    assert not isinstance(summed, MixedPassTiming)
    assert dp_synced(plain, 2.0).decode(1, 500, 500, 10**6) == pytest.approx(plain.decode(1, 500, 500, 10**6) + 2.0,
                                                                             abs=1e-6)


def test_a_dp_worker_waits_for_its_slowest_rank_plus_the_sync():
    # all requests at once: the same passes with and without the sync, each longer by exactly s
    base = {"type": "roofline", "mixed_pass": "fused", "frontend_ms": 0}
    a = simulate(_config({**base, "dp_sync_ms": 0}, same_time=True), capture_per_request=True).per_request
    b = simulate(_config({**base, "dp_sync_ms": 2.0}, same_time=True), capture_per_request=True).per_request
    for x, y in zip(a, b, strict=True):
        passes = (y["ttft_ms"] - x["ttft_ms"]) / 2.0  # the passes up to its first token, each 2 ms longer
        assert round(passes) >= 1 and passes == pytest.approx(round(passes), abs=1e-6)
        tpot_x = (x["last_token_ms"] - x["first_token_ms"]) / (x["output_length"] - 1)
        tpot_y = (y["last_token_ms"] - y["first_token_ms"]) / (y["output_length"] - 1)
        assert tpot_y == pytest.approx(tpot_x + 2.0, abs=1e-6)


def test_no_effect_without_attention_dp():
    for timing in ({"type": "roofline", "mixed_pass": "fused"}, {"type": "roofline"}):
        a = simulate(_config(timing, dp=1, model=DENSE)).to_dict()
        b = simulate(_config({**timing, "dp_sync_ms": 5.0}, dp=1, model=DENSE)).to_dict()
        for report in (a, b):
            for key in ("wall_time_ms", "processed_tokens_per_s", "processed_output_tokens_per_s"):
                report.pop(key)
        assert a == b


def test_fused_dp_runs_slower_with_the_default():
    a = simulate(_config({"type": "roofline", "mixed_pass": "fused", "dp_sync_ms": 0}))
    b = simulate(_config({"type": "roofline", "mixed_pass": "fused"}))
    assert b["mean_tpot_ms"] > a["mean_tpot_ms"] + 0.5 * DEFAULT_MS


def test_the_sync_stays_outside_a_calibration(tmp_path):
    path = tmp_path / "cal.yaml"
    path.write_text(Calibration(prefill_scale=0.8, decode_scale=1.5).to_yaml())
    fused = {"type": "roofline", "mixed_pass": "fused", "dp_sync_ms": 0}
    plain = lower(parse_config(_config(fused))).pools[0].timing
    both = lower(parse_config(_config({**fused, "dp_sync_ms": 2.0, "calibration": str(path)}))).pools[0].timing
    assert both.decode(8, 8 * 700, 700, 10**6) == pytest.approx(1.5 * plain.decode(8, 8 * 700, 700, 10**6) + 2.0,
                                                                abs=1e-5)
    assert both.prefill(1, 900, 0) == pytest.approx(0.8 * plain.prefill(1, 900, 0) + 2.0, abs=1e-5)


def test_calibrate_fits_a_dp_deployment_with_the_sync(tmp_path):
    truth = tmp_path / "truth.yaml"
    truth.write_text(Calibration(decode_scale=1.25).to_yaml())
    fused = {"type": "roofline", "mixed_pass": "fused"}

    def config(timing: dict) -> dict:
        out = _config(timing, requests=40)
        out["traffic"]["source"].update(input_tokens=1500, output_tokens=80)
        out["traffic"]["load"] = {"type": "poisson", "requests_per_second": 16.0, "seed": 3}
        return out

    measured = measured_from(config({**fused, "calibration": str(truth)}))
    result = calibrate(parse_config(config(fused)), measured)
    assert result.calibration.decode_scale > 1.1  # towards the truth's slower decode
    assert max(abs(e) for e in result.after.values()) < 1.5 < 10 < abs(result.before["tpot"])
    path = tmp_path / "fitted.yaml"
    path.write_text(result.calibration.to_yaml())
    predicted = simulated_latencies(config({**fused, "calibration": str(path)}))
    assert np.mean(predicted["tpot"]) == pytest.approx(np.nanmean(measured.latencies()["tpot"]), rel=0.015)


def test_calibrate_knows_the_sync_of_the_mode_it_replays(tmp_path):
    from servesim.studies.calibrate import _Replay

    measured = measured_from(_config({"type": "roofline", "mixed_pass": "fused"}, requests=6))
    # no mixed_pass given: calibrate replays in fused mode, so the fused default applies
    assert _Replay(parse_config(_config({"type": "roofline"}, requests=6)), [measured], False, tmp_path,
                   [None]).sync_ms == DEFAULT_MS
    assert _Replay(parse_config(_config({"type": "roofline", "mixed_pass": "sum"}, requests=6)), [measured], False,
                   tmp_path, [None]).sync_ms == 0.0
