"""`timing.type: default`: the AIConfigurator provider, its memo, interpolation and fallbacks.

Engines are compiled once per process (servesim.perf.aic caches them), so the ~1.5 s first
compile is paid once for the whole module.
"""

from __future__ import annotations

import logging
import random
from pathlib import Path

import pytest

from servesim.perf import aicdata
from servesim.config import parse_config
from servesim.perf import aic
from servesim.perf.hardware import package_systems_dir
from servesim.perf.models import bundled_configs_dir
from servesim.perf.roofline import RooflineTiming
from servesim.perf.timing import quantize_ms
from servesim.errors import ConfigError, RunError
from servesim.build.perf import timing_model

PACKAGE_SYSTEMS = package_systems_dir()


@pytest.fixture(autouse=True)
def _database(reference_systems: Path) -> None:
    """Every test here may use servesim's default database (fetched once)."""


def key(model: str = "Qwen/Qwen3-32B-FP8", system: str = "h200_sxm", version: str = "0.24.0", tp: int = 1,
        systems: Path | None = None) -> aic.AicKey:
    """An engine key on `systems` (default: servesim's default database)."""
    return aic.AicKey(model=model, system=system, backend="vllm", version=version, tp=tp, pp=1,
                      attention_dp=1, moe_tp=None, moe_ep=None, block_size=64,
                      systems_path=str(systems or aicdata.systems_root()))


def config(**engine: object) -> dict:
    base = {"model": "Qwen/Qwen3-8B", "hardware": "h200_sxm", "context_length": 4096,
            "workers": {"aggregated": {"kv_cache": {"capacity": {"type": "fixed", "blocks": 1000}}}}}
    base.update(engine)
    return {"engine": base, "traffic": {"source": {"type": "synthetic", "input_tokens": 100, "output_tokens": 3},
                                        "load": {"type": "concurrency", "concurrency": 1}, "stop": {"requests": 1}}}


def role_timing(cfg: dict):
    engine = parse_config(cfg).engine
    return timing_model(engine, engine.workers.aggregated, "aggregated")


def test_values_are_bit_identical_to_direct_calls() -> None:
    """Memoised, quantised values equal quantize_ms(direct AIC call) for random arguments."""
    import aiconfigurator_core
    from aiconfigurator_core.sdk.engine import compile_engine

    k = key()
    direct = aiconfigurator_core.AicEngine.from_spec(
        compile_engine(k.model, k.system, "vllm", backend_version="0.24.0", tp_size=1, pp_size=1,
                       attention_dp_size=1, nextn=0, kv_block_size=64, systems_path=k.systems_path),
        k.systems_path)
    timing = aic.AicTiming(aic.aic_engine(k))
    rng = random.Random(7)
    for _ in range(60):
        bs, isl = rng.randint(1, 64), rng.randint(2, 16000)
        prefix = rng.choice([0, rng.randint(0, isl - 1)])
        want = quantize_ms(direct.predict_prefill_latency(bs, isl, prefix))
        assert timing.prefill(bs, isl, prefix) == want
        ctx = rng.randint(1, 30000)
        assert timing.decode(bs, bs * ctx, ctx, 10**6) == quantize_ms(direct.predict_decode_latency(bs, ctx, 2))
    calls = timing.calls
    timing.prefill(bs, isl, prefix), timing.decode(bs, 0, ctx, 0)
    assert timing.calls == calls  # memo hits do not reach AIC


def test_case_07_values_through_the_reference_database(reference_systems: Path) -> None:
    systems = reference_systems
    version = aic.resolve_version(systems, "h200_sxm", "vllm", None)
    assert version == "0.19.0"
    timing = aic.AicTiming(aic.aic_engine(key("Qwen/Qwen3-32B", version="0.19.0")))
    assert timing.prefill(1, 1000, 0) == quantize_ms(89.90806873877222)
    assert timing.decode(1, 1000, 1000, 0) == quantize_ms(18.286829415206398)


def test_interpolation_is_exact_on_the_grid_and_close_between() -> None:
    exact = aic.AicTiming(aic.aic_engine(key()))
    interp = aic.AicTiming(aic.aic_engine(key()), interpolate_context=256)
    rng = random.Random(3)
    worst = 0.0
    for _ in range(150):
        bs, ctx = rng.choice([1, 8, 32, 128]), rng.randint(1, 20000)
        a, b = exact.decode(bs, 0, ctx, 0), interp.decode(bs, 0, ctx, 0)
        worst = max(worst, abs(b / a - 1))
        if ctx % 256 == 0 or ctx < 256:
            assert a == b
    assert worst < 0.005  # docs/timing.md: <= 0.43 % at 256-token buckets
    assert interp.decode(4, 0, 2048, 0) == exact.decode(4, 0, 2048, 0)
    # many contexts in one bucket pair cost two AIC calls
    fresh = aic.AicTiming(aic.aic_engine(key()), interpolate_context=256)
    for ctx in range(5121, 5376):
        fresh.decode(16, 0, ctx, 0)
    assert fresh.calls == 2


