"""The fidelity model and backend version a run resolves: best estimate by default, the
reference's under `compat: reference`, one decision for every command."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from servesim.cli import main
from servesim.config import parse_config
from servesim.errors import ConfigError
from servesim.build.apply import async_scheduling, frontend_ms
from servesim.build.resolve import fidelity_mode, resolve_fidelity
from servesim.perf import aic


def _config(backend: str = "vllm", timing: dict | None = None, compat: str | None = None, **scheduler) -> dict:
    worker: dict = {"parallelism": {"tensor": 2}, "timing": timing or {"type": "default"}}
    if scheduler:
        worker["scheduler"] = scheduler
    doc: dict = {"engine": {"model": "Qwen/Qwen3-8B", "hardware": "h200_sxm", "backend": backend,
                            "workers": {"aggregated": worker}},
                 "traffic": {"source": {"type": "synthetic", "input_tokens": 64, "output_tokens": 4},
                             "load": {"type": "concurrency", "concurrency": 2}, "stop": {"requests": 4}}}
    if compat is not None:
        doc["compat"] = compat
    return doc


@pytest.mark.parametrize("backend", ["vllm", "sglang", "trtllm"])
def test_omitted_keys_resolve_to_the_best_estimate_and_to_the_reference_under_compat(backend: str) -> None:
    best = resolve_fidelity(parse_config(_config(backend)))
    worker = best.engine.workers.aggregated
    assert worker.timing.mixed_pass == "fused" and fidelity_mode(best) == "fused"
    assert async_scheduling(worker) and frontend_ms(worker) == 8.0  # 3 + 3 + 2·log2(2)
    ref = resolve_fidelity(parse_config(_config(backend, compat="reference")))
    worker = ref.engine.workers.aggregated
    assert worker.timing.mixed_pass == "sum" and fidelity_mode(ref) == "reference"
    assert not async_scheduling(worker) and frontend_ms(worker) == 0.0


def test_explicit_keys_win_and_resolution_is_idempotent() -> None:
    config = resolve_fidelity(parse_config(_config(timing={"type": "default", "mixed_pass": "sum"})))
    assert config.engine.workers.aggregated.timing.mixed_pass == "sum" and fidelity_mode(config) == "sum"
    assert resolve_fidelity(config) is config
    fixed = resolve_fidelity(parse_config(_config(timing={"type": "fixed", "prefill_ms": 1, "decode_ms": 1})))
    assert not async_scheduling(fixed.engine.workers.aggregated), "fixed timing runs as the reference runs it"


@pytest.mark.parametrize(("timing", "scheduler", "key"), [
    ({"mixed_pass": "fused"}, {}, "timing.mixed_pass"),
    ({"frontend_ms": 5}, {}, "timing.frontend_ms"),
    ({"dp_sync_ms": 2}, {}, "timing.dp_sync_ms"),
    ({"calibration": "cal.yaml"}, {}, "timing.calibration"),
    ({}, {"async_scheduling": True}, "scheduler.async_scheduling"),
])
def test_a_key_contradicting_compat_reference_is_a_config_error_naming_both(timing, scheduler, key) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(_config(timing={"type": "default", **timing}, compat="reference", **scheduler))
    assert f"engine.workers.aggregated.{key}" in str(err.value) and "compat: 'reference'" in str(err.value)
    # keys that agree with the reference are fine
    parse_config(_config(timing={"type": "default", "mixed_pass": "sum", "frontend_ms": 0}, compat="reference",
                         async_scheduling=False))


def test_a_contradiction_set_after_validation_is_caught_when_resolving() -> None:
    config = parse_config(_config(timing={"type": "default", "mixed_pass": "fused"}))
    with pytest.raises(ConfigError, match="mixed_pass"):
        resolve_fidelity(config.model_copy(update={"compat": "reference"}))


def _tree(root: Path, versions: list[str]) -> Path:
    for version in versions:
        folder = root / "data" / "gpu_x" / "gemm" / "vllm" / version
        folder.mkdir(parents=True)
        (folder / "gemm.parquet").write_bytes(b"")
    return root


@pytest.mark.parametrize(("versions", "expected"), [
    (["0.17.0", "0.19.0", "0.24.0"], "0.19.0"),  # the reference's default where there is data
    (["0.11.0", "0.18.0", "0.24.0"], "0.18.0"),  # else the newest older one
    (["0.22.0", "0.24.0"], "0.22.0"),            # else the oldest newer one
    ([], None),
])
def test_default_version_is_the_references_default_else_the_nearest(tmp_path, versions, expected) -> None:
    assert aic.default_version(_tree(tmp_path, versions), "gpu_x", "vllm") == expected


def test_provenance_is_written_by_default_and_left_out_under_compat(tmp_path, capsys) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(_config(timing={"type": "fixed", "prefill_ms": 2, "decode_ms": 1})))
    assert main(["predict", "-c", str(config), "--output-dir", str(tmp_path / "plain")]) == 0
    table = capsys.readouterr().out
    plain = json.loads((tmp_path / "plain" / "prediction.json").read_text())
    prov = plain["provenance"]
    assert prov["compat"] == "none" and prov["backend"] == "vllm" and prov["calibration"] == "none"
    assert all(isinstance(v, str) for v in prov.values())
    assert any(line.startswith(f"servesim {prov['servesim_version']} · vllm") for line in table.splitlines()[:3])
    for argv in (["--compat", "reference", "predict"], ["predict", "--compat", "reference"]):
        out = tmp_path / "-".join(argv)
        assert main([*argv, "-c", str(config), "--output-dir", str(out)]) == 0
        strict = json.loads((out / "prediction.json").read_text())
        assert "provenance" not in strict and "rejected_requests" not in strict
        assert not any(line.startswith("servesim") for line in capsys.readouterr().out.splitlines()[:3])
    assert main(["--compat", "reference", "validate", "--runs", "9"]) == 2
