"""What `--report` costs: wall time of `servesim predict` with and without it, and the size of
report.html, on the fixed-timing case r1 (128 -> 16 tokens, 8 replicas, Poisson 400 req/s).

    python3 benchmarks/report_overhead.py                 # 100,000 requests, best of 3 each
    python3 benchmarks/report_overhead.py -n 1 1000000    # one run each at 1,000,000 requests

Runs alternate (plain, report, plain, report, …) so that load on the machine hits both alike;
the ratio is best against best. CPU time (user + system of the servesim process) is reported
beside wall time: on a shared machine it is the steadier of the two.
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CONFIG = Path(__file__).resolve().parent / "configs" / "r1-fixed-report.yaml"


def run(requests: int, out: Path, report: bool) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one `servesim predict`."""
    cmd = [sys.executable, "-m", "servesim", "predict", "-c", str(CONFIG), "--output-dir", str(out),
           "--overwrite", "--format", "json", "--set", f"traffic.stop.requests={requests}"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(cmd + (["--report"] if report else []), check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("requests", nargs="*", type=int, default=[100_000])
    parser.add_argument("-n", "--repeat", type=int, default=3)
    args = parser.parse_args()
    print("| requests | predict wall / CPU (s) | --report wall / CPU (s) | extra wall / CPU | report.html (MB) |")
    print("|---:|---:|---:|---:|---:|")
    for requests in args.requests:
        with tempfile.TemporaryDirectory() as tmp:
            plain, with_report = [], []
            for _ in range(args.repeat):
                plain.append(run(requests, Path(tmp) / "plain", False))
                with_report.append(run(requests, Path(tmp) / "report", True))
            size = (Path(tmp) / "report" / "report.html").stat().st_size / 1e6
        (a, ca), (b, cb) = (min(t[0] for t in plain), min(t[1] for t in plain)), \
            (min(t[0] for t in with_report), min(t[1] for t in with_report))
        print(f"| {requests:,} | {a:.2f} / {ca:.2f} | {b:.2f} / {cb:.2f} | "
              f"{100 * (b - a) / a:+.1f} % / {100 * (cb - ca) / ca:+.1f} % | {size:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
