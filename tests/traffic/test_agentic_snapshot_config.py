"""Bad `agentic_snapshot` / `agentic_warmup` / `agentic_profile` settings: config errors (exit 2)
that name the key and the rule (0.13's rules and what servesim has not built); a cut outside its
play or an unknown play stops the run (exit 1, as in 0.13)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import CASES

CASE = CASES / "weka" / "snap-lanes2-seedcut"
BETA, GAMMA = "weka:e3d8d5a7ba5f60f0:play:beta", "weka:56c6fa620555e68f:play:gamma"
ALPHA = "weka:aeca4954cc94d3e7:play:alpha"


def _run(tmp_path: Path, load: dict) -> subprocess.CompletedProcess:
    config = yaml.safe_load((CASE / "config.yaml").read_text())
    config["traffic"]["load"] = {"type": "trace_timestamps", "speedup": 1.5, "agentic_lanes": 2, **load}
    config["traffic"]["source"]["paths"] = [str(CASE / "three.jsonl")]
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return subprocess.run([sys.executable, "-m", "servesim", "predict", "-c", str(path), "--format", "json",
                           "--compat", "reference", "--output-dir", str(tmp_path / "out"), "--overwrite"],
                          capture_output=True, text=True, timeout=120)


def _snap(*cuts: tuple[str, float], cursor: int | None = 2, seed: int = 4) -> dict:
    out: dict = {"seed": seed, "initial_selections": [{"source_play_id": p, "t_star_ms": t} for p, t in cuts]}
    if cursor is not None:
        out["corpus_cursor"] = cursor
    return out


@pytest.mark.parametrize(("load", "key", "rule"), [
    ({"agentic_warmup": True}, "traffic.load.agentic_warmup", "requires agentic_snapshot"),
    ({"agentic_profile": {"duration_seconds": 5}}, "traffic.load.agentic_profile", "requires agentic_snapshot"),
    ({"agentic_lanes": None, "agentic_snapshot": _snap((BETA, 0.0), (GAMMA, 0.0))},
     "traffic.load.agentic_snapshot", "requires positive agentic_lanes"),
    ({"agentic_snapshot": _snap((BETA, 0.0), (GAMMA, 0.0), cursor=None)},
     "traffic.load.agentic_snapshot", "initial_selections and corpus_cursor must be specified together"),
    ({"agentic_snapshot": _snap((BETA, 0.0))}, "traffic.load.agentic_snapshot.initial_selections",
     "exactly one selection per lane"),
    ({"agentic_snapshot": _snap((BETA, 0.0), (GAMMA, 0.0), cursor=1)}, "traffic.load.agentic_snapshot.corpus_cursor",
     "cannot precede the initial lane draws"),
    ({"agentic_snapshot": _snap((BETA, -1.0), (GAMMA, 0.0))}, "traffic.load.agentic_snapshot.initial_selections[0].t_star_ms", "must be >= 0"),
    ({"agentic_snapshot": _snap((BETA, 0.0), (GAMMA, 0.0), seed=-1)}, "traffic.load.agentic_snapshot.seed", ""),
    ({"agentic_snapshot": _snap((BETA, 0.0), (GAMMA, 0.0)), "agentic_warmup_policy": "live_trajectory_v1"},
     "traffic.load.agentic_warmup_policy", "live_trajectory_v1 requires agentic_warmup and agentic_profile"),
    ({"agentic_snapshot": _snap((BETA, 0.0), (GAMMA, 0.0)), "agentic_warmup": True,
      "agentic_warmup_policy": "live_trajectory_v1"},
     "traffic.load.agentic_warmup_policy", "live_trajectory_v1 requires agentic_warmup and agentic_profile"),
    ({"agentic_warmup_policy": "fast"}, "traffic.load.agentic_warmup_policy", "repeated_prefixes"),
])
def test_bad_settings_are_config_errors(tmp_path: Path, load: dict, key: str, rule: str) -> None:
    result = _run(tmp_path, load)
    assert result.returncode == 2, result.stderr
    assert key in result.stderr and rule in result.stderr, result.stderr


@pytest.mark.parametrize(("cut", "message"), [
    ((GAMMA, 310.5), "snapshot cut must lie within recorded request-start bounds [0, 310]"),
    (("weka:nope:play:x", 0.0), "unknown snapshot source play weka:nope:play:x"),
    # alpha's outer:3 (1200 ms, history) joins a subagent request of 1450 ms (replayed): 0.13's words
    ((ALPHA, 1300.0), "snapshot boundary crosses a historical request's unresolved dependency: "
                      "weka:aeca4954cc94d3e7:request:outer:3"),
])
def test_bad_cuts_stop_the_run(tmp_path: Path, cut: tuple[str, float], message: str) -> None:
    result = _run(tmp_path, {"agentic_snapshot": _snap((BETA, 0.0), cut)})
    assert result.returncode == 1, result.stderr
    assert message in result.stderr


def test_a_policy_without_warmup_changes_nothing(tmp_path: Path) -> None:
    plain = _run(tmp_path, {"agentic_snapshot": _snap((BETA, 100.0), (GAMMA, 0.0))})
    with_policy = _run(tmp_path, {"agentic_snapshot": _snap((BETA, 100.0), (GAMMA, 0.0)),
                                  "agentic_warmup_policy": "repeated_prefixes"})
    assert plain.returncode == with_policy.returncode == 0
    a, b = json.loads(plain.stdout), json.loads(with_policy.stdout)
    assert a["agentic_snapshots"] == b["agentic_snapshots"] and a["num_requests"] == b["num_requests"] == 11  # beta: 8 of 9 from 100 ms, gamma: all 3


def test_a_seed_alone_draws_every_lane_as_upstream(tmp_path: Path) -> None:
    """Without `initial_selections` lane k starts in the k-th play of the corpus, cut inside the
    middle half of its recorded span; seed 4 draws the cuts that 0.13 drew and the recorded case
    `snap-lanes2-seedcut` gives explicitly, so the runs are the same."""
    drawn = _run(tmp_path / "drawn", {"agentic_snapshot": {"seed": 4}})
    explicit = yaml.safe_load((CASE / "config.yaml").read_text())["traffic"]["load"]["agentic_snapshot"]
    given = _run(tmp_path / "given", {"agentic_snapshot": explicit})
    assert drawn.returncode == given.returncode == 0, drawn.stderr
    a, b = json.loads(drawn.stdout), json.loads(given.stdout)
    assert a["agentic_snapshots"] == b["agentic_snapshots"]
    assert [(s["source_play_id"], s["t_star_ms"]) for s in a["agentic_snapshots"]] == [
        (s["source_play_id"], s["t_star_ms"]) for s in explicit["initial_selections"]]
    for s in a["agentic_snapshots"]:
        assert 0.25 <= s["t_star_ms"] / s["recorded_last_start_ms"] < 0.75
    other = _run(tmp_path / "other", {"agentic_snapshot": {"seed": 5}})
    assert [s["t_star_ms"] for s in json.loads(other.stdout)["agentic_snapshots"]] != [
        s["t_star_ms"] for s in a["agentic_snapshots"]]


def test_a_seeded_draw_with_more_lanes_than_plays_replays_plays_again(tmp_path: Path) -> None:
    """Lane k draws the (k mod plays)-th play (0.13): lane 3 replays lane 0's play, cut elsewhere."""
    result = _run(tmp_path, {"agentic_lanes": 4, "agentic_snapshot": {"seed": 4}})
    assert result.returncode == 0, result.stderr
    snaps = json.loads(result.stdout)["agentic_snapshots"]
    assert [s["lane_id"] for s in snaps] == [0, 1, 2, 3]
    assert snaps[3]["source_play_id"] == snaps[0]["source_play_id"] != snaps[1]["source_play_id"]
    assert snaps[3]["t_star_ms"] != snaps[0]["t_star_ms"] and snaps[3]["play_id"] != snaps[0]["play_id"]
