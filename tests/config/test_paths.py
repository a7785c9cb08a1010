"""Relative trace paths and model directories: the current directory first (the reference's
rule), else beside the config with one note on stderr."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from servesim import simulate
from servesim.config import TraceSource, load_config
from servesim.errors import TraceError

CASES = Path(__file__).parents[1] / "cases"
CASE05 = CASES / "replay/05-mooncake-prefix-cache"
MODEL = CASES / "dynamo/model/config.json"


def case(folder: Path, trace: str = "trace.jsonl", model: str = "Qwen/Qwen3-8B") -> Path:
    """Replay case 05 (trace.jsonl beside its config) copied to `folder`, naming `trace` and `model`."""
    shutil.copytree(CASE05, folder)
    data = yaml.safe_load((folder / "config.yaml").read_text())
    data["traffic"]["source"]["paths"] = [trace]
    data["engine"]["model"] = model
    (folder / "config.yaml").write_text(yaml.safe_dump(data))
    return folder / "config.yaml"


def notes(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith("servesim: note:")]


def trace_paths(config: Path) -> list[str]:
    source = load_config(config).traffic.source
    assert isinstance(source, TraceSource)
    return source.paths


def test_the_current_directory_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                    caplog: pytest.LogCaptureFixture) -> None:
    config = case(tmp_path / "case")
    (tmp_path / "cwd").mkdir()
    (tmp_path / "cwd" / "trace.jsonl").write_text('{"timestamp": 0, "input_length": 64, "output_length": 2, "hash_ids": [1]}\n')
    monkeypatch.chdir(tmp_path / "cwd")
    with caplog.at_level(logging.WARNING, logger="servesim"):
        assert trace_paths(config) == ["trace.jsonl"]
        assert simulate(config)["num_requests"] == 1  # the one-line trace of the current directory
    assert notes(caplog) == []


def test_beside_the_config_when_only_there_said_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    config = case(tmp_path / "case", trace="trace.jsonl")
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    with caplog.at_level(logging.WARNING, logger="servesim"):
        assert trace_paths(config) == [str(tmp_path / "case" / "trace.jsonl")]
        assert trace_paths(config) == [str(tmp_path / "case" / "trace.jsonl")]
    (note,) = notes(caplog)
    assert "traffic.source.paths 'trace.jsonl' is not in the current directory" in note
    assert str(tmp_path / "case" / "trace.jsonl") in note


def test_nowhere_is_kept_as_written_and_fails_naming_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = case(tmp_path / "case", trace="missing.jsonl")
    monkeypatch.chdir(tmp_path)
    assert trace_paths(config) == ["missing.jsonl"]
    with pytest.raises(TraceError, match="missing.jsonl"):
        simulate(config)


def test_absolute_paths_and_model_ids_are_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = case(tmp_path / "case", trace=str(CASE05 / "trace.jsonl"), model="Qwen/Qwen3-8B")
    monkeypatch.chdir(tmp_path)
    loaded = load_config(config)
    assert loaded.traffic.source.paths == [str(CASE05 / "trace.jsonl")]  # type: ignore[union-attr]
    assert loaded.engine.model == "Qwen/Qwen3-8B"


@pytest.mark.parametrize("where", ["cwd", "beside", "both"])
def test_model_directories_follow_the_same_rule(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str) -> None:
    config = case(tmp_path / "case", model="model")
    (tmp_path / "cwd").mkdir()
    for folder in {"cwd": ["cwd"], "beside": ["case"], "both": ["cwd", "case"]}[where]:
        (tmp_path / folder / "model").mkdir()
        shutil.copy(MODEL, tmp_path / folder / "model" / "config.json")
    monkeypatch.chdir(tmp_path / "cwd")
    want = str(tmp_path / "case" / "model") if where == "beside" else "model"
    assert load_config(config).engine.model == want


def predict(config: Path, cwd: Path, out: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "servesim", "predict", "-c", str(config), "--format", "json",
                           "--output-dir", str(out)], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})


def test_cli_from_another_directory_notes_on_stderr_and_reports_the_same(tmp_path: Path) -> None:
    """The stored cases' configs name files beside them: from elsewhere the run finds them
    there, says so once on stderr, and stdout/prediction.json are those of a run from the case
    folder (the reference's way)."""
    config = CASES / "dynamo/rr-4w-prefix16-r20/config.yaml"  # ../trace-400-r20.jsonl and ../model
    here = predict(config, config.parent, tmp_path / "a")
    away = predict(config, tmp_path, tmp_path / "b")
    assert here.returncode == away.returncode == 0, (here.stderr, away.stderr)
    assert here.stderr == ""
    lines = away.stderr.splitlines()
    assert len(lines) == 2 and all(line.startswith("servesim: note: ") for line in lines)
    assert "traffic.source.paths '../trace-400-r20.jsonl'" in lines[0] and "engine.model '../model'" in lines[1]
    strip = {"wall_time_ms", "processed_tokens_per_s", "processed_output_tokens_per_s"}
    reports = [{k: v for k, v in json.loads(run.stdout).items() if k not in strip} for run in (here, away)]
    assert reports[0] == reports[1] and reports[0]["completed_requests"] == 400
