"""The `servesim predict` command, run in-process: outputs, formats, exit codes, determinism."""

from __future__ import annotations

import json
import shutil

import pytest
from conftest import CASES, canonical, without_host_fields

from servesim.cli import main

CASE01 = CASES / "replay/01-fixed-synthetic-concurrency/config.yaml"


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_table_output_and_files(tmp_path, capsys):
    out_dir = tmp_path / "out"
    code, out, _ = _run(capsys, "predict", "-c", str(CASE01), "--output-dir", str(out_dir))
    assert code == 0
    assert out.startswith("servesim: Qwen/Qwen3-8B on h200_sxm · vllm · aggregated, 1 × (tp 1, pp 1, dp 1) · 1 GPU\n"
                          "Load: concurrency 2 · 5 requests · synthetic 256 → 8 tokens\n")
    assert "\nNVIDIA AIPerf | LLM Metrics\n" in out and "SLA:" not in out  # no SLA, no verdict
    assert "Time to First Token (ms)" in out and f"Saved full report to: {out_dir}/prediction.json" in out
    report = json.loads((out_dir / "prediction.json").read_text())
    assert report["completed_requests"] == 5 and "per_request" not in report
    assert not (out_dir / "requests.jsonl").exists()


def test_json_output_with_per_request_records(tmp_path, capsys):
    """The records go to the files; `--stdout-per-request` also prints them (the reference's way)."""
    code, out, _ = _run(capsys, "predict", "-c", str(CASE01), "--output-dir", str(tmp_path / "s"),
                        "--format", "json", "--capture-per-request")
    assert code == 0 and "per_request" not in json.loads(out)
    code, out, _ = _run(capsys, "predict", "-c", str(CASE01), "--output-dir", str(tmp_path / "o"),
                        "--format", "json", "--capture-per-request", "--stdout-per-request")
    assert code == 0
    line = json.loads(out)
    assert len(line["per_request"]) == 5
    records = (tmp_path / "o" / "requests.jsonl").read_text().splitlines()
    assert [json.loads(r) for r in records] == line["per_request"]
    assert list(json.loads((tmp_path / "o" / "prediction.json").read_text())) == sorted(line)


def test_reruns_are_byte_identical_apart_from_wall_time(tmp_path, capsys):
    case = CASES / "replay/09-synthetic-session-shared-prefix/config.yaml"
    outputs = []
    for name in ("a", "b"):
        assert _run(capsys, "predict", "-c", str(case), "--output-dir", str(tmp_path / name),
                    "--capture-per-request")[0] == 0
        report = json.loads((tmp_path / name / "prediction.json").read_text())
        outputs.append((canonical(report), (tmp_path / name / "requests.jsonl").read_text()))
    assert outputs[0] == outputs[1]


def test_set_overrides_apply_before_validation(tmp_path, capsys):
    code, out, _ = _run(capsys, "predict", "-c", str(CASE01), "--output-dir", str(tmp_path / "o"),
                        "--format", "json", "--set", "traffic.stop.requests=3",
                        "--set", "engine.workers.aggregated.timing={type: fixed, prefill_ms: 4, decode_ms: 1}")
    assert code == 0
    report = json.loads(out)
    assert report["completed_requests"] == 3 and report["mean_ttft_ms"] == 5.0


@pytest.mark.parametrize("args, message", [
    (["--set", "engine.workers.aggregated.kv_cache.capacity.blocks=0"], "engine.workers.aggregated.kv_cache.capacity.blocks"),
    (["--set", "traffic.load.concurrency=two"], "traffic.load.concurrency"),
    (["--set", "output.dir=x"], "output"),
    (["--set", "noequals"], "noequals"),
])
def test_config_errors_exit_2_naming_the_key(tmp_path, capsys, args, message):
    code, out, err = _run(capsys, "predict", "-c", str(CASE01), "--output-dir", str(tmp_path / "o"), *args)
    assert code == 2 and out == ""
    assert err.startswith(f"servesim: error: {CASE01}: ") and message in err
    assert err.count(str(CASE01)) == 1, "the file is named once"


