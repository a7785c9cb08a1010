"""Hostile model configs (`engine.model`: a local folder's config.json, an absurd id): clear
errors naming the file and the key, never a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servesim.perf.models import bundled_configs_dir

from hostile import run_in_process, write_config

QWEN = "Qwen--Qwen3-8B_config.json"


def _model(tmp_path: Path, text: str | bytes) -> Path:
    folder = tmp_path / "model"
    folder.mkdir(exist_ok=True)
    path = folder / "config.json"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return folder


def _qwen(**changes: object) -> str:
    folder = bundled_configs_dir()
    assert folder is not None
    raw = json.loads((folder / QWEN).read_text())
    raw.update(changes)
    return json.dumps(raw, indent=1)


def _predict(tmp_path: Path, model: str, codes: tuple[int, ...] = (1, 2)) -> tuple[int | None, str]:
    timing = {"type": "roofline"}
    config = write_config(tmp_path, {"engine.model": model, "engine.workers.aggregated.timing": timing,
                                     "engine.workers.aggregated.kv_cache": {"block_size": 16}})
    run = run_in_process(["predict", "-c", str(config), "--output-dir", str(tmp_path / "out")])
    run.assert_clean(*codes)
    return run.returncode, run.message(tmp_path)


@pytest.mark.parametrize(("text", "words"), [
    (_qwen(num_key_value_heads=0), "num_key_value_heads: must be an integer in [1,"),
    (_qwen(num_hidden_layers=0), "num_hidden_layers: must be an integer in [1,"),
    (_qwen(num_attention_heads=-4), "num_attention_heads: must be an integer in [1,"),
    (_qwen(hidden_size=10**15), "hidden_size: must be an integer in [1,"),
    (_qwen(vocab_size=10**30), "at most ±9223372036854775807"),
    (_qwen(head_dim=0, hidden_size=7, num_attention_heads=8), "head_dim"),
    (_qwen(num_experts=10**12), "num_experts: must be an integer in [0,"),
    (_qwen(architectures={"a": 1}, num_hidden_layers=0), "num_hidden_layers"),
    ('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested deeper"),
    ('{"hidden_size":\n 4096,\n "vocab_size": ' + "9" * 5000 + "}", ":3: "),
    (b'{"architectures": ["\xff"]}', "UTF-8"),
    ("[1, 2]", "not a JSON object"),
    ('{"hidden_size": 4096', "invalid JSON"),
])
def test_bad_model_config_json(tmp_path, text, words):
    folder = _model(tmp_path, text)
    code, message = _predict(tmp_path, str(folder))
    assert code == 1 and "<tmp>/model/config.json" in message, message
    if words is not None:
        assert words in message, message


def test_infinity_in_a_model_config_is_still_read(tmp_path):
    """AIConfigurator's own copies (Nemotron-H) hold a bare Infinity in fields servesim ignores."""
    folder = _model(tmp_path, _qwen().replace('"vocab_size"', '"time_step_limit": [0.0, Infinity],\n "vocab_size"'))
    code, message = _predict(tmp_path, str(folder), (0,))
    assert code == 0, message


def test_a_5000_character_model_id_is_a_config_error(tmp_path):
    code, message = _predict(tmp_path, "a" * 5000)
    assert code == 2 and "engine.model" in message and "characters" in message and len(message) < 2000, message


def test_a_long_path_like_model_id_is_not_found_cleanly(tmp_path):
    code, message = _predict(tmp_path, "/".join(["abcdefghij" * 30] * 3))
    assert code == 1 and "model" in message and len(message) < 3000, message
