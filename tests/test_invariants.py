"""Invariants on random small deployments and workloads (property-based).

* every request in the input ends completed or rejected (or, under a time cap, incomplete);
* per request, timestamps never decrease: arrival ≤ admissions ≤ tokens ≤ terminal;
* KV blocks are conserved after every pass and all released at the end;
* the fast path (implicitly advanced decode cohorts) gives byte-identical reports.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servesim import simulate
from servesim.config import parse_config
from servesim.engine.vllm import VllmRank

HOST_FIELDS = ("wall_time_ms", "processed_tokens_per_s", "processed_output_tokens_per_s")


@st.composite
def trace_rows(draw, trace_block: int) -> list[dict]:
    prefixes = [[1, 2, 3, 4, 5, 6], [1, 2, 7, 8, 9, 10], [11, 12, 13, 14, 15, 16]]
    rows = []
    t = 0.0
    for s in range(draw(st.integers(1, 10))):
        t += draw(st.sampled_from([0, 0, 1, 5, 12.5]))
        for k in range(draw(st.integers(1, 3))):
            n = draw(st.integers(1, 5))
            hashes = draw(st.sampled_from(prefixes))[:n] if draw(st.booleans()) else [100 * s + 10 * k + i + 20 for i in range(n)]
            row = {"hash_ids": hashes, "output_length": draw(st.integers(0, 25)), "session_id": f"S{s}"}
            if draw(st.booleans()):
                row["input_length"] = draw(st.integers((n - 1) * trace_block + 1, n * trace_block))
            if k == 0:
                row["timestamp"] = 1000 + t
            else:
                row["delay"] = draw(st.sampled_from([0, 1, 7.5]))
            rows.append(row)
    return rows


@st.composite
def scenarios(draw) -> tuple[dict, list[dict] | None]:
    block = draw(st.sampled_from([4, 8, 16]))
    worker = {
        "parallelism": {"replicas": draw(st.integers(1, 3)), "attention_data": draw(st.integers(1, 2))},
        "scheduler": {"max_batched_tokens": draw(st.sampled_from([8, 16, 40, 64, 512])),
                      "max_sequences": draw(st.sampled_from([1, 2, 3, 8]))},
        "kv_cache": {"block_size": block, "prefix_caching": draw(st.booleans()),
                     "capacity": {"type": "fixed", "blocks": draw(st.sampled_from([6, 10, 16, 40, 400]))}},
        "timing": draw(st.sampled_from([{"type": "polynomial"},
                                        {"type": "fixed", "prefill_ms": 3.3, "decode_ms": 0.7},
                                        {"type": "fixed", "prefill_ms": 10, "decode_ms": 2}])),
    }
    if draw(st.booleans()):
        worker["scheduler"]["preemption_mode"] = draw(st.sampled_from(["lifo", "fifo"]))
    if draw(st.booleans()):
        nextn = draw(st.integers(1, 4))
        worker["speculative"] = {"num_speculative_tokens": nextn, "seed": draw(st.integers(0, 99)),
                                 "acceptance_rates": draw(st.lists(st.sampled_from([0, 0.4, 0.9, 1]), max_size=nextn))}
    engine = {"model": "m", "hardware": "h200_sxm", "context_length": draw(st.sampled_from([60, 120, 4096])),
              "workers": {"aggregated": worker}}
    if draw(st.booleans()):
        trace_block = draw(st.sampled_from([8, 16, 32]))
        rows = draw(trace_rows(trace_block))
        load = (draw(st.sampled_from([{"type": "trace_timestamps"}, {"type": "trace_timestamps", "speedup": 2}]))
                if draw(st.booleans()) else {"type": "concurrency", "concurrency": draw(st.integers(1, 4))})
        fmt = draw(st.sampled_from(["mooncake", "mooncake-delta"]))
        traffic = {"source": {"type": "trace", "paths": ["trace.jsonl"], "format": fmt, "block_size": trace_block},
                   "load": load}
        if draw(st.booleans()):
            traffic["stop"] = {"max_virtual_time_seconds": draw(st.sampled_from([0.02, 0.1]))}
        return {"engine": engine, "traffic": traffic}, rows
    source = {"type": "synthetic", "input_tokens": draw(st.integers(1, 90)), "output_tokens": draw(st.integers(1, 12))}
    load = (draw(st.sampled_from([{"type": "poisson", "requests_per_second": 300, "seed": 5},
                                  {"type": "constant_rate", "requests_per_second": 150}]))
            if draw(st.booleans()) else {"type": "concurrency", "concurrency": draw(st.integers(1, 5))})
    traffic = {"source": source, "load": load, "stop": {"requests": draw(st.integers(1, 12))}}
    return {"engine": engine, "traffic": traffic}, None


def _run(config: dict, rows: list[dict] | None, tmp: Path, fast: bool):
    if rows is not None:
        (tmp / "trace.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    try:
        return simulate(parse_config(config, base_dir=tmp), capture_per_request=True, fast=fast).to_dict()
    except Exception as exc:  # noqa: BLE001 - unservable requests end the run the way the reference does
        return type(exc).__name__ + ": " + str(exc)


@pytest.fixture
def checked_passes(monkeypatch):
    """Check KV conservation and monotone pass ends after every rank pass."""
    original = VllmRank.run_pass

    def run_pass(self, pass_index):
        result = original(self, pass_index)
        self.pool.check()
        private = 0
        refs: dict[int, list] = {}
        for request in list(self.running) + list(self.waiting):
            for block in request.lease:
                if block is None:
                    private += 1
                else:
                    refs.setdefault(id(block), [block, 0])[1] += 1
        assert all(block.refs == n for block, n in refs.values()), "reference counts match the leases"
        assert private + len(refs) == self.pool.active_blocks, "every active block is held by a request"
        return result

    monkeypatch.setattr(VllmRank, "run_pass", run_pass)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(scenario=scenarios())
def test_random_deployments_keep_invariants(scenario, tmp_path, checked_passes):
    config, rows = scenario
    report = _run(config, rows, tmp_path, fast=True)
    plain = _run(config, rows, tmp_path, fast=False)
    if isinstance(report, str):
        assert report == plain
        assert "in-flight requests remaining" in report
        return
    assert not isinstance(plain, str)
    for key in HOST_FIELDS:
        report.pop(key), plain.pop(key)
    assert json.dumps(report, sort_keys=True) == json.dumps(plain, sort_keys=True)

    capped = "stop" in config["traffic"] and "max_virtual_time_seconds" in config["traffic"]["stop"]
    records = report["per_request"]
    expected_total = len(rows) if rows is not None else config["traffic"]["stop"]["requests"]
    assert report["num_requests"] <= expected_total
    if not capped:
        assert report["num_requests"] == expected_total == len(records)
    statuses = {r["terminal_status"] for r in records}
    assert statuses <= {"completed", "rejected"}
    assert report["completed_requests"] == sum(1 for r in records if r["terminal_status"] == "completed" and r["admission_count"])
    for r in records:
        admissions = [a["at_ms"] for a in r["admission_history"]]
        assert admissions == sorted(admissions)
        times = [r["arrival_time_ms"]] + admissions[:1]
        times += [t for t in (r["first_token_ms"], r["last_token_ms"], r["terminal_time_ms"]) if t is not None]
        assert times == sorted(times), r
        assert r["output_length"] <= r["requested_output_length"]
        if r["terminal_status"] == "rejected" and "rejection_reason" not in r:
            assert r["output_length"] == 0 and r["admission_count"] == 0
