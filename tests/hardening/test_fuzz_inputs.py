"""The input fuzzer (`tools/fuzz_inputs.py`) on a fresh seed every run, and what it found.

The seed comes from the clock (or ``SERVESIM_FUZZ_INPUTS_SEED``) and is printed with every
failure, so a failure can be repeated with ``python tools/fuzz_inputs.py --seed N``; the time
budget is ``SERVESIM_FUZZ_INPUTS_SECONDS`` (default 40 s)."""

from __future__ import annotations

import importlib.util
import os
import sys
import time
from pathlib import Path

import pytest
import yaml

from hostile import run_in_process

ROOT = Path(__file__).resolve().parents[2]
CI_SKIPS: tuple[str, ...] = ()
"""Families left out of the suite's run: none. The search family's cases are bounded by
construction (one process, a 3 s candidate timeout, at most 4 trials: a few seconds each), so
one that reaches the fuzzer's 30 s limit is a real hang."""
DATA = Path(__file__).parent / "data"


def _fuzzer():
    spec = importlib.util.spec_from_file_location("fuzz_inputs", ROOT / "tools" / "fuzz_inputs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_fuzzed_inputs_fail_cleanly_on_a_fresh_seed(tmp_path):
    seed = int(os.environ.get("SERVESIM_FUZZ_INPUTS_SEED") or time.time_ns() % 2**32)
    seconds = float(os.environ.get("SERVESIM_FUZZ_INPUTS_SECONDS") or 40)
    lines: list[str] = []
    fuzz = _fuzzer()
    families = tuple(f for f in fuzz.FAMILIES if f not in CI_SKIPS)
    failures = fuzz.fuzz(seed, seconds, families, work=tmp_path, log=lines.append)
    assert not failures, (f"fuzz_inputs seed {seed} (repeat: python tools/fuzz_inputs.py --seed {seed}):\n"
                          + "\n".join(failures))
    assert "0 failures" in lines[-1] and " 0 cases" not in lines[-1], lines[-1]


def test_the_fuzzer_catches_a_traceback_a_hang_and_a_strange_exit():
    fuzz = _fuzzer()
    assert fuzz.problem(None, "") is not None
    assert fuzz.problem(1, "Traceback (most recent call last):\n  ...") is not None
    assert fuzz.problem(-9, "") is not None and fuzz.problem(130, "") is not None
    assert fuzz.problem(2, "servesim: error: x") is None and fuzz.problem(0, "") is None


# Finds of the fuzzer, kept as regression tests -----------------------------------------------

def test_an_integer_of_5000_digits_in_a_config_names_its_line(tmp_path):
    """seed 2, case 217: PyYAML's int() raised ValueError past the config loader."""
    config = tmp_path / "c.yaml"
    config.write_text((DATA / "calibrate.yaml").read_text().replace("requests: 10", "requests: " + "9" * 5000))
    run = run_in_process(["predict", "-c", str(config), "--output-dir", str(tmp_path / "o")])
    run.assert_clean(2)
    assert f"{config}:13: an integer of 5,000 characters" in run.stderr, run.stderr
    run = run_in_process(["predict", "-c", str(DATA / "calibrate.yaml"), "--output-dir", str(tmp_path / "o"),
                          "--set", "traffic.stop.requests=" + "9" * 5000])
    run.assert_clean(2)
    assert "too long to convert" in run.stderr


def test_a_search_whose_sla_is_not_a_mapping(tmp_path):
    """seed 2, case 191: `evaluation.sla: 10**400` reached `.items()` in the cross-key rules."""
    from search_helpers import BASE, config

    path = tmp_path / "search.yaml"
    path.write_text(yaml.safe_dump(config(BASE, **{"evaluation.sla": 10**40})))
    run = run_in_process(["recommend", "-c", str(path), "--output-dir", str(tmp_path / "o")])
    run.assert_clean(2)
    assert "evaluation.sla: must be a mapping" in run.stderr


def test_a_search_whose_sla_values_are_not_targets(tmp_path):
    """seed 5, cases 13, 62, 125: a mapping without a statistic, or a list, reached float() in
    the scorer; now checked as predict checks evaluation.sla, before any candidate runs."""
    from search_helpers import BASE, config

    for value, words in (({"a": None}, "a: unknown statistic"), ({}, "a mapping of percentile targets"),
                         ([], "must be a finite number > 0")):
        path = tmp_path / "search.yaml"
        path.write_text(yaml.safe_dump(config(BASE, **{"evaluation.sla.ttft_ms": value})))
        run = run_in_process(["recommend", "-c", str(path), "--output-dir", str(tmp_path / "o")])
        run.assert_clean(2)
        assert "evaluation.sla.ttft_ms: " + words in run.stderr, run.stderr


def test_a_search_whose_model_name_is_too_long_for_a_path(tmp_path):
    """seed 11, case 186: a 5,000-character `engine.model` was looked up as a file next to the
    search config (OSError: file name too long); it is now just not a local file."""
    from search_helpers import BASE, config

    path = tmp_path / "search.yaml"
    path.write_text(yaml.safe_dump(config(BASE, **{"engine.model": "x" * 5000})))
    run = run_in_process(["recommend", "-c", str(path), "--output-dir", str(tmp_path / "o")])
    run.assert_clean(1, 2)
    assert "Traceback" not in run.stderr and "servesim: error:" in run.stderr


def test_a_search_whose_model_has_no_config_and_no_context_length(tmp_path):
    """seed 12, case 174: an unknown model with `engine.context_length` left out failed while the
    search was set up (RunError: the context length needs the HF config) with a traceback."""
    from search_helpers import BASE, config

    mapping = config(BASE, **{"engine.model": "no-such-org/no-such-model-xyz"})
    mapping["engine"].pop("context_length", None)
    path = tmp_path / "search.yaml"
    path.write_text(yaml.safe_dump(mapping))
    run = run_in_process(["recommend", "-c", str(path), "--output-dir", str(tmp_path / "o")])
    run.assert_clean(1, 2)
    assert "no-such-org/no-such-model-xyz" in run.stderr


def test_an_sla_target_beyond_the_largest_float(tmp_path):
    """seed 34, case 1: `evaluation.sla.ttft_ms: 10**400` reached float() (OverflowError) in the
    search's SLA check, and in predict's."""
    from search_helpers import BASE, config

    path = tmp_path / "search.yaml"
    path.write_text(yaml.safe_dump(config(BASE, **{"evaluation.sla.ttft_ms": 10**400})))
    run = run_in_process(["recommend", "-c", str(path), "--output-dir", str(tmp_path / "o")])
    run.assert_clean(2)
    assert "evaluation.sla.ttft_ms: must be a finite number > 0" in run.stderr, run.stderr
    run = run_in_process(["predict", "-c", str(DATA / "calibrate.yaml"), "--output-dir", str(tmp_path / "p"),
                          "--set", "evaluation.sla.itl_ms={p99: " + "9" * 400 + "}"])
    run.assert_clean(2)
    assert "evaluation.sla.itl_ms.p99: must be a finite number > 0" in run.stderr, run.stderr

