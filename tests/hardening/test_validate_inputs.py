"""`servesim validate --data` on a damaged copy of the open measurement pack: a clear error
naming the file (and line) and the rule, exit 1, never a traceback."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from servesim.studies.openruns import PACK

from hostile import run_in_process

RUN = Path("examples/RTX4090/Llama-3.1-8B/vllm")


def _pack(tmp_path: Path) -> Path:
    data = tmp_path / "pack"
    shutil.copytree(PACK, data)
    return data


def _validate(data: Path) -> str:
    run = run_in_process(["validate", "--data", str(data), "--runs", "1"])
    run.assert_clean(1)
    return run.stderr


@pytest.mark.parametrize(("text", "words"), [
    ("[1, 2]", "engine_kwargs: must be an object"),
    ('{"engine_kwargs": {"max_num_seqs": 256}, "vllm_version": "0.19.0"}', "engine_kwargs.max_num_batched_tokens"),
    ('{"engine_kwargs": {"max_num_seqs": "many", "max_num_batched_tokens": 2048}, "vllm_version": "0.19.0"}',
     "engine_kwargs.max_num_seqs"),
    ('{"engine_kwargs": {"max_num_seqs": 1, "max_num_batched_tokens": 2048}, "vllm_version": 19}', "vllm_version"),
    ('{"engine_kwargs": {"max_num_seqs": 1, "max_num_batched_tokens": 2048}, "vllm_version": "0.19.0", '
     '"kv_cache": {"num_gpu_blocks": 0}}', "kv_cache.num_gpu_blocks"),
    ('{"engine_kwargs":\n NaN}', ":2: NaN"),
    ('{"engine_kwargs": {', "invalid JSON"),
])
def test_a_bad_meta_json(tmp_path, text, words):
    data = _pack(tmp_path)
    (data / RUN / "meta.json").write_text(text)
    message = _validate(data)
    assert f"{data / RUN / 'meta.json'}" in message and words in message, message


def test_non_utf8_meta_json(tmp_path):
    data = _pack(tmp_path)
    (data / RUN / "meta.json").write_bytes(b'{"engine_kwargs":\n "\xff"}')
    assert f"{data / RUN / 'meta.json'}:2: not UTF-8" in _validate(data)


@pytest.mark.parametrize(("key", "value"), [("arrival_time", None), ("arrival_time", "x"), ("output_toks", -1)])
def test_bad_request_lines(tmp_path, key, value):
    data = _pack(tmp_path)
    path = data / RUN / "requests.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    rows[6][key] = value
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    message = _validate(data)
    assert f"{path}:7: {key}" in message, message


def test_a_truncated_request_file(tmp_path):
    data = _pack(tmp_path)
    path = data / RUN / "requests.jsonl"
    text = path.read_text()
    path.write_text(text[: len(text) // 2])
    message = _validate(data)
    assert f"{path}:" in message and "invalid JSON" in message, message
