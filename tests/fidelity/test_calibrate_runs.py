"""`calibrate` over several measured runs: what the data separates, the hold-out it prints, and
the settings a calibration file carries and applies (`fitted_with`)."""

from __future__ import annotations

import json

import pytest
import yaml

from servesim.cli import main
from servesim.config import parse_config
from servesim.errors import ConfigError
from servesim.studies.calibrate import calibrate
from servesim.perf.calibration import Calibration, load_calibration
from simulated_runs import measured_from

MODEL = "Qwen/Qwen3-8B"
TIMING = {"type": "roofline"}


def _config(timing: dict | None = None, isl: int = 1500, rate: float = 8.0, requests: int = 40,
            seed: int = 3) -> dict:
    worker = {"scheduler": {"max_batched_tokens": 2048, "max_sequences": 32}, "kv_cache": {"block_size": 16},
              "timing": timing or dict(TIMING)}
    return {"engine": {"model": MODEL, "hardware": "h200_sxm", "workers": {"aggregated": worker}},
            "traffic": {"source": {"type": "synthetic", "input_tokens": isl, "output_tokens": 60},
                        "load": {"type": "poisson", "requests_per_second": rate, "seed": seed},
                        "stop": {"requests": requests}}}


def _truth(tmp_path, **scales) -> str:
    path = tmp_path / "truth.yaml"
    path.write_text(Calibration(**scales).to_yaml())
    return str(path)


def test_one_load_and_length_cannot_separate_prefill_from_frontend(tmp_path):
    truth = _truth(tmp_path, prefill_scale=1.3, frontend_ms=25.0)
    measured = measured_from(_config({**TIMING, "calibration": truth}))
    result = calibrate(parse_config(_config()), measured)
    assert not result.separability.prefill_frontend
    assert result.separability.cosine is None or result.separability.cosine >= 0.98
    assert result.calibration.frontend_ms is None  # not fitted: the default stays
    assert any(n.startswith("warning: the data cannot separate") for n in result.notes)
    assert result.calibration.fitted_on["separable"]["prefill_scale/frontend_ms"] == "not separable"


def test_runs_at_two_prompt_lengths_separate_and_recover_both(tmp_path):
    truth = _truth(tmp_path, prefill_scale=1.3, frontend_ms=25.0)
    runs = [measured_from(_config({**TIMING, "calibration": truth}, isl=isl, rate=rate, seed=seed))
            for isl, rate, seed in ((200, 4.0, 1), (3000, 4.0, 2))]
    result = calibrate(parse_config(_config()), runs)
    assert result.separability.prefill_frontend and result.separability.cosine < 0.98
    assert result.calibration.prefill_scale == pytest.approx(1.3, rel=0.08)
    assert result.calibration.frontend_ms == pytest.approx(25.0, abs=4.0)
    assert result.calibration.fitted_on["runs"] == 2
    assert max(abs(e) for e in result.after.values()) < 2.0


def test_a_fitted_file_carries_its_settings_and_a_config_gets_them(tmp_path):
    measured = measured_from(_config(requests=20))
    fitted = calibrate(parse_config(_config({**TIMING, "mixed_pass": "sum"}, requests=20)), measured).calibration
    assert fitted.mixed_pass == "sum"
    assert fitted.fitted_with["timing"] == {"type": "roofline"}
    assert fitted.fitted_with["scheduler"] == {"async_scheduling": False}
    assert fitted.fitted_with["engine"]["model"] == MODEL
    path = tmp_path / "cal.yaml"
    path.write_text(fitted.to_yaml())
    assert load_calibration(str(path)).fitted_with == fitted.fitted_with
    applied = parse_config(_config({**TIMING, "calibration": str(path)})).engine.roles["aggregated"]
    assert applied.timing.mixed_pass == "sum" and applied.scheduler.async_scheduling is False
    with pytest.raises(ConfigError, match=r"timing\.mixed_pass: 'fused' contradicts the calibration file"):
        parse_config(_config({**TIMING, "mixed_pass": "fused", "calibration": str(path)}))
    scheduled = _config({**TIMING, "calibration": str(path)})
    scheduled["engine"]["workers"]["aggregated"]["scheduler"]["async_scheduling"] = True
    with pytest.raises(ConfigError, match=r"scheduler\.async_scheduling: True contradicts"):
        parse_config(scheduled)