def test_missing_config_file_exits_2(tmp_path, capsys):
    code, _, err = _run(capsys, "predict", "-c", str(tmp_path / "nope.yaml"), "--output-dir", str(tmp_path / "o"))
    assert code == 2 and err.count("nope.yaml") == 1


def test_non_empty_output_dir_needs_overwrite(tmp_path, capsys):
    out_dir = tmp_path / "o"
    out_dir.mkdir()
    (out_dir / "keep.txt").write_text("mine")
    (out_dir / "prediction.json").write_text("{}")
    code, _, err = _run(capsys, "predict", "-c", str(CASE01), "--output-dir", str(out_dir))
    assert code == 2 and "--overwrite" in err
    assert _run(capsys, "predict", "-c", str(CASE01), "--output-dir", str(out_dir), "--overwrite")[0] == 0
    assert (out_dir / "keep.txt").read_text() == "mine"
    assert json.loads((out_dir / "prediction.json").read_text())["completed_requests"] == 5


def test_malformed_trace_exits_1_naming_file_and_line(tmp_path, capsys):
    case_dir = tmp_path / "case"
    shutil.copytree(CASES / "replay/05-mooncake-prefix-cache", case_dir)
    trace = case_dir / "trace.jsonl"
    lines = trace.read_text().splitlines()
    lines[2] = '{"hash_ids": [1, 9], "output_length": "four"}'
    trace.write_text("\n".join(lines) + "\n")
    code, out, err = _run(capsys, "predict", "-c", str(case_dir / "config.yaml"), "--output-dir", str(tmp_path / "o"))
    assert code == 1 and out == ""
    assert err.startswith("servesim predict failed: TraceError: ") and f"{trace}:3:" in err and "output_length" in err


def test_unservable_request_exits_1_when_asked_to_fail(tmp_path, capsys):
    config = CASES / "engine/05-trtllm-no-evict/config-vllm-overlong.yaml"
    code, _, err = _run(capsys, "predict", "-c", str(config), "--output-dir", str(tmp_path / "o"),
                        "--unservable", "fail")
    assert code == 1 and "in-flight requests remaining" in err
    code, out, _ = _run(capsys, "predict", "-c", str(config), "--output-dir", str(tmp_path / "o2"),
                        "--format", "json")
    assert code == 0 and json.loads(out)["num_requests"] == 1


def test_compat_reference_stops_at_an_unservable_request_as_the_reference_does(tmp_path, capsys):
    """`--compat reference` (or the config key) implies the reference's handling of a request that
    can never fit; an explicit `--unservable reject` still wins."""
    config = CASES / "engine/05-trtllm-no-evict/config-vllm-overlong.yaml"
    for flags in (["--compat", "reference"], ["--set", "compat=reference"]):
        code, _, err = _run(capsys, "predict", "-c", str(config), "--output-dir", str(tmp_path / flags[0]), *flags)
        assert code == 1 and "in-flight requests remaining" in err
    code, out, _ = _run(capsys, "predict", "-c", str(config), "--output-dir", str(tmp_path / "r"),
                        "--compat", "reference", "--unservable", "reject", "--format", "json")
    assert code == 0 and json.loads(out)["num_requests"] == 1


def test_compat_reference_writes_exactly_the_reference_fields(tmp_path, capsys):
    config = CASES / "replay/10-max-virtual-time-cap/config.yaml"
    expected = json.loads(config.with_name("report.json").read_text())
    expected.pop("per_request", None)
    code, out, _ = _run(capsys, "predict", "-c", str(config), "--output-dir", str(tmp_path / "o"),
                        "--compat", "reference", "--format", "json")
    assert code == 0 and set(json.loads(out)) == set(expected)
    code, out, _ = _run(capsys, "predict", "-c", str(config), "--output-dir", str(tmp_path / "p"), "--format", "json")
    assert code == 0 and "incomplete_requests" in json.loads(out)


