#!/usr/bin/env python3
"""Differential test of default timing and capacity across the reference's database versions.

For every (GPU, backend, version) the reference's AIConfigurator database holds data for — or a
sample of them, `--sample N` — one small config (a bundled model that fits the GPU; synthetic
requests under concurrency; default timing and KV capacity) is run by servesim, on its default
database, and by the reference (`../shared/reference/run.sh`). Summary fields must agree (means
and standard deviations to 1e-12 relative); a config both refuse counts as agreeing.

    python3 benchmarks/difftest_versions.py --sample 30 --seed 1
    python3 benchmarks/difftest_versions.py --gpu h200_sxm --backend sglang
"""

from __future__ import annotations

import argparse
import json
import math
import random
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from servesim.perf import aicdata  # noqa: E402
from servesim.perf.aic import data_versions  # noqa: E402

RUN = ROOT.parent / "shared" / "reference" / "run.sh"
HOST = {"wall_time_ms", "processed_tokens_per_s", "processed_output_tokens_per_s", "per_request"}
MODELS = {"vllm": "Qwen/Qwen3-8B", "sglang": "meta-llama/Meta-Llama-3.1-8B", "trtllm": "Qwen/Qwen3-8B"}


def combos(gpus: list[str], backends: list[str]) -> list[tuple[str, str, str]]:
    root = aicdata.ensure(gpus)
    return [(gpu, backend, version) for gpu in gpus for backend in backends
            for version in data_versions(root, gpu, backend)]


def config_text(gpu: str, backend: str, version: str) -> str:
    return json.dumps({
        "engine": {"model": MODELS[backend], "hardware": gpu, "backend": backend, "backend_version": version,
                   "context_length": 8192, "workers": {"aggregated": {}}},
        "traffic": {"source": {"type": "synthetic", "input_tokens": 1500, "output_tokens": 40},
                    "load": {"type": "concurrency", "concurrency": 6}, "stop": {"requests": 18}}})


def run(command: list[str], out: Path, cwd: Path) -> dict | None:
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True)
    return json.loads((out / "prediction.json").read_text()) if done.returncode == 0 else None


def same(ref: dict | None, mine: dict | None) -> bool:
    if ref is None or mine is None:
        return ref is None and mine is None
    for key, want in ref.items():
        got = mine.get(key)
        if key in HOST:
            continue
        if isinstance(want, float) and key.split("_")[0] in ("mean", "std"):
            if not math.isclose(got, want, rel_tol=1e-12, abs_tol=1e-12):
                return False
        elif got != want:
            return False
    return True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", action="append", default=[])
    parser.add_argument("--backend", action="append", default=[])
    parser.add_argument("--sample", type=int, default=0, help="this many combinations at random (0: all)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    todo = combos(args.gpu or ["h100_sxm", "h200_sxm"], args.backend or list(MODELS))
    if args.sample:
        todo = random.Random(args.seed).sample(todo, min(args.sample, len(todo)))
    failures = 0
    for gpu, backend, version in todo:
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            (folder / "config.yaml").write_text(config_text(gpu, backend, version))
            ref = run([str(RUN), "config.yaml", "ref"], folder / "ref", folder)
            mine = run([sys.executable, "-m", "servesim", "--compat", "reference", "predict", "-c", "config.yaml", "--output-dir", "mine"],
                       folder / "mine", folder)
        ok = same(ref, mine)
        failures += not ok
        status = "both fail" if ref is None and mine is None else ("match" if ok else "DIFFER")
        print(f"{gpu:10s} {backend:7s} {version:14s} {status}"
              + ("" if ok or ref is None or mine is None else
                 f"  mean_ttft {ref['mean_ttft_ms']:.4f} vs {mine['mean_ttft_ms']:.4f}")
              + (f"  (reference {'ok' if ref else 'fails'}, servesim {'ok' if mine else 'fails'})"
                 if (ref is None) != (mine is None) else ""), flush=True)
    print(f"{len(todo) - failures}/{len(todo)} agree")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
