"""`servesim serve` end to end: a real server on a loopback port, driven by the official
`openai` client and by raw HTTP (httpx)."""

from __future__ import annotations

import json
import math
import re
import threading
import time

import httpx
import openai
import pytest
import yaml

from servesim.api import simulate
from serve.conftest import QUICKSTART, LiveServer

MODEL = "Qwen/Qwen3-32B-FP8"


def client(server: LiveServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=60)


def predicted(input_tokens: int, output_tokens: int) -> dict:
    """`servesim predict`'s numbers for one request of these lengths at concurrency 1."""
    config = yaml.safe_load(QUICKSTART.read_text())
    config["traffic"] = {"source": {"type": "synthetic", "input_tokens": input_tokens, "output_tokens": output_tokens},
                         "load": {"type": "concurrency", "concurrency": 1}, "stop": {"requests": 1}}
    return simulate(config).summary


def text_of(tokens: int, seed: int) -> str:
    """A prompt of exactly `tokens` tokens under the estimate (4 characters each), unlike any
    other seed's from its first token on (so it shares no cached prefix)."""
    return "".join(f"{seed:02d}{i % 100:02d}" for i in range(tokens))


def stream_timing(server: LiveServer, prompt: str, max_tokens: int) -> tuple[float, float, dict]:
    """(TTFT s, mean ITL s, usage) of one streamed completion, as the client sees them (after a
    short request on the same client: its connection and first-request set-up are not timed).
    The prompt is text: the client takes ~50 µs per element of a token-id list to prepare it."""
    api = client(server)
    for _ in api.completions.create(model=MODEL, prompt="warm-up " + prompt[:8], max_tokens=2, stream=True):
        pass
    stamps = []
    usage = None
    started = time.perf_counter()
    stream = api.completions.create(model=MODEL, prompt=prompt, max_tokens=max_tokens, stream=True,
                                               stream_options={"include_usage": True})
    for chunk in stream:
        if chunk.choices and chunk.choices[0].text:
            stamps.append(time.perf_counter())
        if chunk.usage is not None:
            usage = chunk.usage.model_dump()
    assert usage is not None and len(stamps) == max_tokens
    return stamps[0] - started, (stamps[-1] - stamps[0]) / (len(stamps) - 1), usage


def metric(server: LiveServer, name: str, labels: str = "") -> float:
    text = httpx.get(server.url + "/metrics").text
    found = re.search(rf"^{re.escape(name)}\{{[^}}]*{re.escape(labels)}[^}}]*\}} (\S+)$", text, re.M)
    assert found, f"{name} missing from /metrics"
    return float(found.group(1))


def test_streamed_timing_matches_predict_at_concurrency_1(server: LiveServer) -> None:
    ttft, itl, usage = stream_timing(server, text_of(2048, 1), 64)
    assert (usage["prompt_tokens"], usage["completion_tokens"], usage["total_tokens"]) == (2048, 64, 2112)
    expected = predicted(2048, 64)
    want_ttft, want_itl = expected["mean_ttft_ms"] / 1000, expected["mean_itl_ms"] / 1000
    assert abs(ttft - want_ttft) <= 0.3 * want_ttft + 0.005, (ttft, want_ttft)
    assert abs(itl - want_itl) <= 0.3 * want_itl + 0.005, (itl, want_itl)


def test_text_prompts_and_chat_get_exact_counts(server: LiveServer) -> None:
    text = "The quick brown fox jumps over the lazy dog, again and again."
    reply = client(server).completions.create(model=MODEL, prompt=text, max_tokens=7,
                                              extra_body={"ignore_eos": True, "min_tokens": 7})
    estimated = "estimate" in "".join(server.lines)  # no tokenizer.json in the local cache
    if estimated:
        assert reply.usage.prompt_tokens == math.ceil(len(text) / 4)
    assert reply.usage.completion_tokens == 7 and len(reply.choices[0].text.split()) == 7
    assert reply.choices[0].finish_reason == "length"
    chat = client(server).chat.completions.create(model=MODEL, max_tokens=5,
                                                  messages=[{"role": "user", "content": text}])
    rendered = f"<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n"
    if estimated:
        assert chat.usage.prompt_tokens == math.ceil(len(rendered) / 4)
    assert chat.usage.completion_tokens == 5 and len(chat.choices[0].message.content.split()) == 5


