"""Cases the fuzzers found (`test_fuzz.py`, `tests/test_invariants.py`), kept as regression tests:
each once ended in a traceback or a hang."""

from __future__ import annotations

import json

from hostile import run_in_process, run_servesim, write_config

AGG = "engine.workers.aggregated"


def _trace(tmp_path, rows):
    path = tmp_path / "trace.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_speculative_decoding_preempting_a_request_that_finishes_in_the_same_pass(tmp_path):
    """Output-0 requests complete in the pass their prompt ends; a draft reservation preempted one
    of them first (KeyError in the vLLM core). It now runs again and completes later."""
    rows = [{"hash_ids": [20], "output_length": 9, "session_id": "S0", "timestamp": 1000.0}]
    rows += [{"hash_ids": [100 * i + 20], "output_length": 0, "session_id": f"S{i}", "timestamp": 1000.0}
             for i in range(1, 8)]
    config = write_config(tmp_path, {
        "engine.context_length": 60,
        f"{AGG}.scheduler": {"max_batched_tokens": 8, "max_sequences": 2},
        f"{AGG}.kv_cache": {"block_size": 4, "prefix_caching": False, "capacity": {"type": "fixed", "blocks": 6}},
        f"{AGG}.timing": {"type": "polynomial"},
        f"{AGG}.speculative": {"num_speculative_tokens": 2, "seed": 0, "acceptance_rates": []},
        "traffic": {"source": {"type": "trace", "paths": [_trace(tmp_path, rows)], "block_size": 8},
                    "load": {"type": "concurrency", "concurrency": 2}},
    })
    run = run_in_process(["predict", "-c", str(config), "--output-dir", str(tmp_path / "o"), "--format", "json"])
    run.assert_clean(0)
    report = json.loads(run.stdout)
    assert report["completed_requests"] + report["rejected_requests"] + report["incomplete_requests"] == 8


def test_unservable_sglang_request_under_a_planner(tmp_path):
    """A prompt larger than the whole SGLang pool, with the planner ticking: under `--unservable
    fail` the replay ticked for ever; now it stops with the reason (and is rejected by default)."""
    changes = {
        "engine.backend": "sglang",
        f"{AGG}.parallelism.replicas": 3,
        f"{AGG}.kv_cache": {"block_size": 16, "capacity": {"type": "fixed", "blocks": 7}},
        "planner": {"policy": "enabled", "target": "load", "load_adjustment_interval_seconds": 3,
                    "max_num_gpus": -1, "min_workers": 2},
        "traffic.source.input_tokens": 3366,
    }
    config = write_config(tmp_path, changes)
    failed = run_servesim(["predict", "-c", str(config), "--output-dir", str(tmp_path / "f"), "--unservable", "fail"],
                          timeout=30)
    failed.assert_clean(1)
    assert "can never be served" in failed.stderr
    rejected = run_in_process(["predict", "-c", str(config), "--output-dir", str(tmp_path / "r"), "--format", "json"])
    rejected.assert_clean(0)
    assert json.loads(rejected.stdout)["rejected_requests"] == 5
