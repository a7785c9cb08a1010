"""`servesim serve`'s rules without a server: what it refuses before starting, how requests are
validated, how text is counted, and the live replay against `simulate`."""

from __future__ import annotations

import math

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from servesim.api import simulate
from servesim.live import live_replay
from servesim.cli import main
from servesim.collect.collector import Status
from servesim.serve.protocol import ApiError, Limits, parse_json, parse_request
from servesim.serve.tokens import EstimatedTokenizer, render_chat, tokenizer_for
from serve.conftest import QUICKSTART

LIMITS = Limits(("m",), 100, 16)
WORKER = {"parallelism": {"replicas": 1, "tensor": 1}, "scheduler": {"max_batched_tokens": 64, "max_sequences": 2},
          "kv_cache": {"block_size": 16, "capacity": {"type": "fixed", "blocks": 40}},
          "timing": {"type": "fixed", "prefill_ms": 3, "decode_ms": 1}}
SMALL = {"engine": {"model": "m", "hardware": "h200_sxm", "context_length": 4096, "workers": {"aggregated": WORKER}},
         "traffic": {"source": {"type": "synthetic", "input_tokens": 40, "output_tokens": 7},
                     "load": {"type": "concurrency", "concurrency": 1}, "stop": {"requests": 1}}}


def test_disaggregated_configs_are_refused_with_exit_2(tmp_path, capsys) -> None:
    config = {"engine": {"mode": "disaggregated", "model": "m", "hardware": "h200_sxm", "context_length": 4096,
                         "workers": {"prefill": WORKER, "decode": WORKER},
                         "kv_transfer": {"bytes_per_token": 50000, "bandwidth_gb_per_second": 20}}}
    path = tmp_path / "disagg.yaml"
    path.write_text(yaml.safe_dump(config))
    assert main(["serve", "-c", str(path), "--output-dir", str(tmp_path / "out")]) == 2
    assert "disaggregated" in capsys.readouterr().err


@pytest.mark.parametrize("option", [["--speed", "0"], ["--speed", "nan"], ["--port", "70000"],
                                    ["--default-max-tokens", "0"]])
def test_bad_options_are_usage_errors(option: list[str], tmp_path, capsys) -> None:
    assert main(["serve", "-c", str(QUICKSTART), "--output-dir", str(tmp_path / "out"), *option]) == 2
    assert option[0] in capsys.readouterr().err


@settings(max_examples=60, deadline=None)
@given(st.one_of(st.integers(max_value=0), st.integers(min_value=100), st.floats(), st.text(), st.booleans()))
def test_max_tokens_outside_1_to_the_context_is_refused(value: object) -> None:
    with pytest.raises(ApiError) as caught:
        parse_request({"model": "m", "prompt": [1], "max_tokens": value}, False, LIMITS, EstimatedTokenizer())
    assert caught.value.status == 400 and caught.value.param == "max_tokens"


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 2**31), min_size=1, max_size=60), st.integers(1, 40))
def test_valid_requests_keep_their_tokens(ids: list[int], max_tokens: int) -> None:
    parsed = parse_request({"model": "m", "prompt": ids, "max_tokens": max_tokens}, False, LIMITS, EstimatedTokenizer())
    assert parsed.token_ids == ids and parsed.max_tokens == max_tokens


def test_malformed_bodies_are_api_errors() -> None:
    for raw in (b"{", b"[1]", b"\xff", b"null"):
        with pytest.raises(ApiError):
            parse_json(raw)


@given(st.text(max_size=200))
def test_the_estimate_is_one_token_per_four_characters(text: str) -> None:
    ids = EstimatedTokenizer().encode(text)
    assert len(ids) == math.ceil(len(text) / 4) and all(i >= 0 for i in ids)
    assert EstimatedTokenizer().encode(text + "more") [:len(text) // 4] == ids[:len(text) // 4]  # prefixes agree


def test_a_local_tokenizer_json_is_used_when_tokenizers_is_installed(tmp_path) -> None:
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace

    tok = tokenizers.Tokenizer(WordLevel({"hello": 0, "world": 1, "[UNK]": 2}, unk_token="[UNK]"))
    tok.pre_tokenizer = Whitespace()
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    rule = tokenizer_for("m", str(path))
    assert rule.encode("hello world hello") == [0, 1, 0] and str(path) in rule.description


def test_no_local_tokenizer_means_the_estimate() -> None:
    assert isinstance(tokenizer_for("servesim-test/no-such-model"), EstimatedTokenizer)
    assert render_chat([("user", "hi")]) == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


class Tokens:
    def __init__(self) -> None:
        self.times: list[float] = []
        self.request = None
        self.status = None

    def on_placed(self, arrival, request, worker, now) -> None:
        self.request = request

    def on_ended(self, record, now) -> None:
        self.status = record.status

    def on_pass_end(self, label, worker, outcome, now) -> None:
        if self.request is not None and self.request.generated > len(self.times):
            self.times += [now] * (self.request.generated - len(self.times))


def test_a_live_replay_times_a_request_as_simulate_does() -> None:
    expected = simulate(SMALL, capture_per_request=True).per_request[0]
    live = live_replay(SMALL)
    seen = Tokens()
    live.cluster.request_observers.append(seen)
    live.cluster.observers.append(seen)
    live.driver.add("a", 0.0, list(range(40)), 7)
    live.run_until(10_000)
    assert seen.status is Status.COMPLETED and len(seen.times) == 7
    assert seen.times[0] == pytest.approx(expected["first_token_ms"])
    assert seen.times[-1] == pytest.approx(expected["last_token_ms"])
    report = live.finish()
    assert report.summary["completed_requests"] == 1


def test_a_hang_up_frees_the_request_and_records_it_timed_out() -> None:
    live = live_replay(SMALL)
    live.driver.add("a", 0.0, list(range(40)), 500)
    live.run_until(20.0)
    rid = live.cluster.open_requests()[0]
    assert live.hang_up(rid)
    live.run_until(40.0)
    assert live.cluster.in_flight() == 0
    assert all(rank.pool.active_blocks == 0 for w in live.cluster.pools["decode"].workers for rank in w.ranks)
    assert not live.hang_up(rid)  # already ended
    report = live.finish()
    assert report.summary["timed_out_requests"] == 1 and report.per_request[0]["terminal_status"] == "timed_out"
    assert 0 < report.per_request[0]["output_length"] < 500
