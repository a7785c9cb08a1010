#!/usr/bin/env python3
"""Validation against real GPUs: regenerate the reference-parity section of docs/validation.md.

Three real vLLM 0.19.0 runs on RTX PRO 6000 (LLMServingSim's bench, ../shared/data/
llmservingsim-vllm-validation): the exact 300-request traces, engine settings and measured
per-request timestamps. Each run is replayed by servesim (default AIConfigurator timing and
default KV capacity, vLLM 0.19.0 data) and by the reference; the page compares the mean,
median and p99 of TTFT, TPOT and E2E.

    python3 benchmarks/validate.py                     # regenerate docs/validation.md
    python3 benchmarks/validate.py --record-reference  # also re-record validation_reference.json

The vLLM 0.19.0 data comes from servesim's default database, the reference's own (fetched into
servesim's cache on first use), or from $SERVESIM_AIC_SYSTEMS_PATH. The reference columns come from a live
run of the reference when it is installed, else from validation_reference.json next to this
script (recorded once; it states the date and the reference version).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
DATA = SHARED / "data" / "llmservingsim-vllm-validation"
REFERENCE = SHARED / "reference"
CACHE = Path(__file__).with_name("validation_reference.json")
OUT = ROOT / "docs" / "validation.md"
REFERENCE_VERSION = "AISimulate 0.1.0.dev2 (aisimulate==0.1.0.dev2)"

sys.path.insert(0, str(ROOT / "src"))

RUNS = [
    # name, example folder, trace, model (AIC bundled id), parallelism, reference's own mean errors
    ("Llama-3.1-8B, TP1", "Llama-3.1-8B", "sharegpt-llama-3.1-8b-300-sps10", "meta-llama/Meta-Llama-3.1-8B",
     {"tensor": 1}),
    ("Qwen3-32B, TP2", "Qwen3-32B", "sharegpt-qwen3-32b-300-sps10", "Qwen/Qwen3-32B", {"tensor": 2}),
    ("Qwen3-30B-A3B, DP2 + EP2", "Qwen3-30B-A3B-Instruct-2507", "sharegpt-qwen3-30b-a3b-300-sps10",
     "Qwen/Qwen3-30B-A3B", {"tensor": 1, "attention_data": 2, "moe_expert": 2}),
]
METRICS = ("ttft", "tpot", "e2e")
BOUND_PCT = 3.0
SLACK_POINTS = 1.0


def config_for(folder: str, trace: str, model: str, parallelism: dict) -> dict:
    """The deployment of the real run (vllm/meta.json): bf16, block 16, 2048 batched tokens, 128 seqs."""
    meta = json.loads((DATA / "examples" / "RTXPRO6000" / folder / "vllm" / "meta.json").read_text())
    kwargs = meta["engine_kwargs"]
    assert meta["vllm_version"] == "0.19.0" and kwargs["dtype"] == "bfloat16"
    return {
        "engine": {
            "model": model, "hardware": "rtx_pro_6000_server", "backend": "vllm",
            "workers": {"aggregated": {
                "parallelism": parallelism,
                "scheduler": {"max_batched_tokens": kwargs["max_num_batched_tokens"],
                              "max_sequences": kwargs["max_num_seqs"]},
                "kv_cache": {"block_size": 16},
            }},
        },
        "traffic": {
            "source": {"type": "trace", "format": "mooncake",
                       "paths": [str(DATA / "traces" / f"{trace}.mooncake.jsonl")]},
            "load": {"type": "trace_timestamps"},
        },
    }


def real_metrics(folder: str) -> dict[str, list[float]]:
    rows = [json.loads(line) for line in
            (DATA / "examples" / "RTXPRO6000" / folder / "vllm" / "requests.jsonl").read_text().splitlines()]
    return {
        "ttft": [(r["first_token_ts"] - r["queued_ts"]) * 1000 for r in rows],
        "tpot": [(r["last_token_ts"] - r["first_token_ts"]) * 1000 / max(1, r["output_toks"] - 1) for r in rows],
        "e2e": [(r["last_token_ts"] - r["queued_ts"]) * 1000 for r in rows],
    }


def sim_metrics(records: list[dict]) -> dict[str, list[float]]:
    done = [r for r in records if r.get("first_token_ms") is not None and r.get("last_token_ms") is not None]
    return {
        "ttft": [r["ttft_ms"] for r in done],
        "tpot": [(r["last_token_ms"] - r["first_token_ms"]) / max(1, r["output_length"] - 1) for r in done],
        "e2e": [r["e2e_latency_ms"] for r in done],
    }


def summary(values: dict[str, list[float]]) -> dict[str, dict[str, float]]:
    return {m: {"mean": float(np.mean(v)), "median": float(np.median(v)), "p99": float(np.percentile(v, 99)),
                "n": len(v)} for m, v in values.items()}


def reference_installed() -> bool:
    try:
        return subprocess.run([str(REFERENCE / "install.sh"), "--check"], capture_output=True,
                              timeout=120).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def systems_with_0190() -> tuple[str | None, str]:
    env = os.environ.get("SERVESIM_AIC_SYSTEMS_PATH")
    if env:
        return env, "$SERVESIM_AIC_SYSTEMS_PATH"
    return None, "servesim's default database, the reference's own AIConfigurator data"


def run_servesim(config: dict, systems: str | None) -> dict:
    import servesim

    config = json.loads(json.dumps(config))
    config["compat"] = "reference"  # the reference-parity section: the reference's model
    if systems is not None:
        config["engine"]["aic_systems_path"] = systems
    report = servesim.simulate(config, capture_per_request=True).to_dict()
    return summary(sim_metrics(report["per_request"]))


def package_systems() -> Path:
    from servesim.perf.hardware import package_systems_dir

    return package_systems_dir()


def with_version(config: dict, version: str) -> dict:
    config = json.loads(json.dumps(config))
    config["engine"]["backend_version"] = version
    return config


def with_timing(config: dict, timing: dict) -> dict:
    config = json.loads(json.dumps(config))
    config["engine"]["workers"]["aggregated"]["timing"] = timing
    return config


def run_reference(config: dict) -> dict:
    with tempfile.TemporaryDirectory(prefix="servesim-validate-") as tmp:
        path = Path(tmp) / "config.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        subprocess.run([str(REFERENCE / "run.sh"), str(path), str(Path(tmp) / "out")],
                       stdout=subprocess.DEVNULL, check=True)
        records = [json.loads(line) for line in (Path(tmp) / "out" / "requests.jsonl").read_text().splitlines()]
    return summary(sim_metrics(records))


def err(value: float, real: float) -> float:
    return 100.0 * (value / real - 1.0)


def render(results: list[dict], systems_note: str, reference_note: str) -> str:
    lines = [
        "Three real vLLM 0.19.0 runs on NVIDIA RTX PRO 6000 Blackwell Server GPUs (LLMServingSim's",
        "bench, `../shared/data/llmservingsim-vllm-validation`, MIT): the exact 300-request ShareGPT",
        "traces (~10 req/s, mean ISL ~860, OSL pinned), the engine settings of `vllm/meta.json` (bf16,",
        "block 16, `max_num_batched_tokens` 2048, `max_num_seqs` 128) and the measured per-request",
        "timestamps. TTFT = first_token_ts − queued_ts, E2E = last_token_ts − queued_ts,",
        "TPOT = (last − first) / (output_toks − 1), all in ms; p99 is numpy's linear percentile.",
        "",
        "Each run is replayed with `timing: {type: default}` (AIConfigurator, `rtx_pro_6000_server`,",
        "vLLM 0.19.0 data) and the default KV capacity, by servesim and by the reference, on the",
        "same config (`benchmarks/validate.py` writes it: Mooncake trace at its timestamps, model",
        "ids of the AIConfigurator database; the MoE run is `attention_data: 2, moe_expert: 2`).",
        "",
        f"* servesim's data: {systems_note}.",
        f"* reference columns: {reference_note}.",
        f"* bound: servesim's mean errors within {BOUND_PCT:g} % where the reference's are, and never more",
        f"  than {SLACK_POINTS:g} point worse than the reference's own.",
        "",
        "Regenerate with `python3 benchmarks/validate.py`.",
        "",
    ]
    verdicts = []
    for res in results:
        lines += [f"### {res['name']}", "",
                  "| metric | real | servesim | reference | servesim error | reference error |",
                  "|---|---:|---:|---:|---:|---:|"]
        for m in METRICS:
            for stat in ("mean", "median", "p99"):
                r, s, ref = res["real"][m][stat], res["servesim"][m][stat], res["reference"][m][stat]
                lines.append(f"| {m.upper()} {stat} | {r:,.1f} | {s:,.1f} | {ref:,.1f} | {err(s, r):+.1f} % | "
                             f"{err(ref, r):+.1f} % |")
            es, er = abs(err(res["servesim"][m]["mean"], res["real"][m]["mean"])), \
                abs(err(res["reference"][m]["mean"], res["real"][m]["mean"]))
            ok = es <= er + SLACK_POINTS and (er > BOUND_PCT or es <= BOUND_PCT)
            verdicts.append((res["name"], m, es, er, ok))
        same = all(math.isclose(res["servesim"][m][s], res["reference"][m][s], rel_tol=1e-9)
                   for m in METRICS for s in ("mean", "median", "p99"))
        lines += ["", f"Requests: {res['servesim']['ttft']['n']} simulated, {res['real']['ttft']['n']} real. "
                  + ("servesim and the reference agree on every statistic (same engine, same AIC values)."
                     if same else "servesim and the reference differ."), "",
                  "Other servesim timing choices (mean error against the real run; the real engine was vLLM "
                  "0.19.0, so 0.24.0 data and the data-free roofline are expected to miss more):", "",
                  "| servesim variant | TTFT | TPOT | E2E |", "|---|---:|---:|---:|"]
        for variant, stats in res["alternatives"].items():
            lines.append(f"| {variant} | " + " | ".join(f"{err(stats[m]['mean'], res['real'][m]['mean']):+.1f} %"
                                                       for m in METRICS) + " |")
        lines.append("")
    lines += ["### Bound check (mean errors)", "", "| run | metric | servesim | reference | within bound |",
              "|---|---|---:|---:|---|"]
    for name, m, es, er, ok in verdicts:
        lines.append(f"| {name} | {m.upper()} | {es:.1f} % | {er:.1f} % | {'yes' if ok else 'NO'} |")
    lines.append("")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--record-reference", action="store_true",
                        help="run the reference and store its numbers in validation_reference.json")
    parser.add_argument("--output", type=Path, default=OUT)
    args = parser.parse_args()
    if not DATA.is_dir():
        print(f"error: {DATA} not found (the shared data pack)", file=sys.stderr)
        return 1
    systems, systems_note = systems_with_0190()
    live = reference_installed()
    if args.record_reference and not live:
        print("error: --record-reference needs the reference (../shared/reference/install.sh)", file=sys.stderr)
        return 1
    cache = json.loads(CACHE.read_text()) if CACHE.exists() else None
    results, recorded = [], {}
    for name, folder, trace, model, par in RUNS:
        config = config_for(folder, trace, model, par)
        print(f"[validate] {name}: servesim ...", file=sys.stderr)
        res = {"name": name, "real": summary(real_metrics(folder)), "servesim": run_servesim(config, systems)}
        res["alternatives"] = {
            "default timing, package database (vLLM 0.24.0)": run_servesim(
                with_version(config, "0.24.0"), str(package_systems())),
            "roofline timing": run_servesim(with_timing(config, {"type": "roofline"}), systems),
        }
        if live:
            print(f"[validate] {name}: reference ...", file=sys.stderr)
            res["reference"] = recorded[name] = run_reference(config)
        elif cache is not None:
            res["reference"] = cache["runs"][name]
        else:
            print("error: the reference is not installed and validation_reference.json is missing", file=sys.stderr)
            return 1
        results.append(res)
    if live:
        reference_note = f"a live run of {REFERENCE_VERSION} on {dt.date.today().isoformat()}"
        if args.record_reference or cache is None:
            CACHE.write_text(json.dumps({"reference": REFERENCE_VERSION, "recorded": dt.date.today().isoformat(),
                                         "runs": recorded}, indent=1, sort_keys=True) + "\n")
    else:
        reference_note = (f"numbers recorded on {cache['recorded']} from {cache['reference']} "
                          f"(`benchmarks/{CACHE.name}`)")
    from servesim.studies.validate import write_section

    write_section(args.output, "reference parity", render(results, systems_note, reference_note))
    print(f"[validate] wrote {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
