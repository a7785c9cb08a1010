"""Rejected requests say why, the summary counts them, and a run where nothing completed says so
(and fails under `--unservable fail`) — issue 19, "Wrong or missing answers"."""

from __future__ import annotations

import json

import pytest

from hostile import run_in_process, write_config

AGG = "engine.workers.aggregated"
POOL_TOKENS = 200 * 16  # the base config's KV pool


def _predict(tmp_path, changes, *extra):
    config = write_config(tmp_path, changes)
    return run_in_process(["predict", "-c", str(config), "--output-dir", str(tmp_path / "o"), "--capture-per-request",
                           "--format", "json", *extra])


def _report(tmp_path):
    return json.loads((tmp_path / "o" / "prediction.json").read_text())


@pytest.mark.parametrize("backend", ["vllm", "trtllm", "sglang"])
def test_a_prompt_that_never_fits_the_pool_is_rejected_with_a_reason(tmp_path, backend):
    run = _predict(tmp_path, {"engine.backend": backend, "traffic.source.input_tokens": POOL_TOKENS + 300})
    run.assert_clean(0)
    report = _report(tmp_path)
    assert report["completed_requests"] == 0 and report["rejected_requests"] == 5
    for record in report["per_request"]:
        assert record["terminal_status"] == "rejected"
        assert "KV" in record["rejection_reason"] or "pool" in record["rejection_reason"]
    assert "no request completed" in run.message(tmp_path)


@pytest.mark.parametrize("backend", ["vllm", "trtllm", "sglang"])
def test_unservable_fail_stops_the_run(tmp_path, backend):
    """Every prompt over the pool: under --unservable fail the run fails, naming the pool (vLLM and
    TensorRT-LLM: nothing completed, and why the first was rejected; SGLang: at the first
    request, where the reference stalls) — never the internal invariant message."""
    run = _predict(tmp_path, {"engine.backend": backend, "traffic.source.input_tokens": POOL_TOKENS + 300},
                   "--unservable", "fail")
    run.assert_clean(1)
    message = run.message(tmp_path)
    assert "invariant" not in message and ("KV" in message or "pool" in message), message
    assert run.stdout == "" and not (tmp_path / "o" / "prediction.json").exists()


