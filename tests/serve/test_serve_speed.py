"""`servesim serve --speed 5` on one replica that runs at most two requests at a time: the
engine queues an overload, wall time runs five times faster than simulated time, SIGTERM drains
and exits 0, and the recording is consistent (and comparable with `servesim compare`)."""

from __future__ import annotations

import json
import threading
import time

import httpx
import openai
import pytest

from servesim.cli import main
from serve.conftest import LiveServer, start_server
from serve.test_serve import MODEL, client, metric, predicted, stream_timing, text_of

SPEED = 5.0


@pytest.fixture(scope="module")
def fast_server(tmp_path_factory: pytest.TempPathFactory):
    live = start_server(tmp_path_factory.mktemp("serve-fast"), "--speed", str(SPEED),
                        "--set", "engine.workers.aggregated.parallelism.replicas=1",
                        "--set", "engine.workers.aggregated.scheduler.max_sequences=2")
    yield live
    if live.process.poll() is None:
        live.process.kill()


def test_overload_queues_in_the_engine(fast_server: LiveServer) -> None:
    """Six long requests against two engine slots: whatever the machine's load, the later ones
    wait in the engine long enough for the metrics poll to see them."""
    answers: list[int] = []
    tokens = 400

    def one(i: int) -> None:
        reply = httpx.post(fast_server.url + "/v1/completions", timeout=60,
                           json={"model": MODEL, "prompt": list(range(1000 * i, 1000 * i + 128)), "max_tokens": tokens})
        answers.append(reply.json()["usage"]["completion_tokens"])

    threads = [threading.Thread(target=one, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    seen_waiting, most_running = 0.0, 0.0
    while any(t.is_alive() for t in threads):
        seen_waiting = max(seen_waiting, metric(fast_server, "vllm:num_requests_waiting"))
        most_running = max(most_running, metric(fast_server, "vllm:num_requests_running"))
        time.sleep(0.02)
    assert answers == [tokens] * 6
    assert most_running == 2 and seen_waiting >= 1  # the engine, not the HTTP layer, held them


def test_wall_time_runs_speed_times_faster(fast_server: LiveServer) -> None:
    ttft, itl, usage = stream_timing(fast_server, text_of(2048, 2), 40)
    assert usage["completion_tokens"] == 40
    expected = predicted(2048, 40)
    sim_ttft, sim_itl = expected["mean_ttft_ms"] / 1000, expected["mean_itl_ms"] / 1000
    assert abs(ttft - sim_ttft / SPEED) <= 0.3 * sim_ttft / SPEED + 0.005, ttft
    assert abs(itl - sim_itl / SPEED) <= 0.3 * sim_itl / SPEED + 0.005, itl


def test_sigterm_drains_exits_0_and_records_the_run(fast_server: LiveServer, tmp_path) -> None:
    got: dict[str, int] = {}

    def streaming() -> None:
        stream = client(fast_server).completions.create(model=MODEL, prompt=list(range(90_000, 90_200)),
                                                        max_tokens=200, stream=True)
        got["tokens"] = sum(1 for chunk in stream if chunk.choices and chunk.choices[0].text)

    reader = threading.Thread(target=streaming)
    reader.start()
    time.sleep(0.2)
    code, took = fast_server.stop()
    reader.join(10)
    assert code == 0 and took < 10, "".join(fast_server.lines)
    assert got == {"tokens": 200}  # drained: the stream in flight finished
    with pytest.raises(openai.APIConnectionError):
        client(fast_server).completions.create(model=MODEL, prompt="late", max_tokens=1)
    summary = json.loads((fast_server.out_dir / "prediction.json").read_text())
    lines = (fast_server.out_dir / "requests.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert summary["num_requests"] == len(records) == 6 + 2 + 1  # overload, warm-up + timed, drained
    assert summary["completed_requests"] == len(records)
    for r in records:
        assert r["arrival_time_ms"] <= r["first_admit_ms"] <= r["first_token_ms"] <= r["last_token_ms"]
        assert r["e2e_latency_ms"] == pytest.approx(r["last_token_ms"] - r["arrival_time_ms"])
        assert r["output_length"] == r["requested_output_length"]
    timed = next(r for r in records if r["input_length"] == 2048)
    # simulated time, whatever the speed
    assert timed["ttft_ms"] == pytest.approx(predicted(2048, 40)["mean_ttft_ms"], rel=0.05)
    queued = [r for r in records if r["input_length"] == 128]
    assert max(r["first_admit_ms"] - r["arrival_time_ms"] for r in queued) > 1000  # waited for a slot
    page = tmp_path / "compare.html"
    assert main(["compare", str(fast_server.out_dir), str(fast_server.out_dir), "-o", str(page),
                 "--label", "live", "--label", "again"]) == 0
    assert page.stat().st_size > 1000