def test_eight_concurrent_streams_complete(server: LiveServer) -> None:
    results: dict[int, tuple[int, int]] = {}

    def one(i: int) -> None:
        chunks = 0
        stream = client(server).chat.completions.create(
            model=MODEL, max_tokens=20 + i, stream=True, stream_options={"include_usage": True},
            messages=[{"role": "user", "content": f"request {i} " * 50}])
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                chunks += 1
            if chunk.usage is not None:
                results[i] = (chunks, chunk.usage.completion_tokens)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert results == {i: (20 + i, 20 + i) for i in range(8)}


@pytest.mark.parametrize("body", [
    {"model": MODEL, "prompt": "hi", "max_tokens": -1},
    {"model": MODEL, "prompt": "hi", "max_tokens": 0},
    {"model": MODEL, "prompt": "hi", "max_tokens": 10**12},
    {"model": MODEL, "prompt": list(range(33_000)), "max_tokens": 1},
    {"model": "no-such-model", "prompt": "hi", "max_tokens": 1},
    {"model": MODEL, "prompt": "hi", "max_tokens": "many"},
    {"model": MODEL, "prompt": "hi", "max_tokens": 4, "min_tokens": 5},
    {"model": MODEL, "prompt": [-3, 4], "max_tokens": 1},
    {"model": MODEL, "prompt": "", "max_tokens": 1},
    {"model": MODEL, "max_tokens": 1},
    {"model": MODEL, "prompt": "hi", "n": 2},
    "not json at all {",
    [1, 2, 3],
])
def test_bad_requests_are_400_and_the_server_keeps_serving(server: LiveServer, body: object) -> None:
    raw = body if isinstance(body, str) else json.dumps(body)
    answer = httpx.post(server.url + "/v1/completions", content=raw, headers={"content-type": "application/json"})
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["code"] == 400 and error["message"]
    ok = httpx.post(server.url + "/v1/completions", json={"model": MODEL, "prompt": "still there?", "max_tokens": 2})
    assert ok.status_code == 200 and ok.json()["usage"]["completion_tokens"] == 2


def test_openai_client_sees_unknown_model_as_bad_request(server: LiveServer) -> None:
    with pytest.raises(openai.BadRequestError, match="does not exist"):
        client(server).completions.create(model="gpt-nope", prompt="hi", max_tokens=1)
    models = client(server).models.list()
    assert [m.id for m in models.data] == [MODEL]
    assert httpx.get(server.url + "/health").status_code == 200


def test_metrics_carry_vllm_names_and_count_tokens(server: LiveServer) -> None:
    before = metric(server, "vllm:generation_tokens_total")
    hits_before = metric(server, "vllm:prefix_cache_hits_total")
    prompt = list(range(10_000, 10_640))  # ten 64-token blocks, three times on two replicas: one repeat
    for _ in range(3):  # lands on a replica that holds the prompt, and hits its prefix cache
        httpx.post(server.url + "/v1/completions", json={"model": MODEL, "prompt": prompt, "max_tokens": 3})
    assert metric(server, "vllm:generation_tokens_total") == before + 9
    assert metric(server, "vllm:prefix_cache_hits_total") >= hits_before + 576
    text = httpx.get(server.url + "/metrics").text
    for name in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
                 "vllm:time_to_first_token_seconds_bucket", "vllm:inter_token_latency_seconds_count",
                 "vllm:e2e_request_latency_seconds_sum", "vllm:prefix_cache_queries_total",
                 "vllm:request_success_total", "vllm:prompt_tokens_total"):
        assert name in text, name


def test_a_client_that_disconnects_frees_its_request(server: LiveServer) -> None:
    aborted = metric(server, "vllm:request_success_total", 'finished_reason="abort"') if "abort" in httpx.get(
        server.url + "/metrics").text else 0.0
    with httpx.stream("POST", server.url + "/v1/completions",
                      json={"model": MODEL, "prompt": list(range(20_000, 20_100)), "max_tokens": 5000,
                            "stream": True}) as answer:
        for n, _line in enumerate(answer.iter_lines()):
            if n == 10:
                assert metric(server, "vllm:num_requests_running") >= 1
                break  # closes the connection
    deadline = time.perf_counter() + 5
    while metric(server, "vllm:num_requests_running") > 0 and time.perf_counter() < deadline:
        time.sleep(0.05)
    assert metric(server, "vllm:num_requests_running") == 0
    assert metric(server, "vllm:kv_cache_usage_perc") == 0.0
    assert metric(server, "vllm:request_success_total", 'finished_reason="abort"') == aborted + 1
