"""Fuzz the inputs of servesim's newer commands and check that each one fails cleanly.

Every case takes a valid input of one family —

* ``search``:      a `recommend` config (search space, optimizer, constraints), run in one
                   process with a 10 s candidate timeout (``--set`` overrides),
* ``measured``:    a measurement file (per-request JSONL, AIPerf export, vLLM bench JSON),
                   read by `compare` (and now and then by `calibrate`),
* ``calibration``: a calibration file named by a `predict` config (`timing.calibration`),
* ``model``:       a model folder's HF ``config.json`` named by a `predict` config,
* ``output``:      a servesim output folder (``prediction.json``, ``requests.jsonl``) given to
                   `compare`,

— damages it with one to three mutations (truncate the text, flip a value's type, put in a huge
number, nest a value deeply, insert bytes that are not UTF-8, write NaN or Infinity, drop or
repeat a key) and runs the command as a subprocess with a time and memory limit. A case fails
on a Python traceback, on a hang (past the time limit) and on an exit code outside {0, 1, 2}.

    python tools/fuzz_inputs.py --seconds 60 [--seed N] [--family measured ...]

prints every failure with its seed, case number and the command (its files are kept), and exits
1 if there was one. ``tests/hardening/test_fuzz_inputs.py`` runs it on a fresh seed each time.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import random
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
FAMILIES = ("search", "measured", "calibration", "model", "output")
OK_CODES = (0, 1, 2)
TIMEOUT_S = 30.0
MEMORY_MB = 2048

_DEPLOYMENT: dict[str, Any] = {
    "engine": {"model": "Qwen/Qwen3-8B", "hardware": "h200_sxm", "backend": "vllm", "context_length": 4096,
               "workers": {"aggregated": {
                   "scheduler": {"max_batched_tokens": 2048, "max_sequences": 16},
                   "kv_cache": {"block_size": 16, "capacity": {"type": "fixed", "blocks": 2000}},
                   "timing": {"type": "roofline"}}}},
    "traffic": {"source": {"type": "synthetic", "input_tokens": 200, "output_tokens": 20},
                "load": {"type": "concurrency", "concurrency": 4}, "stop": {"requests": 12}},
}
_SEARCH: dict[str, Any] = {
    "engine": {"mode": "aggregated", "model": "Qwen/Qwen3-32B-FP8", "hardware": "h200_sxm", "backend": "vllm",
               "backend_version": "0.24.0", "context_length": 4096,
               "workers": {"aggregated": {
                   "parallelism": {"preset": "default"},
                   "scheduler": {"max_batched_tokens": 4096, "max_sequences": {"choices": [4, 16]}},
                   "kv_cache": {"block_size": 16, "capacity": {"type": "fixed", "blocks": 2000}},
                   "timing": {"type": "fixed", "prefill_ms": 30, "decode_ms": 12}}}},
    "traffic": {"source": {"type": "synthetic", "input_tokens": 512, "output_tokens": 32},
                "load": {"type": "concurrency", "concurrency": 8}, "stop": {"requests": 24}},
    "evaluation": {"sla": {"ttft_ms": 400, "itl_ms": 20}},
    "optimization": {"target": "throughput_per_gpu", "constraints": {"max_candidate_gpus": 4}},
    "optimizer": {"algorithm": "grid", "max_trials": 4, "parallelism": 1, "seed": 3},
}


# ------------------------------------------------------------------------------------------
# Mutations of a structured value (a parsed JSON or YAML document)
# ------------------------------------------------------------------------------------------

def _paths(value: Any, prefix: tuple = ()) -> list[tuple]:
    """Every path (keys and indexes) to a value inside `value`, the root included."""
    found = [prefix]
    if len(prefix) > 12:  # inside a nesting a mutation made: deep enough
        return found
    if isinstance(value, dict):
        for key, child in value.items():
            found += _paths(child, (*prefix, key))
    elif isinstance(value, list):
        for index, child in enumerate(value[:20]):
            found += _paths(child, (*prefix, index))
    return found


def _replace(value: Any, path: tuple, new: Any) -> Any:
    if not path:
        return new
    value[path[0]] = _replace(value[path[0]], path[1:], new)
    return value


def _get(value: Any, path: tuple) -> Any:
    for key in path:
        value = value[key]
    return value


_HUGE = (10**19, -(10**19), 2**64, 10**30, 10**400, 1e308, -1e308, 1.7976931348623157e308, 2**63, 10**12, 1e-320)
_ODD = ("", "x" * 5000, "NaN", "1e999", [], {}, [[]], {"a": None}, None, True, False, -1, 0, 0.5, "ms", ["ms"],
        {"unit": ["ms"]}, "\u202e\u0000", -0.0)


def _flip(rng: random.Random, old: Any) -> Any:
    return rng.choice(_ODD + _HUGE[:4])


def _huge(rng: random.Random, old: Any) -> Any:
    return rng.choice(_HUGE)


def _nest(rng: random.Random, old: Any) -> Any:
    depth = rng.choice((65, 120, 1000, 20_000))
    nested: Any = old if not isinstance(old, (dict, list)) else 1
    for _ in range(depth):
        nested = [nested]
    return nested


def _nan(rng: random.Random, old: Any) -> Any:
    return rng.choice((float("nan"), float("inf"), float("-inf")))


def mutate_value(rng: random.Random, doc: Any, notes: list[str]) -> Any:
    """`doc` (changed in place where it can be) with one of its values replaced (or a key dropped
    or added)."""
    paths = _paths(doc)
    path = rng.choice(paths)
    kind = rng.choice(("flip", "huge", "nest", "nan", "drop", "add"))
    old = _get(doc, path)
    if kind == "drop" and path:
        parent = _get(doc, path[:-1])
        del parent[path[-1]]
    elif kind == "add" and isinstance(old, dict):
        old[rng.choice(("extra", "fitted_with", "per_request", "unit", "value", "ttfts"))] = _flip(rng, None)
    else:
        change = {"flip": _flip, "huge": _huge, "nest": _nest, "nan": _nan}.get(kind, _flip)
        doc = _replace(doc, path, change(rng, old))
    notes.append(f"{kind} at {'.'.join(map(str, path)) or '<root>'}")
    return doc


# ------------------------------------------------------------------------------------------
# Mutations of a file's bytes
# ------------------------------------------------------------------------------------------

def mutate_bytes(rng: random.Random, data: bytes, notes: list[str]) -> bytes:
    """`data` truncated, or with bytes that are not UTF-8, or a number written as NaN/Infinity."""
    kind = rng.choice(("truncate", "utf8", "constant", "digits"))
    if not data:
        return b"\xff"
    at = rng.randrange(len(data))
    notes.append(f"{kind} at byte {at}")
    if kind == "truncate":
        return data[:at]
    if kind == "utf8":
        return data[:at] + rng.choice((b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x00")) + data[at:]
    digits = [i for i, b in enumerate(data) if 0x30 <= b <= 0x39]
    if not digits:
        return data
    at = rng.choice(digits)
    end = at
    while end < len(data) and 0x30 <= data[end] <= 0x39:
        end += 1
    if kind == "constant":
        return data[:at] + rng.choice((b"NaN", b"Infinity", b"-Infinity", b".nan", b".inf")) + data[end:]
    return data[:at] + b"9" * rng.choice((25, 400, 5000)) + data[end:]


# ------------------------------------------------------------------------------------------
# Families: a valid input, written to a case folder, and the command that reads it
# ------------------------------------------------------------------------------------------

@dataclass
class Case:
    """One fuzz case: the command to run (in `folder`) and what was done to its input."""

    family: str
    folder: Path
    args: list[str]
    notes: list[str] = field(default_factory=list)


def _damage_structured(rng: random.Random, doc: Any, notes: list[str], dump: Callable[[Any], str]) -> bytes:
    doc = copy.deepcopy(doc)
    for _ in range(rng.randint(1, 3)):
        doc = mutate_value(rng, doc, notes)
    try:
        data = dump(doc).encode("utf-8", "surrogatepass")
    except (ValueError, RecursionError, OverflowError) as exc:  # unrepresentable: damage the text instead
        notes.append(f"dump failed ({type(exc).__name__}): bytes instead")
        data = b""
    if not data or rng.random() < 0.3:
        data = mutate_bytes(rng, data or dump_fallback(doc), notes)
    return data


def dump_fallback(doc: Any) -> bytes:
    try:
        return json.dumps(doc, default=str).encode("utf-8", "surrogatepass")
    except (ValueError, RecursionError):
        return b"{}"


def _json(doc: Any) -> str:
    return json.dumps(doc, indent=1)


def _yaml(doc: Any) -> str:
    return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)


def _measurement(rng: random.Random) -> tuple[str, Any, Callable[[Any], str]]:
    rows = [{"input_toks": 200, "output_toks": 20, "queued_ts": i * 0.125, "first_token_ts": i * 0.125 + 0.03,
             "last_token_ts": i * 0.125 + 0.15} for i in range(12)]
    kind = rng.choice(("llmservingsim", "aiperf", "vllm"))
    if kind == "vllm":
        doc = {"input_lens": [200] * 12, "output_lens": [20] * 12, "start_times": [i * 0.125 for i in range(12)],
               "ttfts": [0.03] * 12, "itls": [[0.006] * 19] * 12, "errors": [""] * 12}
        return "bench.json", doc, _json
    if kind == "aiperf":
        rows = [{"metadata": {"request_start_ns": 10**9 + i * 125_000_000},
                 "metrics": {"time_to_first_token": {"value": 30.0, "unit": "ms"},
                             "request_latency": {"value": 150.0, "unit": "ms"},
                             "input_sequence_length": {"value": 200, "unit": "tokens"},
                             "output_sequence_length": {"value": 20, "unit": "tokens"},
                             "inter_chunk_latency": {"value": [6.0] * 19, "unit": "ms"}}, "error": None}
                for i in range(12)]
    name = "profile_export.jsonl" if kind == "aiperf" else "requests.jsonl"
    return name, rows, lambda rs: "".join(json.dumps(r) + "\n" for r in rs) if isinstance(rs, list) else _json(rs)


def _write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


SEARCH_BOUNDS = ("--set", "optimizer.parallelism=1", "--set", "optimizer.candidate_timeout_seconds=3",
                 "--set", "optimizer.max_trials=4")
"""What keeps a search case short whatever its damage: one process, candidates cut off after
3 s and at most 4 of them (screening is bounded by recommend itself), so a case takes a few
seconds and one past the 30 s limit is a real hang."""


def case_search(rng: random.Random, folder: Path, base: Path) -> Case:
    case = Case("search", folder, [])
    config = _write(folder / "search.yaml", _damage_structured(rng, _SEARCH, case.notes, _yaml))
    # one process, a bounded candidate: the damage is in the search space, not in how long a
    # sound search may take (worker pools on a shared machine are recommend's own tests')
    case.args = ["recommend", "-c", str(config), "--output-dir", str(folder / "out"), *SEARCH_BOUNDS]
    return case


def case_measured(rng: random.Random, folder: Path, base: Path) -> Case:
    case = Case("measured", folder, [])
    name, doc, dump = _measurement(rng)
    path = _write(folder / name, _damage_structured(rng, doc, case.notes, dump))
    if rng.random() < 0.25:
        deployment = _write(folder / "deployment.yaml", _yaml(_DEPLOYMENT).encode())
        case.args = ["calibrate", "-c", str(deployment), "-m", str(path), "--no-holdout", "-o", str(folder / "c.yaml")]
    else:
        case.args = ["compare", str(path), "-o", str(folder / "compare.html")]
    return case


def case_calibration(rng: random.Random, folder: Path, base: Path) -> Case:
    case = Case("calibration", folder, [])
    doc = {"servesim_calibration": 1, "prefill_scale": 1.1, "decode_scale": 0.9, "frontend_ms": 12.0,
           "kv_tokens": 30000, "mixed_pass": "fused",
           "fitted_with": {"timing": {"type": "roofline", "dp_sync_ms": 0.0}, "scheduler": {"async_scheduling": True},
                           "engine": {"model": "Qwen/Qwen3-8B", "hardware": "h200_sxm", "backend": "vllm"}},
           "fitted_on": {"requests": 12}}
    calibration = _write(folder / "cal.yaml", _damage_structured(rng, doc, case.notes, _yaml))
    config = copy.deepcopy(_DEPLOYMENT)
    config["engine"]["workers"]["aggregated"]["timing"]["calibration"] = str(calibration)
    path = _write(folder / "config.yaml", _yaml(config).encode())
    case.args = ["predict", "-c", str(path), "--output-dir", str(folder / "out")]
    return case


def case_model(rng: random.Random, folder: Path, base: Path) -> Case:
    case = Case("model", folder, [])
    doc = json.loads((base / "model" / "config.json").read_text())
    _write(folder / "model" / "config.json", _damage_structured(rng, doc, case.notes, _json))
    config = copy.deepcopy(_DEPLOYMENT)
    config["engine"]["model"] = str(folder / "model")
    config["engine"]["workers"]["aggregated"]["kv_cache"] = {"block_size": 16}
    path = _write(folder / "config.yaml", _yaml(config).encode())
    case.args = ["predict", "-c", str(path), "--output-dir", str(folder / "out")]
    return case


def case_output(rng: random.Random, folder: Path, base: Path) -> Case:
    case = Case("output", folder, [])
    run = folder / "run"
    shutil.copytree(base / "run", run)
    if rng.random() < 0.3:
        (run / "requests.jsonl").unlink()
    target = rng.choice([p for p in ("prediction.json", "requests.jsonl") if (run / p).exists()])
    if target == "prediction.json":
        doc = json.loads((run / target).read_text())
        data = _damage_structured(rng, doc, case.notes, lambda d: json.dumps(d, indent=2, sort_keys=True) + "\n")
    else:
        rows = [json.loads(line) for line in (run / target).read_text().splitlines()]
        data = _damage_structured(rng, rows, case.notes,
                                  lambda rs: "".join(json.dumps(r) + "\n" for r in rs) if isinstance(rs, list)
                                  else json.dumps(rs))
    _write(run / target, data)
    case.notes.insert(0, target)
    case.args = ["compare", str(run), "-o", str(folder / "compare.html")]
    return case


MAKERS: dict[str, Callable[[random.Random, Path, Path], Case]] = {
    "search": case_search, "measured": case_measured, "calibration": case_calibration, "model": case_model,
    "output": case_output}


# ------------------------------------------------------------------------------------------
# Running
# ------------------------------------------------------------------------------------------

def _limits() -> None:
    os.setsid()
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_MB << 20, MEMORY_MB << 20))


def servesim(args: list[str], cwd: Path, timeout: float = TIMEOUT_S) -> tuple[int | None, str]:
    """Run `python -m servesim ARGS`: (exit code or None on a hang, stderr)."""
    # offline: a damaged model name is looked up on the Hub, whose retries (about 25 s without
    # a network) would pass for a hang; the fuzzer checks input handling, not the network
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "HF_HUB_OFFLINE": "1"}
    process = subprocess.Popen([sys.executable, "-m", "servesim", *args], cwd=cwd, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, env=env, preexec_fn=_limits)
    try:
        _, err = process.communicate(timeout=timeout)
        return process.returncode, err.decode("utf-8", "replace")
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        _, err = process.communicate()
        return None, err.decode("utf-8", "replace")


def prepare_base(base: Path) -> None:
    """The valid inputs the families start from that are made by servesim itself."""
    from servesim.perf.models import bundled_configs_dir

    bundled = bundled_configs_dir()
    assert bundled is not None, "the AIConfigurator package's model configs are needed"
    _write(base / "model" / "config.json", (bundled / "Qwen--Qwen3-8B_config.json").read_bytes())
    config = _write(base / "deployment.yaml", _yaml(_DEPLOYMENT).encode())
    code, err = servesim(["predict", "-c", str(config), "--output-dir", str(base / "run"), "--capture-per-request"],
                         base, timeout=120)
    assert code == 0, f"the base servesim run failed: {err[-2000:]}"


def problem(code: int | None, err: str) -> str | None:
    """What is wrong with a finished case (None: it failed, or passed, cleanly)."""
    if code is None:
        return f"no exit within {TIMEOUT_S:.0f} s (a hang)"
    if "Traceback (most recent call last)" in err:
        return "a Python traceback"
    if code not in OK_CODES:
        return f"exit code {code}"
    return None


def fuzz(seed: int, seconds: float, families: tuple[str, ...] = FAMILIES, work: Path | None = None,
         max_cases: int | None = None, log: Callable[[str], None] = print) -> list[str]:
    """Run cases for `seconds` (or `max_cases`) from `seed`; the failures' descriptions."""
    work = Path(tempfile.mkdtemp(prefix="servesim-fuzz-")) if work is None else work
    prepare_base(work / "base")
    rng = random.Random(seed)
    failures: list[str] = []
    started, number = time.monotonic(), 0
    counts: dict[int | None, int] = {}
    slowest: tuple[float, int, str] = (0.0, 0, "")
    while time.monotonic() - started < seconds and (max_cases is None or number < max_cases):
        number += 1
        family = rng.choice(families)
        folder = work / f"case-{number:04d}"
        case = MAKERS[family](random.Random(rng.getrandbits(64)), folder, work / "base")
        began = time.monotonic()
        code, err = servesim(case.args, folder)
        took = time.monotonic() - began
        slowest = max(slowest, (took, number, family))
        counts[code] = counts.get(code, 0) + 1
        wrong = problem(code, err)
        if wrong is None:
            shutil.rmtree(folder, ignore_errors=True)
            continue
        failures.append(f"seed {seed} case {number} [{family}: {'; '.join(case.notes)}]: {wrong}\n"
                        f"  servesim {' '.join(case.args)}\n  (files kept in {folder})\n"
                        + "\n".join("  | " + line for line in err.strip().splitlines()[-12:]))
        log(failures[-1])
    log(f"fuzz_inputs: seed {seed}, {number} cases in {time.monotonic() - started:.0f} s, exit codes "
        f"{dict(sorted(counts.items(), key=lambda kv: (kv[0] is None, kv[0] or 0)))}, slowest case "
        f"{slowest[1]} ({slowest[2]}) {slowest[0]:.1f} s, {len(failures)} failures")
    return failures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=None, help="default: from the clock (printed)")
    parser.add_argument("--seconds", type=float, default=60.0, help="time budget (default 60)")
    parser.add_argument("--cases", type=int, default=None, help="stop after this many cases")
    parser.add_argument("--family", action="append", choices=FAMILIES, help="only these input families")
    parser.add_argument("--work", type=Path, default=None, help="where the cases' files go (default: a temp dir)")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else time.time_ns() % 2**32
    failures = fuzz(seed, args.seconds, tuple(args.family or FAMILIES), args.work, args.cases)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
