"""`recommend`'s outputs under --overwrite, interruption and planted links: the previous results
stay until a search has run to its end, nothing is written or deleted outside the output folder,
and a crafted ledger gives no script link on the search page."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from search_helpers import config

SERVESIM = [sys.executable, "-m", "servesim"]
SMALL = config(**{"optimizer.max_trials": 2})


def _recommend(tmp_path: Path, data: dict, *args: str) -> subprocess.CompletedProcess:
    path = tmp_path / "recommend.yaml"
    path.write_text(yaml.safe_dump(data))
    return subprocess.run([*SERVESIM, "recommend", "-c", str(path), "--output-dir", str(tmp_path / "out"), *args],
                          capture_output=True, text=True, timeout=120)


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _children(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return []


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs /proc to see the search's workers")
def test_sigterm_during_an_overwrite_keeps_the_previous_results(tmp_path: Path) -> None:
    assert _recommend(tmp_path, SMALL).returncode == 0
    before = _snapshot(tmp_path / "out")
    assert "recommendations/0001.yaml" in before
    slow = config(**{"optimizer.algorithm": "random", "optimizer.max_trials": 200, "optimizer.parallelism": 1,
                     "traffic.stop.requests": 400, "traffic.load.concurrency": 4,
                     "engine.workers.aggregated.scheduler.max_sequences": {"range": {"min": 1, "max": 64, "step": 1}}})
    path = tmp_path / "slow.yaml"
    path.write_text(yaml.safe_dump(slow))
    proc = subprocess.Popen([*SERVESIM, "recommend", "-c", str(path), "--output-dir", str(tmp_path / "out"),
                             "--overwrite"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not _children(proc.pid):  # the search's workers have started
        time.sleep(0.05)
    time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert "Traceback" not in err and "previous results" in err
    assert _snapshot(tmp_path / "out") == before


def test_a_symlinked_recommendations_folder_is_refused_and_its_target_untouched(tmp_path: Path) -> None:
    assert _recommend(tmp_path, SMALL).returncode == 0
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "0001.yaml").write_text("precious: 1\n")
    (elsewhere / "0002.yaml").write_text("precious: 2\n")
    for item in (tmp_path / "out" / "recommendations").iterdir():
        item.unlink()
    (tmp_path / "out" / "recommendations").rmdir()
    (tmp_path / "out" / "recommendations").symlink_to(elsewhere)
    done = _recommend(tmp_path, SMALL, "--overwrite")
    assert done.returncode == 2, done.stderr
    assert "recommendations is a symbolic link" in done.stderr and "Traceback" not in done.stderr
    assert sorted(p.name for p in elsewhere.iterdir()) == ["0001.yaml", "0002.yaml"]
    assert (elsewhere / "0001.yaml").read_text() == "precious: 1\n"


def _planted_link(tmp_path: Path, name: str, victim_name: str) -> tuple[Path, Path]:
    """An output folder `out` whose `name` is a symbolic link to a file outside it: (victim, out)."""
    victim = tmp_path / victim_name
    victim.write_text("do not touch\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / name).symlink_to(victim)
    return victim, out


def test_a_planted_temporary_symlink_is_not_written_through(tmp_path: Path) -> None:
    victim, out = _planted_link(tmp_path, "recommendation.json.tmp", "victim.txt")
    done = _recommend(tmp_path, SMALL, "--overwrite")
    assert done.returncode == 0, done.stderr
    assert victim.read_text() == "do not touch\n"
    assert json.loads((out / "recommendation.json").read_text())["candidates"]
    assert not (out / "recommendation.json").is_symlink()
    assert not [p.name for p in out.iterdir() if p.name.startswith(".servesim-")]


def test_a_planted_result_symlink_is_replaced_not_its_target(tmp_path: Path) -> None:
    victim, out = _planted_link(tmp_path, "recommendation.csv", "victim.csv")
    assert _recommend(tmp_path, SMALL, "--overwrite").returncode == 0
    assert victim.read_text() == "do not touch\n"
    assert not (out / "recommendation.csv").is_symlink()


def test_a_crafted_ledger_gives_no_script_link(tmp_path: Path) -> None:
    pytest.importorskip("plotly")
    from servesim.report.html.search import write_search_report

    assert _recommend(tmp_path, SMALL).returncode == 0
    ledger_path = tmp_path / "out" / "recommendation.json"
    ledger = json.loads(ledger_path.read_text())
    ranked = [c for c in ledger["candidates"] if c.get("rank")]
    ranked[0]["config_path"] = "javascript:alert(document.domain)"
    ranked[1]["config_path"] = " JavaScript:alert(1)//recommendations/0002.yaml"
    ledger_path.write_text(json.dumps(ledger))
    page = tmp_path / "out" / "page.html"
    write_search_report(ledger_path, page)
    text = page.read_text().lower()
    assert 'href="javascript' not in text and 'href=" javascript' not in text
    assert "javascript:alert(document.domain)" in text  # shown, as text


def test_the_report_links_the_recommendations(tmp_path: Path) -> None:
    pytest.importorskip("plotly")
    done = _recommend(tmp_path, SMALL, "--report")
    assert done.returncode == 0, done.stderr
    assert 'href="recommendations/0001.yaml"' in (tmp_path / "out" / "report.html").read_text()
    assert os.listdir(tmp_path / "out" / "recommendations") == ["0001.yaml", "0002.yaml"] or \
        sorted(os.listdir(tmp_path / "out" / "recommendations")) == ["0001.yaml", "0002.yaml"]