def test_a_file_fitted_with_a_backend_version_sets_it_on_the_same_deployment(tmp_path):
    path = tmp_path / "cal.yaml"
    path.write_text(Calibration(fitted_with={"engine": {"model": MODEL, "hardware": "h200_sxm", "backend": "vllm",
                                                        "backend_version": "0.19.0"}}).to_yaml())
    config = _config({"type": "default", "calibration": str(path)})
    assert parse_config(config).engine.backend_version == "0.19.0"
    config["engine"]["backend_version"] = "0.24.0"
    with pytest.raises(ConfigError, match=r"engine\.backend_version: '0\.24\.0' contradicts"):
        parse_config(config)
    config["engine"]["hardware"] = "h100_sxm"  # another deployment: the version is not carried over
    assert parse_config(config).engine.backend_version == "0.24.0"


def test_bad_fitted_with_names_the_file_and_key(tmp_path):
    path = tmp_path / "cal.yaml"
    path.write_text("servesim_calibration: 1\nfitted_with: {timing: {mixed: 1}}\n")
    with pytest.raises(Exception, match=r"fitted_with\.timing: unknown key 'mixed'"):
        load_calibration(str(path))


def _write(path, measured):
    rows = [{"input_toks": int(i), "output_toks": int(o), "queued_ts": float(s), "first_token_ts": float(f),
             "last_token_ts": float(e)} for s, f, e, i, o in zip(measured.send_s, measured.first_s, measured.end_s,
                                                                  measured.input_tokens, measured.output_tokens,
                                                                  strict=True)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_calibrate_command_prints_the_holdout_before_writing(tmp_path, capsys):
    truth = _truth(tmp_path, decode_scale=1.25, prefill_scale=1.2)
    files = [_write(tmp_path / f"run{i}.jsonl",
                    measured_from(_config({**TIMING, "calibration": truth}, isl=isl, requests=24, seed=i)))
             for i, isl in enumerate((300, 2500))]
    config = tmp_path / "deployment.yaml"
    config.write_text(yaml.safe_dump(_config(requests=24)))
    out = tmp_path / "cal.yaml"
    assert main(["calibrate", "-c", str(config), "-m", files[0], "-m", files[1], "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert text.index("hold-out") < text.index("prefill scale")
    assert "run 1" in text and "run 2" in text
    fitted = load_calibration(str(out))
    assert fitted.decode_scale == pytest.approx(1.25, rel=0.06)
    assert fitted.fitted_on["runs"] == 2


def test_a_first_third_calibration_predicts_the_rest_better_on_every_metric():
    """Issue 27's done-when on a real run: the roofline misses the RTX 4090 run by ~4 %; a
    calibration fitted on its first third of requests (light, rising load) predicts the other
    two thirds (saturated) better on TTFT, TPOT and E2E."""
    from servesim.studies import holdout, openruns

    (row,) = holdout.by_load(openruns.PACK, runs=[openruns.RUNS[0]])
    assert row.timing == "roofline"
    for metric in ("ttft", "tpot", "e2e"):
        assert abs(row.calibrated[metric]) < abs(row.uncalibrated[metric]), (metric, row)
    assert row.mean_abs(row.calibrated) < 0.6 * row.mean_abs(row.uncalibrated)


def test_docs_accuracy_holdout_rows_improve():
    """docs/accuracy.md's first-third hold-out: on every row TTFT improves and the mean absolute
    error does not grow; every metric improves, except at most two cells of rows within 3 % of
    the measurement where the calibrated error is at most 0.2 % further from it and within
    0.5 % — below the replay's own jitter on those metrics (a standard deviation of
    0.24-0.36 %, the file's "second round"), so they do not rank the predictions; a row whose
    uncalibrated mean absolute error is above 3 % improves on every metric."""
    import re
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "accuracy.md").read_text()
    rows = [line for line in doc.splitlines() if ", first third |" in line]
    assert len(rows) >= 7
    within_jitter = []
    for line in rows:
        pairs = [(float(a), float(b)) for a, b in re.findall(r"([+-]?\d+\.\d) → ([+-]?\d+\.\d) %", line)]
        assert len(pairs) == 4, line
        (ttft, *others), (plain_mae, tuned_mae) = pairs[:3], pairs[3]
        assert abs(ttft[1]) < abs(ttft[0]), line
        assert tuned_mae <= plain_mae, line
        for before, after in (ttft, *others):
            if abs(after) < abs(before):
                continue
            assert plain_mae <= 3.0 and abs(after) <= 0.5 and abs(after) - abs(before) <= 0.2 + 1e-9, line
            within_jitter.append(line)
    assert len(within_jitter) <= 2, within_jitter
