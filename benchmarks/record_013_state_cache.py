"""Record AISimulate 0.13's hybrid-model state cache (`kv_cache.state_cache`, issue 34) as
black-box runs.

Runs the upstream 0.13 build (``../shared/reference/install-dynamo.sh``) with ``aisimulate
predict`` on small vLLM configs of our own whose prompts share nothing (so prefix reuse, which
servesim turns off under a state cache, plays no part) and pools small enough that the state
blocks decide admission and preemption; and on configs 0.13 accepts or refuses. Writes
``tests/cases/upstream013/state-cache.json``; `tests/upstream013/test_state_cache.py` compares
servesim with it (the reference is never run by tests).

    python benchmarks/record_013_state_cache.py
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from record_013_power_prefix_intervals import FIXED, OUT, PRODUCER, predict, synthetic  # noqa: E402


def cache(blocks: int, state: int | None, **extra: Any) -> dict:
    """A fixed pool of 16-token blocks of 1000 bytes a token, with a state of `state` bytes."""
    kv: dict[str, Any] = {"block_size": 16, "bytes_per_token": 1000, "capacity": {"type": "fixed", "blocks": blocks}}
    if state is not None:
        kv["state_cache"] = {"bytes_per_request": state}
    kv.update(extra)
    return kv


def run(kv: dict, *, input_tokens: int = 64, output_tokens: int = 40, concurrency: int = 2,
        requests: int = 4) -> dict:
    return synthetic({"input_tokens": input_tokens, "output_tokens": output_tokens},
                     {"kv_cache": kv, "timing": FIXED,
                      "scheduler": {"max_batched_tokens": 8192, "max_sequences": 256}},
                     concurrency=concurrency, requests=requests)


RUNS = {
    # 4 + 1 blocks a request at admission: both fit 10 blocks, the first decode block preempts one
    "preempt-1-state-block": run(cache(10, 16_000)),
    "no-state-10-blocks": run(cache(10, None)),
    # a state of 2.5 blocks takes 3; 3 requests of 4 + 3 blocks fit 21 but not their growth
    "state-3-blocks-3-requests": run(cache(21, 40_001), concurrency=3, requests=6),
    # a pool so large the state changes nothing
    "state-roomy-pool": run(cache(400, 16_000), concurrency=3, requests=6),
    # a byte pool: 200000 // 16000 = 12 blocks, with a state of 2 blocks
    "bytes-pool-2-state-blocks": run(cache(0, 32_000, capacity={"type": "fixed", "bytes": 200_000}),
                                     input_tokens=50, output_tokens=30, concurrency=2),
}

# one request alone: (pool blocks, input tokens, output tokens), state S = 1 block; where the
# pool is one block short of tokens + 2S, 0.13 completes nothing (exit 1)
SINGLE = [(5, 64, 1), (6, 64, 4), (7, 64, 4), (6, 60, 4), (5, 60, 5), (5, 60, 6), (6, 60, 6), (5, 48, 2),
          (6, 48, 2), (7, 64, 20), (8, 64, 20), (6, 60, 21), (7, 60, 21)]


def single(blocks: int, input_tokens: int, output_tokens: int) -> dict:
    return run(cache(blocks, 16_000), input_tokens=input_tokens, output_tokens=output_tokens, concurrency=1,
               requests=1)


BASE = run(cache(10, 16_000))


def variant(kv: dict, **engine: Any) -> dict:
    config = copy.deepcopy(BASE)
    config["engine"]["workers"]["aggregated"]["kv_cache"] = kv
    config["engine"].update(engine)
    return config


VERDICTS = {
    "ok": BASE,
    "default-capacity": variant(cache(10, 16_000, capacity={"type": "default"})),
    "no-bytes-per-token": variant({"block_size": 16, "capacity": {"type": "fixed", "blocks": 10},
                                   "state_cache": {"bytes_per_request": 16_000}}),
    "no-block-size": variant({"bytes_per_token": 1000, "capacity": {"type": "fixed", "blocks": 10},
                              "state_cache": {"bytes_per_request": 16_000}}),
    "block-size-1": variant(cache(10, 16_000, block_size=1)),
    "zero-bytes": variant(cache(10, 0)),
    "float-bytes": variant(cache(10, 16_000.0)),  # type: ignore[arg-type]
    "string-bytes": variant(cache(10, "16000")),  # type: ignore[arg-type]
    "over-u64": variant(cache(10, 1 << 64)),
    "unknown-key": variant(cache(10, 16_000, state_cache={"bytes_per_request": 16_000, "size": 1})),
    "pool-fits-state-and-block": variant(cache(2, 16_000)),
    "pool-too-small": variant(cache(2, 16_001)),
    "bytes-pool-too-small": variant(cache(0, 16_000, capacity={"type": "fixed", "bytes": 31_999})),
    "sglang": variant(cache(10, 16_000, block_size=16), backend="sglang"),
    "trtllm": variant(cache(10, 16_000, block_size=32), backend="trtllm"),
    "dtype-bad": variant(cache(10, 16_000, state_cache={"bytes_per_request": 16_000, "mamba_cache_dtype": "int8"})),
    "dtype-ok": variant(cache(10, 16_000, state_cache={"bytes_per_request": 16_000, "mamba_cache_dtype": "float32",
                                                       "indexer_cache_dtype": "fp8"})),
    "null": variant(cache(10, 16_000, state_cache=None)),
}


def main() -> int:
    runs = {}
    for name, config in RUNS.items():
        code, report, tail = predict(config)
        assert code == 0, (name, tail)
        assert report is not None
        runs[name] = {"config": config, "report": report}
        print(name, report["duration_ms"], report.get("state_cache"), file=sys.stderr)
    singles = []
    for blocks, input_tokens, output_tokens in SINGLE:
        code, report, _ = predict(single(blocks, input_tokens, output_tokens))
        singles.append({"blocks": blocks, "input_tokens": input_tokens, "output_tokens": output_tokens,
                        "exit_code": code, "duration_ms": report["duration_ms"] if report else None})
        print(singles[-1], file=sys.stderr)
    verdicts = {}
    for name, config in VERDICTS.items():
        code, _, tail = predict(config)
        verdicts[name] = {"config": config, "exit_code": code, "stderr_tail": tail}
        print(name, code, tail[-1:], file=sys.stderr)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "state-cache.json").write_text(json.dumps({"producer": PRODUCER.replace(
        "record_013_power_prefix_intervals", "record_013_state_cache"), "runs": runs, "single": singles, "verdicts": verdicts},
        indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
