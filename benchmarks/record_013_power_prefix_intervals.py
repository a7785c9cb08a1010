"""Record AISimulate 0.13's power fields, synthetic `cached_prefix_tokens` and the scheduler's
prefill intervals (issue 34) as black-box runs.

Runs the upstream 0.13 build (``../shared/reference/install-dynamo.sh``) with ``aisimulate
predict`` on small configs of our own and keeps what `tests/upstream013/` compares servesim
with (the reference is never run by tests):

* ``power.json`` -- `power_w`, `power_coverage` and the per-phase, per-op energy diagnostics;
* ``cached-prefix.json`` -- reports of synthetic sources with `cached_prefix_tokens` next to
  the reports of mooncake traces holding the same shared prefix, and the verdicts on bad values;
* ``intervals.json`` -- per-request timelines under `prefill_schedule_interval` (vLLM) and
  `prefill_decode_interval` (SGLang), and the verdicts on bad values.

    python benchmarks/record_013_power_prefix_intervals.py [power|prefix|intervals ...]
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
REF = ROOT.parent / "shared" / "reference"
OUT = ROOT / "tests" / "cases" / "upstream013"
PRODUCER = "aisimulate==0.13.0.dev202610270000000085 predict (benchmarks/record_013_power_prefix_intervals.py)"
VOLATILE = ("wall_time_ms", "processed_tokens_per_s", "processed_output_tokens_per_s")


def venv() -> Path:
    return Path(subprocess.run([str(REF / "install-dynamo.sh")], check=True, capture_output=True,
                               text=True).stdout.strip())


def predict(config: dict, files: dict[str, str] | None = None) -> tuple[int, dict | None, list[str]]:
    """(exit code, prediction.json without volatile fields, last stderr lines) of one run."""
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for name, text in (files or {}).items():
            (work / name).write_text(text)
        (work / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
        done = subprocess.run([str(venv() / "bin" / "aisimulate"), "predict", "-c", "config.yaml", "--overwrite",
                               "--capture-per-request", "--format", "json", "--output-dir", "out"],
                              cwd=work, capture_output=True, text=True)
        lines = [line.strip() for line in done.stderr.splitlines()
                 if line.strip() and "errors.pydantic.dev" not in line]
        if done.returncode:
            return done.returncode, None, lines[-3:]
        report = json.loads((work / "out" / "prediction.json").read_text())
    for key in VOLATILE:
        report.pop(key, None)
    records = report.pop("per_request", [])
    for record in records:
        record.pop("uuid", None)
    # records tied on arrival are ordered by their random uuid: order by session and turn
    report["per_request"] = sorted(records, key=lambda r: (r["arrival_time_ms"], r["session_id"],
                                                           r.get("turn_index", 0)))
    return 0, report, []


def synthetic(source: dict, workers: dict, *, model: str = "Qwen/Qwen3-32B", hardware: str = "h200_sxm",
              backend: str = "vllm", concurrency: int = 2, requests: int = 6, **engine: Any) -> dict:
    return {"traffic": {"source": {"type": "synthetic", **source},
                        "load": {"type": "concurrency", "concurrency": concurrency},
                        "stop": {"requests": requests}},
            "engine": {"model": model, "hardware": hardware, "backend": backend, **engine,
                       "workers": {"aggregated": workers}}}


FIXED = {"type": "fixed", "prefill_ms": 10, "decode_ms": 5}

# -- power ----------------------------------------------------------------------------------------

POWER = {
    "fixed-timing": synthetic({"input_tokens": 1000, "output_tokens": 8}, {"timing": FIXED}, requests=4),
    "polynomial-timing": synthetic({"input_tokens": 1000, "output_tokens": 8}, {"timing": {"type": "polynomial"}},
                                   requests=4),
    "aic-no-power-data": synthetic({"input_tokens": 1000, "output_tokens": 8}, {}, model="Qwen/Qwen3-8B",
                                   requests=4),
    "aic-b200-trtllm": synthetic({"input_tokens": 1000, "output_tokens": 8}, {}, model="Qwen/Qwen3-8B",
                                 hardware="b200_sxm", backend="trtllm", backend_version="1.3.0rc20", requests=4),
    "aic-b200-trtllm-prefill-only": synthetic({"input_tokens": 1000, "output_tokens": 1}, {},
                                              model="Qwen/Qwen3-8B", hardware="b200_sxm", backend="trtllm",
                                              backend_version="1.3.0rc20", requests=4),
}


def record_power() -> None:
    cases = {}
    for name, config in POWER.items():
        code, report, tail = predict(config)
        assert code == 0, (name, tail)
        assert report is not None
        cases[name] = {"config": config, "power_w": report["power_w"], "power_coverage": report["power_coverage"],
                       "power_diagnostics": report["power_diagnostics"],
                       "duration_ms": report["duration_ms"], "total_output_tokens": report["total_output_tokens"]}
        print(name, report["power_w"], report["power_coverage"], file=sys.stderr)
    _write("power.json", {"cases": cases})


# -- cached_prefix_tokens -------------------------------------------------------------------------

def prefix_trace(requests: int, input_tokens: int, output_tokens: int, cached: int, block_size: int) -> str:
    """A mooncake trace (all at t=0) whose prompts share exactly `cached` leading tokens: hash
    ids of gcd(cached, block size) tokens, the first cached/unit of them common to all."""
    from math import gcd

    unit = gcd(cached, block_size) if cached else block_size
    fresh = -(-(input_tokens - cached) // unit)
    common = list(range(cached // unit))
    rows = [{"timestamp": 0, "input_length": input_tokens, "output_length": output_tokens,
             "hash_ids": common + list(range(10_000 + i * fresh, 10_000 + (i + 1) * fresh))}
            for i in range(requests)]
    return "".join(json.dumps(row) + "\n" for row in rows)


def _prefix_case(backend: str, block_size: int, input_tokens: int, cached: int, *, concurrency: int = 2,
                 requests: int = 6, blocks: int = 1000) -> dict:
    return synthetic({"input_tokens": input_tokens, "output_tokens": 4, "cached_prefix_tokens": cached},
                     {"kv_cache": {"block_size": block_size, "capacity": {"type": "fixed", "blocks": blocks}},
                      "timing": FIXED}, backend=backend, concurrency=concurrency, requests=requests,
                     **({"context_length": 32768} if backend == "vllm" else {}))


PREFIX = {
    "vllm-600-of-1000-bs16": _prefix_case("vllm", 16, 1000, 600),
    "vllm-512-of-1000-bs16": _prefix_case("vllm", 16, 1000, 512),
    "vllm-whole-prompt": _prefix_case("vllm", 16, 1000, 1000),
    "vllm-tiny-pool": _prefix_case("vllm", 16, 300, 200, concurrency=3, requests=8, blocks=40),
    "sglang-600-of-1000": _prefix_case("sglang", 1, 1000, 600, concurrency=3, blocks=20000),
    "trtllm-100-of-700-bs32": _prefix_case("trtllm", 32, 700, 100),
}

PREFIX_VERDICTS = {
    "over-input": _prefix_case("vllm", 16, 1000, 1001),
    "negative": _prefix_case("vllm", 16, 1000, -1),
    "float": _prefix_case("vllm", 16, 1000, 600.0),  # type: ignore[arg-type]
    "string": _prefix_case("vllm", 16, 1000, "600"),  # type: ignore[arg-type]
    "bool": _prefix_case("vllm", 16, 1000, True),  # type: ignore[arg-type]
    "zero": _prefix_case("vllm", 16, 1000, 0),
    "equal-to-input": _prefix_case("vllm", 16, 1000, 1000),
}


def _as_trace(config: dict) -> tuple[dict, str]:
    source = config["traffic"]["source"]
    kv = config["engine"]["workers"]["aggregated"]["kv_cache"]
    from math import gcd

    unit = gcd(source["cached_prefix_tokens"], kv["block_size"]) if source["cached_prefix_tokens"] else kv["block_size"]
    trace = prefix_trace(config["traffic"]["stop"]["requests"], source["input_tokens"], source["output_tokens"],
                         source["cached_prefix_tokens"], kv["block_size"])
    traced = json.loads(json.dumps(config))
    traced["traffic"] = {"source": {"type": "trace", "paths": ["trace.jsonl"], "format": "mooncake",
                                    "block_size": unit},
                         "load": config["traffic"]["load"]}
    return traced, trace


def record_prefix() -> None:
    cases = {}
    for name, config in PREFIX.items():
        code, report, tail = predict(config)
        assert code == 0 and report is not None, (name, tail)
        traced, trace = _as_trace(config)
        code, traced_report, tail = predict(traced, {"trace.jsonl": trace})
        assert code == 0 and traced_report is not None, (name, tail)
        for record in traced_report["per_request"]:
            record["session_id"] = f"session_{int(record['session_id'].split('_')[1]) - 1}"
        same = traced_report == report
        cases[name] = {"config": config, "trace_config": traced, "trace": trace, "report": report,
                       "same_as_trace": same}
        print(name, report["prefix_cache_reused_ratio"], "same as trace:", same, file=sys.stderr)
    verdicts = {}
    for name, config in PREFIX_VERDICTS.items():
        code, _, tail = predict(config)
        verdicts[name] = {"config": config, "exit_code": code, "stderr_tail": tail}
        print(name, code, tail[-1:] if tail else "", file=sys.stderr)
    _write("cached-prefix.json", {"cases": cases, "verdicts": verdicts})


# -- prefill_schedule_interval (vLLM, attention DP) and prefill_decode_interval (SGLang) ---------

def _trace(rows: list[tuple[float, int, int]]) -> str:
    """Mooncake rows (arrival ms, prompt tokens, output tokens), each prompt its own."""
    return "".join(json.dumps({"timestamp": t, "input_length": n, "output_length": out,
                               "hash_ids": [1000 * (i + 1) + k for k in range(-(-n // 16))]}) + "\n"
                   for i, (t, n, out) in enumerate(rows))


# All at t=0; a long-running request on every rank keeps every pass that prefills also decoding,
# so 0.13's passes last what 0.1.0.dev2's do (servesim's timing convention) after the first one.
BACKGROUND = [(0, 64, 60), (0, 64, 60), (0, 64, 60), (0, 64, 60)]
QUEUED = [(0, 64, out) for out in (3, 5, 4, 7, 3, 6, 8, 4, 5, 3, 6, 4)]
GAP = [(0, 64, 3), (100, 64, 10), (100, 64, 10), (112, 64, 3), (113, 64, 3)]
STAGGERED = [(t, 64, 6) for t in (0, 0, 3, 7, 12, 30, 31, 44)]


def _interval_case(rows: list, backend: str, scheduler: dict, *, dp: int = 1, blocks: int = 2000,
                   block_size: int = 16) -> dict:
    config = {"traffic": {"source": {"type": "trace", "paths": ["trace.jsonl"], "format": "mooncake",
                                     "block_size": 16},
                          "load": {"type": "trace_timestamps"}},
              "engine": {"model": "Qwen/Qwen3-32B", "hardware": "h200_sxm", "backend": backend,
                         "workers": {"aggregated": {
                             "parallelism": {"attention_data": dp},
                             "scheduler": {"max_batched_tokens": 8192, "max_sequences": 256, **scheduler},
                             "kv_cache": {"block_size": block_size, "capacity": {"type": "fixed", "blocks": blocks}},
                             "timing": FIXED}}}}
    if backend == "vllm":
        config["engine"]["context_length"] = 32768
    return {"config": config, "trace": _trace(rows)}


INTERVALS = {
    **{f"vllm-dp{dp}-queued-n{n}": _interval_case(BACKGROUND[:dp] + QUEUED, "vllm",
                                                  {"prefill_schedule_interval": n, "max_sequences": 3}, dp=dp)
       for dp in (2, 4) for n in (1, 2, 3)},
    **{f"vllm-dp2-gap-n{n}": _interval_case(GAP, "vllm", {"prefill_schedule_interval": n}, dp=2) for n in (1, 2, 3)},
    **{f"vllm-dp1-queued-n{n}": _interval_case(BACKGROUND[:1] + QUEUED, "vllm",
                                               {"prefill_schedule_interval": n, "max_sequences": 3}) for n in (1, 3)},
    **{f"sglang-{name}-n{n}": _interval_case(rows, "sglang", {"prefill_decode_interval": n}, blocks=20000,
                                             block_size=1)
       for name, rows in (("staggered", STAGGERED), ("gap", GAP)) for n in (0, 1, 2, 3)},
}

INTERVAL_VERDICTS = {
    "vllm-interval-zero": _interval_case(GAP, "vllm", {"prefill_schedule_interval": 0}, dp=2)["config"],
    "vllm-interval-float": _interval_case(GAP, "vllm", {"prefill_schedule_interval": 2.0}, dp=2)["config"],
    "vllm-interval-dp1": _interval_case(GAP, "vllm", {"prefill_schedule_interval": 3})["config"],
    "vllm-with-decode-interval": _interval_case(GAP, "vllm", {"prefill_decode_interval": 1})["config"],
    "vllm-with-decode-interval-zero": _interval_case(GAP, "vllm", {"prefill_decode_interval": 0})["config"],
    "sglang-with-schedule-interval": _interval_case(GAP, "sglang", {"prefill_schedule_interval": 2},
                                                    block_size=1, blocks=20000)["config"],
    "sglang-with-schedule-interval-one": _interval_case(GAP, "sglang", {"prefill_schedule_interval": 1},
                                                        block_size=1, blocks=20000)["config"],
    "sglang-decode-interval-negative": _interval_case(GAP, "sglang", {"prefill_decode_interval": -1},
                                                      block_size=1, blocks=20000)["config"],
    "sglang-decode-interval-bool": _interval_case(GAP, "sglang", {"prefill_decode_interval": True},
                                                  block_size=1, blocks=20000)["config"],
    "trtllm-with-schedule-interval": _interval_case(GAP, "trtllm", {"prefill_schedule_interval": 2},
                                                    block_size=32)["config"],
}


def record_intervals() -> None:
    cases = {}
    for name, case in INTERVALS.items():
        code, report, tail = predict(case["config"], {"trace.jsonl": case["trace"]})
        assert code == 0 and report is not None, (name, tail)
        cases[name] = {**case, "report": report}
        print(name, report["duration_ms"], file=sys.stderr)
    verdicts = {}
    for name, config in INTERVAL_VERDICTS.items():
        code, _, tail = predict(config, {"trace.jsonl": _trace(GAP)})
        verdicts[name] = {"config": config, "exit_code": code, "stderr_tail": tail}
        print(name, code, tail[-1:] if tail else "", file=sys.stderr)
    _write("intervals.json", {"cases": cases, "verdicts": verdicts})


def _write(name: str, payload: dict) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / name).write_text(json.dumps({"producer": PRODUCER, **payload}, indent=1) + "\n")


STEPS = {"power": record_power, "prefix": record_prefix, "intervals": record_intervals}


def main() -> int:
    wanted = sys.argv[1:] or list(STEPS)
    for step in wanted:
        STEPS[step]()
    return 0


if __name__ == "__main__":
    sys.exit(main())
