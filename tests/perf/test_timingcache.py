"""The persistent memo of AIConfigurator answers (`servesim.perf.timingcache`): warm runs are
byte-identical and ask AIC nothing, damaged files are rewritten, processes share one file."""

from __future__ import annotations

import json
import logging
import os
import struct
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import canonical
from search_helpers import config as search_config
from servesim import simulate
from servesim.perf import aic, aicdata, timingcache

SERVESIM = [sys.executable, "-m", "servesim"]
CONFIG: dict[str, Any] = {
    "engine": {"model": "Qwen/Qwen3-8B", "hardware": "h200_sxm", "backend": "vllm", "context_length": 8192,
               "workers": {"aggregated": {"parallelism": {"replicas": 2},
                                          "kv_cache": {"capacity": {"type": "fixed", "blocks": 4000}}}}},
    "traffic": {"source": {"type": "synthetic", "input_tokens": 1500, "output_tokens": 120},
                "load": {"type": "poisson", "requests_per_second": 8, "seed": 2}, "stop": {"requests": 60}},
}


@pytest.fixture(autouse=True)
def _database(reference_systems: Path) -> None:
    """servesim's default database, fetched once."""


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty timing cache for this test; nothing memoised in this process."""
    folder = tmp_path / "timing"
    monkeypatch.setenv(timingcache.ENV, str(folder))
    monkeypatch.setattr(timingcache, "_WARNED", False)
    fresh_process(monkeypatch)
    return folder


def fresh_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """Forget this process's memos, as a new process starts (compiled engines are kept)."""
    monkeypatch.setattr(timingcache, "_MEMOS", {})
    monkeypatch.setattr(aic, "_TIMINGS", {})


def run(monkeypatch: pytest.MonkeyPatch, data: dict[str, Any] = CONFIG) -> tuple[str, aic.AicTiming]:
    """A run as a new process makes it: its report (canonical JSON) and its AIC timing."""
    fresh_process(monkeypatch)
    report = canonical(simulate(data).to_dict())
    (timing,) = aic._TIMINGS.values()
    return report, timing


def only_file(folder: Path) -> Path:
    (path,) = timingcache.files(folder)
    return path


