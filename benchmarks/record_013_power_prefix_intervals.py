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


def _write(name: str, payload: dict) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / name).write_text(json.dumps({"producer": PRODUCER, **payload}, indent=1) + "\n")


STEPS = {"power": record_power}


def main() -> int:
    wanted = sys.argv[1:] or list(STEPS)
    for step in wanted:
        STEPS[step]()
    return 0


if __name__ == "__main__":
    sys.exit(main())
