"""One deployment-wide host KV pool (`host_offload.scope: cluster_shared`, issue 34), checked
against AISimulate 0.13's recorded runs (`tests/cases/upstream013/shared.json`, recorded by
`benchmarks/record_013_shared.py`; the reference is never run here)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from conftest import CASES

from servesim import simulate
from servesim.config.load import parse_config
from servesim.engine.cache.shared import SharedLink
from servesim.errors import ConfigError

RECORDED = json.loads((CASES / "upstream013" / "shared.json").read_text())
SCENARIOS = RECORDED["scenarios"]
FIELDS = ("arrival_time_ms", "input_length", "first_admit_ms", "ttft_ms", "e2e_latency_ms", "reused_input_tokens",
          "first_admission_g1_reused_input_tokens", "first_admission_host_reused_input_tokens", "admission_count",
          "admission_history")


def _config(scenario: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(json.dumps(r) + "\n" for r in scenario["trace"]))
    config = copy.deepcopy(scenario["config"])
    config["traffic"]["source"]["paths"] = [str(trace)]
    return config


def _records(report: dict[str, Any], pacers: int) -> list[dict[str, Any]]:
    ordered = sorted(report["per_request"], key=lambda r: (r["arrival_time_ms"], r["input_length"],
                                                          r.get("first_admit_ms") or 0.0))
    return [{k: r.get(k) for k in FIELDS} for r in ordered[pacers:]]


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_requests_match_013_field_for_field(name: str, tmp_path: Path) -> None:
    """Admission times, TTFT, E2E, reused tokens per tier and admission histories of every request
    but the pacers equal 0.13's."""
    scenario = SCENARIOS[name]
    report = simulate(parse_config(_config(scenario, tmp_path)), capture_per_request=True).to_dict()
    assert _records(report, scenario["pacers"]) == scenario["requests"]


def _admits(name: str) -> list[float]:
    return [r["first_admit_ms"] for r in SCENARIOS[name]["requests"]]


def test_the_recorded_runs_share_one_pool_and_one_link() -> None:
    """What the scenarios show of 0.13: a prompt computed on one worker comes back on the other;
    loads at once share the link's bandwidth (2 ms + 4 blocks of 128000 bytes at 10 MB/s =
    53.2 ms alone); the pool's capacity is the whole deployment's."""
    cross = SCENARIOS["cross-worker"]["requests"]
    assert [r["first_admission_host_reused_input_tokens"] for r in cross[2:]] == [384, 384]
    assert _admits("shared-link")[2:] == [355.0, 456.0]  # alone: 300 + 53.2 -> the pass at 355
    assert _admits("link-shared-together")[2:] == [405.0, 406.0]  # not 355 and 406 (one after the other)
    assert _admits("link-shared-staggered")[2] == 375.0  # 31 ms alone, then half the bandwidth: 373.4
    assert _admits("one-worker-together")[-2:] == [325.0, 325.0]
    assert SCENARIOS["pool-overflow"]["requests"][-1]["first_admission_host_reused_input_tokens"] == 0


def test_shared_link_shares_bandwidth_equally() -> None:
    """Processor sharing: alone a load takes its work; two at once each go at half the rate."""
    link = SharedLink(latency_ms=2.0)
    first = link.start(50.0, now=0.0)
    assert first.done == 52.0
    second = link.start(50.0, now=20.0)  # 30 ms of work left on the first: 60 ms at half rate
    assert first.done == pytest.approx(82.0) and second.done == pytest.approx(102.0)
    third = link.start(0.0, now=30.0)  # unlimited bandwidth: only the latency
    assert third.done == pytest.approx(32.0) and first.done == pytest.approx(82.0)


@pytest.mark.parametrize("changes, named", [
    ({"g3_offload": {"scope": "cluster_shared", "num_g3_blocks": 10}}, "g3_offload: behind a cluster_shared host_offload"),
    ({"kvcr": {}}, "kvcr: requires host_offload with scope dp_rank_local"),
])
def test_refused_combinations(changes: dict[str, Any], named: str, tmp_path: Path) -> None:
    """kvcr needs rank-local host tiers (0.13 refuses it too); a disk tier behind the shared pool
    is not built (0.13 accepts it), both exit 2 naming the key and the rule."""
    config = _config(SCENARIOS["cross-worker"], tmp_path)
    config["engine"]["workers"]["aggregated"]["kv_cache"].update(changes)
    with pytest.raises(ConfigError) as info:
        parse_config(config)
    assert named in str(info.value)


def test_report_html_names_the_shared_pool(tmp_path: Path) -> None:
    """report.html's KV-cache-tiers section says the host pool is shared by the role's ranks, and
    the loaded bytes agree with the host hits (4 blocks loaded per reuse of 3)."""
    from servesim.report.html.run import write_run_report

    scenario = SCENARIOS["cross-worker"]
    report = simulate(parse_config(_config(scenario, tmp_path)), capture_per_request=True, timeseries=True)
    tiers = report.extensions["kv_tiers"]
    assert tiers["shared_pool_ranks"] == 2 and tiers["host_reused_tokens"] == 768
    assert tiers["host_loaded_bytes"] == 2 * 4 * 128_000
    write_run_report(report, tmp_path / "report.html")
    assert "one pool shared by 2 ranks" in (tmp_path / "report.html").read_text()


def _close(a: Any, b: Any) -> bool:
    """Equal, floats to 1e-9 relative (0.13 sums job times in another order)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    if isinstance(a, float) or isinstance(b, float):
        return abs(a - b) <= 1e-9 * max(1.0, abs(a))
    return a == b


@pytest.mark.parametrize("name", [n for n in sorted(SCENARIOS) if SCENARIOS[n]["g3_offload"] is not None])
def test_shared_disk_summary_matches_013(name: str, tmp_path: Path) -> None:
    """`g3_offload.scope: cluster_shared`: the summary section (cross-worker reads, probes, hits,
    evictions, the pool's resident blocks once, read and write jobs and times) equals 0.13's."""
    scenario = SCENARIOS[name]
    section = simulate(parse_config(_config(scenario, tmp_path))).to_dict()["g3_offload"]
    assert _close(section, scenario["g3_offload"]), (section, scenario["g3_offload"])


def test_shared_disk_recorded_facts() -> None:
    """0.13: a read crosses workers; two reads at once share the link (101.5 ms each at 10 MB/s
    for 4 blocks, where alone one takes 51.3 ms); the pool's capacity is the deployment's."""
    assert SCENARIOS["g3-cross-worker"]["g3_offload"]["cross_worker_read_blocks"] == 4
    link = SCENARIOS["g3-shared-link"]["g3_offload"]["read"]
    assert link["completed_jobs"] == 2 and link["transfer_ms"] == 203.0
    assert SCENARIOS["g3-pool-overflow"]["g3_offload"]["resident_blocks"] == 8