def test_warm_run_is_identical_and_asks_aic_nothing(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cold, cold_timing = run(monkeypatch)
    assert cold_timing.calls > 100 and cold_timing.compiled
    path = only_file(cache)
    stored = timingcache.parse(path.read_bytes(), timingcache.read_header(path.read_bytes())[0]["identity"])
    # the engine's own answers (batch >= 1), besides the fused model's operation sums (negative slots)
    assert sum(k[0] > 0 for k in stored[0]) + sum(k[0] > 0 for k in stored[1]) == cold_timing.calls
    warm, warm_timing = run(monkeypatch)
    assert warm == cold
    assert warm_timing.calls == 0 and not warm_timing.compiled  # the engine is not even compiled
    assert timingcache.files(cache) == [path]


def test_values_are_the_engines_bit_for_bit(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _, timing = run(monkeypatch)
    path = only_file(cache)
    decode, prefill = timingcache.parse(path.read_bytes(), timing._memo.identity)
    engine = timing.engine
    for (batch, ctx), value in [item for item in decode.items() if item[0][0] > 0][::7]:
        assert engine.predict_decode_latency(batch, ctx, 2) == value
    for (batch, isl, prefix), value in prefill.items():
        if batch > 0:  # negative slots: the fused model's operation sums (servesim.perf.mixed)
            assert engine.predict_prefill_latency(batch, isl, prefix) == value


@pytest.mark.parametrize("damage", ["truncate", "flip", "garbage", "foreign", "header"])
def test_a_damaged_file_is_ignored_with_a_warning_and_rewritten(
        damage: str, cache: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    cold, first = run(monkeypatch)
    path = only_file(cache)
    blob = path.read_bytes()
    damaged = {"truncate": blob[:len(blob) // 2], "flip": blob[:-9] + bytes([blob[-9] ^ 1]) + blob[-8:],
               "garbage": b"not a cache file", "foreign": timingcache.serialize({"other": "engine"}, {(1, 1): 1.0}, {}),
               "header": timingcache.MAGIC + struct.pack("<Q", 8) + b"{}      "}[damage]
    path.write_bytes(damaged)
    with caplog.at_level(logging.WARNING, logger="servesim"):
        again, timing = run(monkeypatch)
    assert again == cold and timing.calls == first.calls
    assert [r.getMessage() for r in caplog.records if "timing cache" in r.getMessage()] != []
    assert path.read_bytes() == blob  # rewritten whole (same entries, same order)


def test_off_writes_nothing_and_the_default_place_is_under_servesims_cache(tmp_path: Path) -> None:
    """`SERVESIM_TIMING_CACHE=off` in a real process writes no file; unset, the cache goes to
    $XDG_CACHE_HOME/servesim/timing."""
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(CONFIG))
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "xdg"), SERVESIM_AIC_SYSTEMS_PATH=str(aicdata.systems_root()))
    env.pop(timingcache.ENV, None)
    env.pop(aicdata.ENV_CACHE_DIR, None)
    timing_dir = tmp_path / "xdg" / "servesim" / "timing"
    for setting, written in (("off", 0), ("", 1)):
        env[timingcache.ENV] = setting
        done = subprocess.run([*SERVESIM, "predict", "-c", "c.yaml", "--output-dir", "out", "--overwrite",
                               "--format", "json"], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, done.stderr
        assert len(timingcache.files(timing_dir)) == written, setting


def test_data_timing_cache_lists_and_clears(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _, timing = run(monkeypatch)
    env = dict(os.environ)
    listed = subprocess.run([*SERVESIM, "data", "timing-cache"], env=env, capture_output=True, text=True, timeout=60)
    assert listed.returncode == 0, listed.stderr
    memo = timing._memo
    assert f"{cache}\n  1 files" in listed.stdout
    assert (f"Qwen/Qwen3-8B on h200_sxm, vllm 0.19.0, tp 1 pp 1; {len(memo.decode):,} decode + "
            f"{len(memo.prefill):,} prefill answers") in listed.stdout
    cleared = subprocess.run([*SERVESIM, "data", "timing-cache", "--clear"], env=env, capture_output=True, text=True,
                             timeout=60)
    assert cleared.returncode == 0 and "removed 1 files" in cleared.stdout
    assert timingcache.files(cache) == []


def test_every_part_of_the_identity_names_its_own_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    base = aic.AicKey(model="Qwen/Qwen3-8B", system="h200_sxm", backend="vllm", version="0.19.0", tp=1, pp=1,
                      attention_dp=1, moe_tp=None, moe_ep=None, block_size=16,
                      systems_path=str(aicdata.systems_root()))
    variants = [base, *(replace(base, **change) for change in (
        {"tp": 2}, {"version": "0.24.0"}, {"block_size": 32}, {"system": "h100_sxm"}, {"nextn": 1},
        {"model": "Qwen/Qwen3-32B"}))]
    identities = [aic.engine_identity(k) for k in variants]
    assert len({json.dumps(i, sort_keys=True) for i in identities}) == len(variants)
    monkeypatch.setenv(timingcache.ENV, str(tmp_path))
    monkeypatch.setattr(timingcache, "_MEMOS", {})
    paths = {timingcache.engine_memo(i).path for i in identities}
    assert len(paths) == len(variants)
    # a file is read only by its own identity
    memo = timingcache.engine_memo(identities[0])
    memo.decode[(1, 2)] = 3.5
    memo.fresh_decode.append((1, 2))
    memo.sync()
    blob = memo.path.read_bytes()  # type: ignore[union-attr]
    assert timingcache.parse(blob, identities[0])[0] == {(1, 2): 3.5}
    with pytest.raises(ValueError, match="another engine"):
        timingcache.parse(blob, identities[1])


def test_a_database_that_no_digest_vouches_for_is_fingerprinted_by_its_files(tmp_path: Path) -> None:
    (tmp_path / "data" / "gpu").mkdir(parents=True)
    table = tmp_path / "data" / "gpu" / "gemm.csv"
    table.write_text("1,2\n")
    (tmp_path / "gpu.yaml").write_text("gpu: {}\n")
    before = timingcache.stat_digest(tmp_path, [tmp_path / "data" / "gpu"])
    assert timingcache.stat_digest(tmp_path, [tmp_path / "data" / "gpu"]) == before
    table.write_text("1,3\n")
    os.utime(table, ns=(1, 1))
    assert timingcache.stat_digest(tmp_path, [tmp_path / "data" / "gpu"]) != before
    after = timingcache.stat_digest(tmp_path, [tmp_path / "data" / "gpu"])
    (tmp_path / "gpu.yaml").write_text("gpu: {x: 1}\n")
    assert timingcache.stat_digest(tmp_path, [tmp_path / "data" / "gpu"]) != after


WRITER = textwrap.dedent("""
    import sys
    from servesim.perf import timingcache
    which, rounds, per = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    memo = timingcache.engine_memo({"test": "concurrent writers"})
    for r in range(rounds):
        for i in range(per):
            key = (which, r * per + i)
            memo.decode[key] = which + (r * per + i) / 7
            memo.fresh_decode.append(key)
        memo.prefill[(which, r, 0)] = float(r)
        memo.fresh_prefill.append((which, r, 0))
        timingcache.save()
""")


def test_concurrent_writers_lose_nothing(tmp_path: Path) -> None:
    env = dict(os.environ, **{timingcache.ENV: str(tmp_path)})
    rounds, per = 25, 400
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, str(w), str(rounds), str(per)], env=env)
               for w in (1, 2, 3)]
    assert [w.wait(timeout=120) for w in writers] == [0, 0, 0]
    path = only_file(tmp_path)
    decode, prefill = timingcache.parse(path.read_bytes(), {"test": "concurrent writers"})
    assert decode == {(w, i): w + i / 7 for w in (1, 2, 3) for i in range(rounds * per)}
    assert prefill == {(w, r, 0): float(r) for w in (1, 2, 3) for r in range(rounds)}
    assert not list(tmp_path.glob("*.tmp"))


