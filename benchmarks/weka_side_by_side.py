"""Run the `weka` cases of tests/cases/weka through AISimulate 0.13 (the upstream build,
`../shared/reference/install-dynamo.sh`) and servesim side by side, and say which summary and
per-request fields agree.

    python benchmarks/weka_side_by_side.py            # compare every case
    python benchmarks/weka_side_by_side.py --record   # also store 0.13's outputs in each case
                                                      # (report.json without per_request,
                                                      # requests.jsonl) for tests/test_parity_weka.py
    python benchmarks/weka_side_by_side.py [--record] CASE...   # only these cases (folder names)
    python benchmarks/weka_side_by_side.py --cases tests/cases/weka_aborted [--record]   # another folder

Needs the 0.13 venv ($SERVESIM_REFERENCE_HOME/dynamo, default ~/.cache/servesim-reference);
servesim runs with `--compat upstream-0.13` (0.13's pass convention). The traces come from benchmarks/weka_traces.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CASES = ROOT / "tests" / "cases" / "weka"
HOME = Path(os.environ.get("SERVESIM_REFERENCE_HOME", Path.home() / ".cache" / "servesim-reference"))
AISIMULATE = HOME / "dynamo" / "bin" / "aisimulate"
HOST_FIELDS = {"wall_time_ms", "processed_tokens_per_s", "processed_output_tokens_per_s"}
PER_REQUEST = ("request_id", "play_id", "session_id", "input_length", "output_length", "requested_output_length",
               "itl_ms", "ttft_ms", "e2e_latency_ms", "dispatched_at_ms")


def run_upstream(case: Path, out: Path) -> dict:
    subprocess.run([str(AISIMULATE), "predict", "-c", "config.yaml", "--overwrite", "--capture-per-request",
                    "--format", "json", "--output-dir", str(out)], cwd=case, check=False,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # an aborted warm-up exits 1 with its report
    return json.loads((out / "prediction.json").read_text())


def run_servesim(case: Path, out: Path) -> dict:
    subprocess.run([sys.executable, "-m", "servesim", "predict", "-c", "config.yaml", "--overwrite",
                    "--capture-per-request", "--format", "json", "--compat", "upstream-0.13", "--output-dir", str(out)],
                   cwd=case, check=False, stdout=subprocess.DEVNULL)
    return json.loads((out / "prediction.json").read_text())


def same(key: str, a: object, b: object) -> bool:
    if isinstance(a, float) and isinstance(b, float) and key.startswith(("mean_", "std_")):
        return abs(a - b) <= 1e-12 * max(1.0, abs(a))
    return a == b


def compare(case: Path, upstream: dict, ours: dict) -> None:
    theirs = upstream.pop("per_request")
    mine = ours.pop("per_request", [])
    common = sorted(k for k in ours if k in upstream and k not in HOST_FIELDS)
    differ = [k for k in common if not same(k, upstream[k], ours[k])]
    print(f"{case.name}: {len(common) - len(differ)}/{len(common)} common summary fields equal")
    for k in differ:
        print(f"    differs  {k}: 0.13={upstream[k]!r} servesim={ours[k]!r}")
    print(f"    only in 0.13: {', '.join(sorted(set(upstream) - set(ours)))}")
    if "agentic_snapshots" in upstream:
        same_snap = upstream["agentic_snapshots"] == ours.get("agentic_snapshots")
        print(f"    agentic_snapshots: {'equal' if same_snap else 'DIFFER'}")
    if "agentic_phases" in upstream:
        compare_phases(upstream["agentic_phases"], ours.get("agentic_phases") or {})
    by_id = {r["request_id"]: r for r in mine}
    for field in PER_REQUEST:
        equal = sum(1 for r in theirs if field in r and by_id.get(r["request_id"], {}).get(field) == r[field])
        print(f"    per request {field}: {equal}/{len(theirs)} equal")


PHASE_TIMES = {"causal_terminal_at_ms", "dispatched_at_ms", "first_admit_ms", "quiescent_at_ms"}


def compare_phases(upstream: dict, ours: dict) -> None:
    """The warm-up's `agentic_phases` block: every field, per request every field but its times."""
    for key in sorted(upstream):
        if key != "requests":
            print(f"    agentic_phases.{key}: {'equal' if upstream[key] == ours.get(key) else 'DIFFER'}")
    theirs, mine = upstream["requests"], ours.get("requests", [])
    for field in sorted(theirs[0]) if theirs else []:
        equal = sum(1 for a, b in zip(theirs, mine, strict=False) if a[field] == b.get(field))
        print(f"    agentic_phases.requests {field}: {equal}/{len(theirs)} equal"
              + (" (a time)" if field in PHASE_TIMES else ""))


def main(argv: list[str]) -> int:
    record = "--record" in argv
    cases = CASES
    if "--cases" in argv:
        cases = Path(argv[argv.index("--cases") + 1]).resolve()
        argv = argv[:argv.index("--cases")] + argv[argv.index("--cases") + 2:]
    names = [a for a in argv[1:] if not a.startswith("--")]
    if not AISIMULATE.exists():
        print(f"AISimulate 0.13 not found at {AISIMULATE}; run ../shared/reference/install-dynamo.sh", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        for case in sorted(p for p in cases.iterdir() if (p / "config.yaml").exists()
                           and (not names or p.name in names)):
            upstream = run_upstream(case, Path(tmp) / case.name / "upstream")
            if record:
                (case / "requests.jsonl").write_text("".join(json.dumps(r, sort_keys=True) + "\n"
                                                             for r in upstream["per_request"]))
                summary = {k: v for k, v in upstream.items() if k != "per_request"}
                (case / "report.json").write_text(json.dumps(summary, indent=1, sort_keys=True) + "\n")
            compare(case, upstream, run_servesim(case, Path(tmp) / case.name / "servesim"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
