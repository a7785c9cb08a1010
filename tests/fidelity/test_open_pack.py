"""The open measurement pack shipped as package data: complete, installed, free of token ids,
and enough for `servesim validate` and docs/accuracy.md without ../shared/data."""

from __future__ import annotations

import fnmatch
import json
import re
import tomllib
from pathlib import Path

import pytest

from servesim.cli import main
from servesim.studies import openruns

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared" / "data" / "llmservingsim-vllm-validation"


def test_every_run_of_the_pack_is_there_with_its_licence():
    assert (openruns.PACK / "LICENSE").read_text().startswith("MIT License")
    assert "casys-kaist/LLMServingSim" in (openruns.PACK / "SOURCE.md").read_text()
    for run in openruns.RUNS:
        meta, requests, trace = run.files(openruns.data_folder())
        assert json.loads(meta.read_text())["vllm_version"] == "0.19.0"
        assert len(requests.read_text().splitlines()) == 300
        assert len(trace.read_text().splitlines()) == 300


def test_the_package_data_patterns_ship_every_file_of_the_pack():
    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["servesim"]
    package = ROOT / "src" / "servesim"
    files = [p.relative_to(package).as_posix() for p in (package / "data").rglob("*") if p.is_file()]
    assert files
    unshipped = [f for f in files if not any(fnmatch.fnmatch(f, pat) and f.count("/") == pat.count("/")
                                             for pat in patterns)]
    assert unshipped == []


def test_the_pack_holds_no_token_ids():
    for path in openruns.PACK.rglob("*.jsonl"):
        first = json.loads(path.read_text().splitlines()[0])
        assert not any(re.search("token_ids|prompt|text", key) for key in first), (path, sorted(first))


@pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/data is not present")
def test_the_pack_measures_what_the_full_data_set_measures():
    for run in openruns.RUNS:
        ours = openruns.measured(run, openruns.PACK).latencies()
        full = openruns.measured(run, SHARED).latencies()
        for metric in ("ttft", "tpot", "e2e"):
            assert ours[metric].tolist() == pytest.approx(full[metric].tolist(), nan_ok=True)


def test_validate_runs_from_the_pack_and_writes_the_summary(tmp_path, capsys):
    out = tmp_path / "docs" / "accuracy.md"
    assert main(["validate", "--summary", "--runs", "1", "-o", str(out)]) == 0  # roofline run: no database
    text = capsys.readouterr().out
    assert "| RTX 4090 · Llama-3.1-8B · TP1 |" in text and "mean absolute error" in text
    assert "####" not in text  # --summary: no per-statistic tables
    assert out.read_text() == text
    cells = re.findall(r"([+-]\d+\.\d) %", text.splitlines()[4])
    assert len(cells) == 6 and all(abs(float(c)) < 20 for c in cells)


def test_docs_accuracy_names_its_command_and_holds_the_pack_table():
    doc = (ROOT / "docs" / "accuracy.md").read_text()
    assert "servesim validate --summary --holdout -o docs/accuracy.md" in doc
    table = doc.split("<!-- servesim validate: begin -->")[1].split("<!-- servesim validate: end -->")[0]
    for run in openruns.RUNS:
        assert f"| {run.name} |" in table
    assert "first third" in table


def test_the_installed_cli_validates_from_a_built_wheel_away_from_the_checkout(tmp_path):
    """README's `servesim validate --summary` on a fresh install: the wheel as pip builds it
    (only what the package-data patterns ship), the installed console script, a working
    directory with no checkout and no ../shared beside it."""
    import os
    import subprocess
    import sys
    import zipfile

    wheels = tmp_path / "wheels"
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                            "-w", str(wheels), str(ROOT)], capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr
    (wheel,) = wheels.glob("servesim-*.whl")
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        archive.extractall(site)
    for run in openruns.RUNS:
        for path in run.files(openruns.PACK):
            assert "servesim/data/llmservingsim-vllm-validation/" + path.relative_to(openruns.PACK).as_posix() in names
    assert "servesim/data/llmservingsim-vllm-validation/LICENSE" in names

    home = tmp_path / "elsewhere"
    home.mkdir()
    env = {**os.environ, "PYTHONPATH": str(site), "HOME": str(home)}
    env.pop("SERVESIM_AIC_SYSTEMS_PATH", None)
    script = Path(sys.executable).parent / "servesim"
    where = subprocess.run([sys.executable, "-c", "import servesim; print(servesim.__file__)"],
                           cwd=home, env=env, capture_output=True, text=True, timeout=60)
    assert Path(where.stdout.strip()).is_relative_to(site), where  # the wheel's copy, not the checkout
    done = subprocess.run([str(script), "validate", "--summary", "--runs", "1", "-o", "accuracy.md"],
                          cwd=home, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert "| RTX 4090 · Llama-3.1-8B · TP1 |" in done.stdout and "mean absolute error" in done.stdout
    assert (home / "accuracy.md").read_text() == done.stdout
