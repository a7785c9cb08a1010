#!/usr/bin/env python3
"""Does aiconfigurator-core 0.12.0 read the reference's database as the reference's own AIC does?

servesim times passes with the `aiconfigurator-core` package on the reference's data; the
reference uses the AIC build inside its wheel. For every (GPU, backend, version) of the
database this compiles Qwen3-8B (TP 1) with both and compares six prefill/decode latencies.

    python3 benchmarks/aic_code_parity.py            # needs the reference (../shared/reference)
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYTHON = ROOT.parent / "shared" / "reference" / "python.sh"
PREFILL = ((1, 1500, 0), (4, 3000, 1000), (8, 700, 0))
DECODE = ((1, 1500), (16, 3000), (64, 9000))


def probe(systems: str, combos: list[list[str]], out: str) -> None:
    """Latencies per combination (or the error), with whichever aiconfigurator_core is importable."""
    logging.disable(logging.CRITICAL)
    import aiconfigurator_core
    from aiconfigurator_core.sdk.engine import compile_engine

    found = {}
    for gpu, backend, version in combos:
        try:
            spec = compile_engine("Qwen/Qwen3-8B", gpu, backend, backend_version=version, tp_size=1, pp_size=1,
                                  attention_dp_size=1, nextn=0, kv_block_size=32, systems_path=systems)
            engine = aiconfigurator_core.AicEngine.from_spec(spec, systems)
            found[" ".join((gpu, backend, version))] = (
                [engine.predict_prefill_latency(*args) for args in PREFILL]
                + [engine.predict_decode_latency(b, ctx, 2) for b, ctx in DECODE])
        except Exception as exc:  # noqa: BLE001 - reported, not raised
            found[" ".join((gpu, backend, version))] = f"{type(exc).__name__}"
    Path(out).write_text(json.dumps(found))


def main() -> int:
    sys.path.insert(0, str(ROOT / "src"))
    from servesim.perf import aicdata
    from servesim.perf.aic import data_versions

    root = aicdata.fetch()[0]
    gpus = sorted(p.name for p in (root / "data").iterdir())
    combos = [[g, b, v] for g in gpus for b in ("vllm", "sglang", "trtllm") for v in data_versions(root, g, b)]
    with tempfile.TemporaryDirectory() as tmp:
        results = []
        for python in ([sys.executable], [str(PYTHON)]):
            out = str(Path(tmp, f"{len(results)}.json"))
            code = f"import sys; sys.path.insert(0, {str(ROOT / 'benchmarks')!r}); import aic_code_parity as m; " \
                   f"m.probe({str(root)!r}, {combos!r}, {out!r})"
            subprocess.run([*python, "-c", code], check=True)
            results.append(json.loads(Path(out).read_text()))
    mine, ref = results
    same = sum(mine[k] == ref[k] for k in mine)
    print(f"{same}/{len(mine)} identical (both failing: "
          f"{sum(isinstance(mine[k], str) and mine[k] == ref[k] for k in mine)})")
    for key in mine:
        if mine[key] != ref[key]:
            if isinstance(mine[key], list) and isinstance(ref[key], list):
                worst = max(abs(a / b - 1) for a, b in zip(mine[key], ref[key], strict=True))
                print(f"  {key}: largest relative difference {worst:.2e}")
            else:
                print(f"  {key}: servesim {mine[key] if isinstance(mine[key], str) else 'ok'}, "
                      f"reference {ref[key] if isinstance(ref[key], str) else 'ok'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
