"""Calibration files, how they change a run, and `servesim calibrate` (including bad inputs)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import yaml

from servesim import simulate
from servesim.cli import main
from servesim.config import load_config, parse_config
from servesim.errors import TraceError
from servesim.studies.calibrate import calibrate, measured_kv_tokens
from servesim.engine.pass_time import MixedPassTiming
from servesim.perf.calibration import Calibration, calibrated, load_calibration
from servesim.measured import Measured
from simulated_runs import measured_from
from servesim.studies.validate import simulated_latencies

DATA = Path(__file__).resolve().parents[3] / "shared" / "data" / "llmservingsim-vllm-validation"
MODEL = "Qwen/Qwen3-8B"


def _config(timing: dict | None = None, requests: int = 40, rate: float = 8.0, capacity: dict | None = None) -> dict:
    worker = {"scheduler": {"max_batched_tokens": 2048, "max_sequences": 32},
              "kv_cache": {"block_size": 16, **({"capacity": capacity} if capacity else {})},
              "timing": timing or {"type": "roofline", "mixed_pass": "fused"}}
    return {"engine": {"model": MODEL, "hardware": "h200_sxm", "workers": {"aggregated": worker}},
            "traffic": {"source": {"type": "synthetic", "input_tokens": 1500, "output_tokens": 80},
                        "load": {"type": "poisson", "requests_per_second": rate, "seed": 3},
                        "stop": {"requests": requests}}}


def test_calibration_file_round_trip(tmp_path):
    cal = Calibration(prefill_scale=1.25, decode_scale=0.8, frontend_ms=7.5, kv_tokens=123456,
                      fitted_on={"measurements": "x.jsonl"})
    path = tmp_path / "cal.yaml"
    path.write_text(cal.to_yaml())
    assert load_calibration(str(path)) == cal


@pytest.mark.parametrize("text, message", [
    ("prefill_scale: 1\n", "not a servesim calibration file"),
    ("servesim_calibration: 1\nprefil_scale: 2\n", "unknown key 'prefil_scale'"),
    ("servesim_calibration: 1\ndecode_scale: 0\n", "decode_scale: must be a finite number in (0, 1e+06]"),
    ("servesim_calibration: 1\nfrontend_ms: -3\n", "frontend_ms: must be a finite number in [0, 1e+12]"),
    ("servesim_calibration: 1\nkv_tokens: 1.5\n", "kv_tokens: must be an integer in [1, 1000000000]"),
    ("servesim_calibration: 1\nmixed_pass: both\n", "mixed_pass: must be 'sum' or 'fused'"),
])
def test_bad_calibration_files_name_the_file_and_key(tmp_path, text, message):
    path = tmp_path / "cal.yaml"
    path.write_text(text)
    with pytest.raises(TraceError) as exc:
        load_calibration(str(path))
    assert str(exc.value).startswith(str(path)) and message in str(exc.value)


def test_invalid_yaml_names_the_line(tmp_path):
    path = tmp_path / "cal.yaml"
    path.write_text("servesim_calibration: 1\nprefill_scale: [1,\n")
    with pytest.raises(TraceError, match=rf"^{path}:\d+: invalid YAML"):
        load_calibration(str(path))


class _Fixed:
    label = "fixed"

    def prefill(self, batch, isl, prefix):
        return 10.0

    def decode(self, batch, active, ctx, total):
        return 4.0

    def mixed(self, batch, isl, prefix, n, active, ctx, total):
        return 12.0


class _Plain:
    def prefill(self, batch, isl, prefix):
        return 10.0

    def decode(self, batch, active, ctx, total):
        return 4.0


def test_calibrated_timing_scales_each_phase():
    timing = calibrated(_Fixed(), Calibration(prefill_scale=1.5, decode_scale=0.5))
    assert isinstance(timing, MixedPassTiming)
    assert timing.prefill(1, 100, 0) == 15.0
    assert timing.decode(1, 100, 100, 1000) == 2.0
    assert timing.mixed(1, 100, 0, 1, 100, 100, 1000) == 1.5 * 10 + 0.5 * (12 - 10)


def test_a_calibrated_sum_model_stays_a_sum_model():
    timing = calibrated(_Plain(), Calibration(prefill_scale=1.5, decode_scale=0.5))
    assert not isinstance(timing, MixedPassTiming)  # the engine keeps prefill + decode
    assert (timing.prefill(1, 100, 0), timing.decode(1, 100, 100, 1000)) == (15.0, 2.0)


def test_a_calibration_changes_the_run(tmp_path):
    path = tmp_path / "cal.yaml"
    path.write_text(Calibration(prefill_scale=2.0, decode_scale=1.5, frontend_ms=30.0).to_yaml())
    config_path = tmp_path / "config.yaml"
    config = _config({"type": "roofline", "mixed_pass": "fused", "calibration": "cal.yaml"})
    config_path.write_text(yaml.safe_dump(config))
    loaded = load_config(config_path)
    assert loaded.engine.workers.aggregated.timing.calibration == str(tmp_path / "cal.yaml")
    plain, tuned = simulate(_config()), simulate(loaded)
    assert tuned["mean_tpot_ms"] > 1.4 * plain["mean_tpot_ms"]
    assert tuned["mean_ttft_ms"] > plain["mean_ttft_ms"] + 30.0


def test_calibrated_kv_capacity_replaces_only_a_default_capacity(tmp_path):
    from servesim.build import lower

    path = tmp_path / "cal.yaml"
    path.write_text(Calibration(kv_tokens=16_000).to_yaml())
    timing = {"type": "roofline", "calibration": str(path)}
    assert lower(parse_config(_config(timing))).pools[0].rank_config.num_blocks == 1000
    fixed = lower(parse_config(_config(timing, capacity={"type": "fixed", "blocks": 77})))
    assert fixed.pools[0].rank_config.num_blocks == 77


def test_front_end_latency_precedence(tmp_path):
    from servesim.build import lower

    path = tmp_path / "cal.yaml"
    path.write_text(Calibration(frontend_ms=9.0).to_yaml())
    base = {"type": "roofline", "mixed_pass": "fused"}
    assert lower(parse_config(_config(base))).traffic.frontend_ms == 3.0
    assert lower(parse_config(_config({**base, "calibration": str(path)}))).traffic.frontend_ms == 9.0
    assert lower(parse_config(_config({**base, "calibration": str(path), "frontend_ms": 1.0}))).traffic.frontend_ms == 1.0


def test_calibrate_recovers_known_scales(tmp_path):
    truth = tmp_path / "truth.yaml"
    truth.write_text(Calibration(prefill_scale=1.4, decode_scale=0.75).to_yaml())
    measured = measured_from(_config({"type": "roofline", "mixed_pass": "fused", "calibration": str(truth)}))
    result = calibrate(parse_config(_config()), measured)
    fitted = result.calibration
    assert fitted.decode_scale == pytest.approx(0.75, rel=0.03)
    assert fitted.prefill_scale == pytest.approx(1.4, rel=0.1)
    assert max(abs(e) for e in result.after.values()) < 2.0 < max(abs(e) for e in result.before.values())
    assert fitted.kv_tokens is None  # the pool never limited this run


def _kv_bound_measurements(capacity: int, n: int = 60) -> Measured:
    """Requests whose KV (prompt 1000 + 100 output) keeps the pool at `capacity` tokens with a queue."""
    per = capacity // 1100
    send = np.zeros(n)
    first = np.array([(i // per) * 10.0 + 0.1 for i in range(n)])
    end = first + 10.0
    return Measured("kv", "test", send, first, end, np.full(n, 1000), np.full(n, 100))


def test_kv_capacity_is_measured_only_where_the_pool_limited_admission():
    found = measured_kv_tokens(_kv_bound_measurements(11_000), max_sequences=256, ranks=1)
    assert found == pytest.approx(10 * 1050, rel=0.05)  # 10 requests at a time, each 1000-1100 tokens
    assert measured_kv_tokens(_kv_bound_measurements(11_000), max_sequences=10, ranks=1) is None  # seq-bound
    calm = Measured("calm", "test", np.arange(20.0), np.arange(20.0) + 0.1, np.arange(20.0) + 0.5,
                    np.full(20, 100), np.full(20, 10))
    assert measured_kv_tokens(calm, max_sequences=256, ranks=1) is None


@pytest.mark.skipif(not DATA.is_dir(), reason="../shared/data is not present")
def test_kv_capacity_of_the_kv_bound_open_run():
    from servesim.measured import load_measured

    measured = load_measured(DATA / "examples/RTX4090/Llama-3.1-8B/vllm/requests.jsonl")
    found = measured_kv_tokens(measured, max_sequences=256, ranks=1)
    assert found == pytest.approx(41_408, rel=0.05)  # vLLM resolved 2,588 blocks of 16 tokens
    pro = load_measured(DATA / "examples/RTXPRO6000/Llama-3.1-8B/vllm/requests.jsonl")
    assert measured_kv_tokens(pro, max_sequences=128, ranks=1) is None


def _write_measurements(path: Path, measured: Measured) -> Path:
    rows = [{"input_toks": int(i), "output_toks": int(o), "queued_ts": float(s), "first_token_ts": float(f),
             "last_token_ts": float(e)} for s, f, e, i, o in zip(measured.send_s, measured.first_s, measured.end_s,
                                                                  measured.input_tokens, measured.output_tokens,
                                                                  strict=True)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_calibrate_command_writes_a_file_predict_reads(tmp_path, capsys):
    truth = tmp_path / "truth.yaml"
    truth.write_text(Calibration(decode_scale=1.3).to_yaml())
    measured = measured_from(_config({"type": "roofline", "mixed_pass": "fused", "calibration": str(truth)},
                                      requests=20))
    data = _write_measurements(tmp_path / "requests.jsonl", measured)
    config = tmp_path / "deployment.yaml"
    config.write_text(yaml.safe_dump(_config(requests=20)))
    out = tmp_path / "calibration.yaml"
    assert main(["calibrate", "-c", str(config), "-m", str(data), "-o", str(out)]) == 0
    assert "calibrated" in capsys.readouterr().out
    fitted = load_calibration(str(out))
    assert fitted.decode_scale == pytest.approx(1.3, rel=0.06)
    assert fitted.fitted_on["requests"] == 20 and fitted.fitted_on["format"] == "llmservingsim"


def test_calibrate_command_bad_inputs(tmp_path, capsys):
    config = tmp_path / "deployment.yaml"
    config.write_text(yaml.safe_dump(_config()))
    bad = tmp_path / "requests.jsonl"
    bad.write_text('{"input_toks": 10, "output_toks": 2, "queued_ts": 1, "first_token_ts": 2, "last_token_ts": 3}\n'
                   '{"input_toks": 10, "output_toks": 2, "queued_ts": 1, "first_token_ts": "x", "last_token_ts": 3}\n')
    out = tmp_path / "cal.yaml"
    assert main(["calibrate", "-c", str(config), "-m", str(bad), "-o", str(out)]) == 1
    assert f"{bad}:2: first_token_ts" in capsys.readouterr().err
    assert not out.exists()
    fixed = tmp_path / "fixed.yaml"
    fixed.write_text(yaml.safe_dump(_config({"type": "fixed", "prefill_ms": 1, "decode_ms": 1})))
    good = _write_measurements(tmp_path / "good.jsonl", _kv_bound_measurements(11_000, 5))
    assert main(["calibrate", "-c", str(fixed), "-m", str(good), "-o", str(out)]) == 2
    assert "calibrate needs type 'default' or 'roofline'" in capsys.readouterr().err
    broken = tmp_path / "broken.yaml"
    broken.write_text("engine: {model: 3}\n")
    assert main(["calibrate", "-c", str(broken), "-m", str(good), "-o", str(out)]) == 2
    assert str(broken) in capsys.readouterr().err


def test_fit_mask_restricts_the_fit(tmp_path):
    truth = tmp_path / "truth.yaml"
    truth.write_text(Calibration(decode_scale=1.2).to_yaml())
    measured = measured_from(_config({"type": "roofline", "mixed_pass": "fused", "calibration": str(truth)}))
    first = np.arange(len(measured)) < len(measured) // 2
    result = calibrate(parse_config(_config()), measured, fit=first)
    assert result.calibration.decode_scale == pytest.approx(1.2, rel=0.05)
    assert len(simulated_latencies(_config())["ttft"]) == len(measured)
    assert replace(result.calibration, fitted_on=None).mixed_pass == "fused"