def test_version_resolution(reference_systems: Path) -> None:
    ref = reference_systems
    for gpu in ("h100_sxm", "h200_sxm"):  # omitted: the reference's defaults, which its database has
        assert [aic.resolve_version(ref, gpu, b, None) for b in ("vllm", "sglang", "trtllm")] == [
            "0.19.0", "0.5.10", "1.3.0rc10"]
    assert aic.data_versions(ref, "h200_sxm", "vllm")[1:] == ["0.14.0", "0.18.0", "0.19.0", "0.22.0", "0.24.0"]
    assert aic.resolve_version(ref, "h200_sxm", "vllm", "0.18.0") == "0.18.0"
    assert aic.resolve_version(ref, "h200_sxm", "vllm", "current") == "0.24.0"  # newest with GEMMs
    assert aic.resolve_version(PACKAGE_SYSTEMS, "h200_sxm", "vllm", "current") == "0.24.0"  # its slot
    with pytest.raises(ConfigError, match=r"backend_version '0\.18\.0'.*on h100_sxm; available: .*"
                                          r"0\.14\.0, 0\.19\.0, 0\.22\.0, 0\.24\.0 \(or 'current'\)"):
        aic.resolve_version(ref, "h100_sxm", "vllm", "0.18.0")
    with pytest.raises(ConfigError, match=r"'9\.9\.9'.*available: .*1\.3\.0rc10"):
        aic.resolve_version(ref, "h200_sxm", "trtllm", "9.9.9")
    # a database without the reference's default version: an error, no silent substitute
    with pytest.raises(ConfigError, match=r"omitted: the reference's default vllm 0\.19\.0.*available: 0\.24\.0"):
        aic.resolve_version(PACKAGE_SYSTEMS, "h200_sxm", "vllm", None)


def test_omitted_version_times_with_the_reference_default(reference_systems: Path, monkeypatch: pytest.MonkeyPatch,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.delenv("SERVESIM_AIC_SYSTEMS_PATH", raising=False)
    with caplog.at_level(logging.WARNING, logger="servesim"):
        timing = role_timing(config())
    assert isinstance(timing, aic.AicTiming) and timing.label.endswith("vllm 0.19.0")
    assert not caplog.records
    with pytest.raises(ConfigError, match="available"):
        role_timing(config(backend_version="0.99.0"))


def test_unknown_gpu_falls_back_to_roofline(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="servesim"):
        timing = role_timing(config(hardware="rtx_4090", backend_version="0.24.0"))
    assert isinstance(timing, RooflineTiming)
    assert any("falling back to the roofline" in r.message and "rtx_4090" in r.message for r in caplog.records)
    with pytest.raises(RunError, match="unknown GPU"):
        role_timing(config(hardware="no_such_gpu"))


def test_unsupported_architecture_falls_back_to_roofline(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    text = (bundled_configs_dir() / "Qwen--Qwen3-8B_config.json").read_text()
    (tmp_path / "config.json").write_text(text.replace("Qwen3ForCausalLM", "MadeUpForCausalLM"))
    with caplog.at_level(logging.WARNING, logger="servesim"):
        timing = role_timing(config(model=str(tmp_path), backend_version="0.24.0"))
    assert isinstance(timing, RooflineTiming)
    assert any("roofline" in r.message for r in caplog.records)


def test_unknown_model_fails_clearly() -> None:
    with pytest.raises(RunError, match="bundled model configs"):
        role_timing(config(model="someone/not-a-model"))


def test_systems_path_key_and_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    with pytest.raises(RunError, match="engine.aic_systems_path"):
        role_timing(config(aic_systems_path=str(tmp_path)))
    monkeypatch.setenv("SERVESIM_AIC_SYSTEMS_PATH", str(tmp_path))
    with pytest.raises(RunError, match="SERVESIM_AIC_SYSTEMS_PATH"):
        role_timing(config())
    # the config key wins over the environment
    timing = role_timing(config(aic_systems_path=str(PACKAGE_SYSTEMS), backend_version="0.24.0"))
    assert isinstance(timing, aic.AicTiming)


def test_workers_of_a_role_share_one_provider() -> None:
    a = role_timing(config(backend_version="0.24.0"))
    b = role_timing(config(backend_version="0.24.0"))
    c = role_timing(config(backend_version="0.24.0", workers={"aggregated": {
        "kv_cache": {"capacity": {"type": "fixed", "blocks": 1000}},
        "timing": {"type": "default", "interpolate_context": 256}}}))
    assert a is b and c is not a and c._engine is a._engine
