"""Client timeouts (`traffic.client_timeout_seconds`): every request accounted for, KV freed."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servesim import simulate
from servesim.cli import main
from servesim.config import parse_config
from servesim.engine.vllm.core import VllmRank
from servesim.errors import ConfigError

HOST_FIELDS = ("wall_time_ms", "processed_tokens_per_s", "processed_output_tokens_per_s")


def _config(timeout: float | None, *, backend: str = "vllm", rate: float = 400.0, requests: int = 30,
            blocks: int = 60, max_sequences: int = 4, output: int = 20, timing: dict | None = None) -> dict:
    traffic = {"source": {"type": "synthetic", "input_tokens": 40, "output_tokens": output},
               "load": {"type": "poisson", "requests_per_second": rate, "seed": 1}, "stop": {"requests": requests}}
    if timeout is not None:
        traffic["client_timeout_seconds"] = timeout
    worker = {"scheduler": {"max_batched_tokens": 64, "max_sequences": max_sequences},
              "kv_cache": {"block_size": 8, "capacity": {"type": "fixed", "blocks": blocks}},
              "timing": timing or {"type": "fixed", "prefill_ms": 3, "decode_ms": 1}}
    return {"engine": {"model": "m", "hardware": "h200_sxm", "backend": backend, "context_length": 4096,
                       "workers": {"aggregated": worker}}, "traffic": traffic}


def test_overload_with_timeouts():
    report = simulate(_config(0.05), capture_per_request=True)
    records = report.per_request
    statuses = [r["terminal_status"] for r in records]
    assert report["timed_out_requests"] == statuses.count("timed_out") > 0
    assert report["num_requests"] == len(records) == 30
    assert report["completed_requests"] + report["timed_out_requests"] == 30
    for r in records:
        if r["terminal_status"] == "timed_out":
            assert r["terminal_time_ms"] == pytest.approx(r["arrival_time_ms"] + 50.0)
            assert r["last_token_ms"] is None or r["last_token_ms"] <= r["terminal_time_ms"]
            assert r["output_length"] < r["requested_output_length"]
        else:
            assert r["e2e_latency_ms"] <= 50.0
    assert report["max_e2e_latency_ms"] <= 50.0  # timed-out requests are not in the statistics


def test_no_timeouts_no_field_and_no_change():
    plain = simulate(_config(None)).to_dict()
    generous = simulate(_config(1000.0)).to_dict()
    assert "timed_out_requests" not in plain and generous.pop("timed_out_requests") == 0
    for key in HOST_FIELDS:
        plain.pop(key), generous.pop(key)
    assert plain == generous


def test_disaggregated_timeouts_are_refused():
    config = _config(1.0)
    worker = config["engine"]["workers"].pop("aggregated")
    config["engine"]["mode"] = "disaggregated"
    config["engine"]["workers"] = {"prefill": worker, "decode": worker}
    with pytest.raises(ConfigError, match="traffic.client_timeout_seconds: is supported with engine.mode 'aggregated' only"):
        parse_config(config)


def test_cli_reports_timed_out_requests(tmp_path, capsys):
    import yaml

    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(_config(0.05)))
    out = tmp_path / "out"
    assert main(["predict", "-c", str(path), "--output-dir", str(out), "--capture-per-request"]) == 0
    capsys.readouterr()
    report = json.loads((out / "prediction.json").read_text())
    lines = [json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines()]
    assert report["timed_out_requests"] == sum(1 for r in lines if r["terminal_status"] == "timed_out") > 0


@pytest.fixture
def checked_aborts(monkeypatch):
    """KV conservation after every abort of a vLLM rank."""
    original = VllmRank.abort

    def abort(self, request, pass_index):
        original(self, request, pass_index)
        self.pool.check()
        assert request not in self.running and request not in self.waiting and not request.lease

    monkeypatch.setattr(VllmRank, "abort", abort)


@st.composite
def scenarios(draw) -> dict:
    backend = draw(st.sampled_from(["vllm", "sglang", "trtllm"]))
    timing = draw(st.sampled_from([None, {"type": "fixed", "prefill_ms": 10, "decode_ms": 2},
                                   {"type": "roofline", "mixed_pass": "fused"}]))
    config = _config(draw(st.sampled_from([0.001, 0.01, 0.03, 0.2, 5.0])), backend=backend,
                     rate=draw(st.sampled_from([50.0, 300.0, 2000.0])), requests=draw(st.integers(1, 25)),
                     blocks=draw(st.sampled_from([12, 30, 200])), max_sequences=draw(st.sampled_from([1, 3, 16])),
                     output=draw(st.integers(1, 30)), timing=timing)
    if timing is not None and timing["type"] == "roofline":
        config["engine"]["model"] = "Qwen/Qwen3-8B"
    if draw(st.booleans()):
        config["engine"]["workers"]["aggregated"]["parallelism"] = {"replicas": 2, "attention_data": draw(st.integers(1, 2))}
    if draw(st.booleans()):
        config["engine"]["workers"]["aggregated"]["scheduler"]["async_scheduling"] = True
    return config


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(config=scenarios())
def test_every_request_is_accounted_for(config, checked_aborts):
    report = simulate(config, capture_per_request=True).to_dict()
    plain = simulate(config, capture_per_request=True, fast=False).to_dict()
    for key in HOST_FIELDS:
        report.pop(key), plain.pop(key)
    assert json.dumps(report, sort_keys=True) == json.dumps(plain, sort_keys=True)  # cohorts abort exactly
    records = report["per_request"]
    timeout_ms = 1000 * config["traffic"]["client_timeout_seconds"]
    statuses = [r["terminal_status"] for r in records]
    assert report["num_requests"] == len(records) == config["traffic"]["stop"]["requests"]
    assert set(statuses) <= {"completed", "rejected", "timed_out"}
    assert report["timed_out_requests"] == statuses.count("timed_out")
    assert report["completed_requests"] == statuses.count("completed")
    for r in records:
        if r["terminal_status"] == "timed_out":
            assert r["terminal_time_ms"] == pytest.approx(r["arrival_time_ms"] + timeout_ms)
            if r["last_token_ms"] is not None:
                assert r["last_token_ms"] <= r["terminal_time_ms"] + 1e-9
        elif r["terminal_status"] == "completed":
            assert r["e2e_latency_ms"] <= timeout_ms + 1e-9
