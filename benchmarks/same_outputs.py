#!/usr/bin/env python3
"""Whether two `servesim predict` output folders hold the same results.

    python3 benchmarks/same_outputs.py BEFORE_DIR AFTER_DIR

`requests.jsonl` (when present) must be byte-identical; `prediction.json` must be equal but for
the fields derived from the wall clock (`wall_time_ms`, `processed_*_per_s`). Exit 0 when the
same, 1 (naming the first difference) when not.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

WALL_CLOCK = ("wall_time_ms",)


def _summary(path: Path) -> dict:
    data = json.loads(path.read_text())
    return {k: v for k, v in data.items() if k not in WALL_CLOCK and not k.startswith("processed_")}


def main() -> int:
    before, after = (Path(p) for p in sys.argv[1:3])
    a, b = _summary(before / "prediction.json"), _summary(after / "prediction.json")
    if a != b:
        first = next(k for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k))
        print(f"prediction.json differs at {first!r}")
        return 1
    requests = [d / "requests.jsonl" for d in (before, after)]
    if any(p.exists() for p in requests) and (not all(p.exists() for p in requests)
                                               or requests[0].read_bytes() != requests[1].read_bytes()):
        print("requests.jsonl differs")
        return 1
    print("same")
    return 0


if __name__ == "__main__":
    sys.exit(main())