def test_a_clean_memo_picks_up_what_another_process_wrote(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(timingcache.ENV, str(tmp_path))
    monkeypatch.setattr(timingcache, "_MEMOS", {})
    identity = {"test": "refresh"}
    memo = timingcache.engine_memo(identity)
    assert memo.decode == {}
    other = timingcache.EngineMemo(identity, memo.path)
    other.decode[(4, 5)] = 6.0
    other.fresh_decode.append((4, 5))
    other.sync()
    timingcache.save()
    assert memo.decode == {(4, 5): 6.0}


def test_eviction_keeps_the_cache_within_its_bound(tmp_path: Path) -> None:
    for i in range(5):
        path = tmp_path / f"{i}{timingcache.SUFFIX}"
        path.write_bytes(b"x" * 1000)
        os.utime(path, ns=(i * 10**9, i * 10**9))
    keep = tmp_path / f"0{timingcache.SUFFIX}"
    removed = timingcache.evict(tmp_path, 3000, keep=keep)
    assert sorted(p.name for p in removed) == [f"{i}{timingcache.SUFFIX}" for i in (1, 2)]
    assert sorted(p.name for p in timingcache.files(tmp_path)) == [f"{i}{timingcache.SUFFIX}" for i in (0, 3, 4)]


def test_unwritable_cache_warns_once_and_changes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         caplog: pytest.LogCaptureFixture) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv(timingcache.ENV, str(blocker / "timing"))  # under a file: cannot be created
    monkeypatch.setattr(timingcache, "_WARNED", False)
    with caplog.at_level(logging.WARNING, logger="servesim"):
        first, _ = run(monkeypatch, dict(CONFIG, traffic=dict(CONFIG["traffic"], stop={"requests": 10})))
        second, _ = run(monkeypatch, dict(CONFIG, traffic=dict(CONFIG["traffic"], stop={"requests": 10})))
    assert first == second
    assert len([r for r in caplog.records if "timing cache" in r.getMessage()]) == 1


def test_recommend_workers_share_the_cache(tmp_path: Path) -> None:
    """A search's worker processes write their lookups to the cache and read them from it: a
    file whose decode times are doubled (validly) doubles the next identical search's ITLs."""
    data = search_config(**{"engine.workers.aggregated.timing": {"type": "default"},
                            "engine.backend_version": None,
                            "optimization.constraints.max_candidate_gpus": 1, "optimizer.algorithm": "grid"})
    (tmp_path / "r.yaml").write_text(yaml.safe_dump(data))
    env = dict(os.environ, **{timingcache.ENV: str(tmp_path / "timing")})

    def itls(out: str) -> list[float]:
        done = subprocess.run([*SERVESIM, "recommend", "-c", "r.yaml", "--output-dir", out], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        ledger = json.loads((tmp_path / out / "recommendation.json").read_text())
        assert len(ledger["candidates"]) == 2
        return [entry["metrics"]["mean_itl_ms"] for entry in ledger["candidates"]]

    first = itls("a")
    path = only_file(tmp_path / "timing")
    identity = timingcache.read_header(path.read_bytes())[0]["identity"]
    decode, prefill = timingcache.parse(path.read_bytes(), identity)
    assert {batch for batch, _ in decode} == {4, 8}  # both candidates (max_sequences 4 and 16 at concurrency 8)
    assert itls("b") == first  # the cache as written: the same search
    path.write_bytes(timingcache.serialize(identity, {k: 2 * v for k, v in decode.items()}, prefill))
    doubled = itls("c")
    assert all(abs(d / (2 * f) - 1) < 0.01 for d, f in zip(doubled, first, strict=True)), (first, doubled)