def test_unservable_fail_keeps_the_reference_rejections(tmp_path):
    """A vLLM prompt over the pool is rejected by the reference too: under --unservable fail it
    stays a rejection (with its reason) as long as something completed."""
    trace = tmp_path / "trace.jsonl"
    rows = [{"input_length": n, "output_length": 4, "hash_ids": list(range(i * 500, i * 500 + -(-n // 16)))}
            for i, n in enumerate((100, POOL_TOKENS + 300, 200))]
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    run = _predict(tmp_path, {"engine.context_length": 8192,
                              "traffic": {"source": {"type": "trace", "paths": [str(trace)], "block_size": 16},
                                          "load": {"type": "concurrency", "concurrency": 1}}},
                   "--unservable", "fail")
    run.assert_clean(0)
    report = _report(tmp_path)
    assert report["completed_requests"] == 2 and report["rejected_requests"] == 1
    assert [r["rejection_reason"] for r in report["per_request"] if r["terminal_status"] == "rejected"] == [
        f"its prompt of {POOL_TOKENS + 300} tokens needs {-(-(POOL_TOKENS + 300) // 16)} KV blocks, more than "
        f"the 200 of a rank's pool"]


def test_context_length_rejections_carry_a_reason(tmp_path):
    run = _predict(tmp_path, {"engine.context_length": 1000,
                              "traffic.source": {"type": "synthetic", "input_tokens": 1500, "output_tokens": 5}})
    run.assert_clean(0)
    report = _report(tmp_path)
    assert report["rejected_requests"] == 5 and report["completed_requests"] == 0
    assert all("context" in r["rejection_reason"] for r in report["per_request"])


def test_nothing_completed_under_unservable_fail_exits_non_zero(tmp_path):
    """A run that completed nothing while the user asked for `--unservable fail` fails — unless
    every request was rejected for the context length, which the reference reports (exit 0)."""
    run = _predict(tmp_path, {"traffic.source.input_tokens": POOL_TOKENS + 300}, "--unservable", "fail")
    assert run.returncode not in (0, None) and "Traceback" not in run.stderr
    assert "no request completed" in run.message(tmp_path)


def test_a_time_cap_before_any_completion_is_reported_under_unservable_fail(tmp_path):
    """Nothing rejected, nothing completed by the time cap: the reference reports the run (exit 0;
    difftest seed 9313)."""
    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(json.dumps({"timestamp": t, "input_length": 100, "output_length": 50,
                                         "hash_ids": [t, t + 1]}) + "\n" for t in (0, 1, 2)))
    config = write_config(tmp_path, {"traffic.source": {"type": "trace", "format": "mooncake", "paths": [str(trace)]},
                                     "traffic.load": {"type": "trace_timestamps"},
                                     "traffic.stop": {"max_virtual_time_seconds": 0.001}})
    run = run_in_process(["predict", "-c", str(config), "--output-dir", str(tmp_path / "o"), "--format", "json",
                          "--unservable", "fail"])
    run.assert_clean(0)
    assert "warning: no request completed" in run.stderr
    assert _report(tmp_path)["completed_requests"] == 0


def test_every_request_over_the_context_length_is_reported_under_unservable_fail(tmp_path):
    run = _predict(tmp_path, {"engine.context_length": 1000,
                              "traffic.source": {"type": "synthetic", "input_tokens": 1500, "output_tokens": 5}},
                   "--unservable", "fail")
    run.assert_clean(0)
    assert "warning: no request completed" in run.stderr and "context length" in run.stderr
    assert _report(tmp_path)["rejected_requests"] == 5


def test_a_mixed_run_counts_its_rejections(tmp_path):
    """Mixed run: some requests complete, the over-long ones are rejected with a reason, and the
    summary's count matches the records; no 'nothing completed' warning."""
    trace = tmp_path / "trace.jsonl"
    rows = [{"input_length": n, "output_length": 4, "hash_ids": list(range(i * 500, i * 500 + -(-n // 16)))}
            for i, n in enumerate((100, 5000, 200, 4096, 50))]
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    run = _predict(tmp_path, {"traffic": {"source": {"type": "trace", "paths": [str(trace)], "block_size": 16},
                                          "load": {"type": "concurrency", "concurrency": 2}}})
    run.assert_clean(0)
    report = _report(tmp_path)
    rejected = [r for r in report["per_request"] if r["terminal_status"] == "rejected"]
    assert len(rejected) == report["rejected_requests"] == 2
    assert all(r["rejection_reason"] for r in rejected)
    assert all("rejection_reason" not in r for r in report["per_request"] if r["terminal_status"] == "completed")
    assert report["completed_requests"] == 3 and "no request completed" not in run.message(tmp_path)


def test_summary_accounts_for_every_request(tmp_path):
    """completed + rejected + incomplete covers the input, also when a time cap stops the run."""
    trace = tmp_path / "trace.jsonl"
    rows = [{"timestamp": 1000 * i, "input_length": 100, "output_length": 4, "hash_ids": [i] * 7}
            for i in range(10)]
    rows[3]["input_length"] = 5000
    rows[3]["hash_ids"] = list(range(100, 100 + 313))
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    run = _predict(tmp_path, {"traffic": {"source": {"type": "trace", "paths": [str(trace)], "block_size": 16},
                                          "load": {"type": "trace_timestamps"},
                                          "stop": {"max_virtual_time_seconds": 5.5}}})
    run.assert_clean(0)
    report = _report(tmp_path)
    assert report["completed_requests"] == 5 and report["rejected_requests"] == 1
    assert report["incomplete_requests"] == 4
    assert report["num_requests"] == 6