FIFO_SPEC_LIVELOCK = """
engine:
  model: m
  hardware: h200_sxm
  backend: vllm
  context_length: 4096
  workers:
    aggregated:
      parallelism: {replicas: 1, attention_data: 1}
      scheduler: {max_batched_tokens: 8, max_sequences: 3, preemption_mode: fifo}
      kv_cache: {block_size: 4, prefix_caching: true, capacity: {type: fixed, blocks: 6}}
      timing: {type: fixed, prefill_ms: 3.3, decode_ms: 0.7}
      speculative: {num_speculative_tokens: 3, seed: 12, acceptance_rates: []}
traffic:
  source: {type: synthetic, input_tokens: 10, output_tokens: 6}
  load: {type: constant_rate, requests_per_second: 150}
  stop: {requests: 10}
"""


def test_a_livelock_the_reference_spins_in_exits_1(tmp_path, capsys):
    """Two requests that preempt each other for ever (tests/cases/engine/12-…): the reference
    never returns; servesim stops at once with exit code 1."""
    config = tmp_path / "livelock.yaml"
    config.write_text(FIFO_SPEC_LIVELOCK)
    code, out, err = _run(capsys, "predict", "-c", str(config), "--output-dir", str(tmp_path / "o"))
    assert code == 1 and out == ""
    assert "evicts and readmits its 10 requests for ever without emitting a token" in err


def test_progress_line_shows_simulated_time_only_on_a_shared_clock(capsys):
    from servesim.api import ProgressMeter
    from servesim.collect.collector import Collector

    meter = ProgressMeter(10, Collector())
    meter.started -= 5.0  # as if the run had been going for a while
    meter.last -= 5.0
    meter(12_500.0)
    meter.last -= 1.0
    meter(None)
    meter.close()
    first, second = capsys.readouterr().err.strip("\n").split("\r")[1:]
    assert "0/10 requests" in first and "simulated 12.5 s" in first
    assert "0/10 requests" in second and "simulated" not in second


KV_ROUTER = CASES / "dynamo/kv-2w-prefix16-r20/config.yaml"
PLANNER = CASES / "dynamo/planner-load-kv-burst/config.yaml"


@pytest.mark.parametrize("config, section", [(KV_ROUTER, "router"), (PLANNER, "planner")])
def test_engine_stack_refuses_the_dynamo_sections(tmp_path, capsys, config, section):
    code, out, err = _run(capsys, "predict", "--stack", "engine", "-c", str(config), "--output-dir", str(tmp_path / "o"))
    assert code == 2 and out == ""
    assert f"{section}: config adapter 'engine.{section}' is unavailable" in err and "--stack dynamo" in err
    assert not (tmp_path / "o").exists()


def test_stacks_that_accept_a_config_run_it_unchanged(tmp_path, capsys):
    runs = {}
    for stack in (None, "engine", "dynamo"):
        flag = ["--stack", stack] if stack else []
        code, out, _ = _run(capsys, "predict", *flag, "-c", str(CASE01), "--format", "json",
                            "--output-dir", str(tmp_path / str(stack)))
        assert code == 0
        runs[stack] = without_host_fields(json.loads(out))
    assert runs[None] == runs["engine"] == runs["dynamo"]
    code, out, _ = _run(capsys, "predict", "--stack", "dynamo", "-c", str(KV_ROUTER), "--format", "json",
                        "--output-dir", str(tmp_path / "kv"))
    assert code == 0 and json.loads(out)["completed_requests"] == 400


def test_unknown_stack_exits_2(tmp_path, capsys):
    code, _, err = _run(capsys, "predict", "--stack", "vllm", "-c", str(CASE01), "--output-dir", str(tmp_path / "o"))
    assert code == 2 and "stack 'vllm' is unavailable; installed stacks: dynamo, engine" in err


def test_unknown_backend_version_exits_2_naming_the_available_ones(tmp_path, capsys, reference_systems, monkeypatch):
    monkeypatch.delenv("SERVESIM_AIC_SYSTEMS_PATH", raising=False)
    config = CASES / "replay/03-default-timing-aic/config.yaml"
    code, out, err = _run(capsys, "predict", "-c", str(config), "--output-dir", str(tmp_path / "o"),
                          "--set", "engine.backend_version='9.9.9'")
    assert code == 2 and out == ""
    assert err.startswith(f"servesim: error: {config}: engine.backend_version '9.9.9': ")
    assert "available: 0.1.dev19262, 0.14.0, 0.18.0, 0.19.0, 0.22.0, 0.24.0 (or 'current')" in err
