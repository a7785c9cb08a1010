"""Write the small `weka` traces of tests/cases/weka (each case folder gets its trace file and
config.yaml); `benchmarks/weka_side_by_side.py` then runs them through AISimulate 0.13 and
servesim. The traces exercise the reader's rules: chains detected from shared hash-id prefixes,
a preamble request, forked worker chains, blocking and background subagents with absolute or
relative nested timestamps, partial tail blocks, hash-less requests, zero outputs, api_time.

usage: python benchmarks/weka_traces.py [CASES_DIR]   (default tests/cases/weka)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def req(t, inp, out, hashes, api=None, kind="n", model="m-a", **extra):
    row = {"type": kind, "t": t, "model": model, "in": inp, "out": out, "hash_ids": list(hashes)}
    if api is not None:
        row["api_time"] = api
    row.update(extra)
    return row


def sub(t, agent_id, requests, status="completed", duration_ms=None):
    row = {"type": "subagent", "t": t, "agent_id": agent_id, "subagent_type": "Explore",
           "status": status, "requests": requests}
    if duration_ms is not None:
        row["duration_ms"] = duration_ms
    return row


def chain_trace() -> dict:
    """One play: a root chain, a blocking subagent joined back, a background one (absolute)."""
    return {
        "id": "alpha", "models": ["m-a"], "block_size": 16, "hash_id_scope": "local",
        "tool_tokens": 10, "system_tokens": 20,
        "requests": [
            req(0.0, 40, 8, [1, 2, 3], api=0.05, kind="s", stop="end_turn", think_time=0.0),
            req(0.4, 70, 12, [1, 2, 3, 4, 5], api=0.08),
            sub(0.55, "ag-1", [
                req(0.6, 33, 6, [100, 101, 102], api=0.03),
                req(0.9, 60, 9, [100, 101, 102, 103], api=0.04),
            ], duration_ms=500),
            req(1.2, 100, 20, [1, 2, 3, 4, 5, 6, 7], api=0.2),
            sub(1.3, "bg-1", [req(1.35, 20, 4, [200, 201], api=0.01)], status="async_launched"),
            req(2.0, 130, 0, [1, 2, 3, 4, 5, 6, 7, 8, 9], api=0.1),
        ],
    }


def relative_traces() -> list[dict]:
    """Two plays in one JSONL file; nested timestamps relative to their marker (auto finds it)."""
    first = {
        "id": "beta", "block_size": 16, "hash_id_scope": "local",
        "requests": [
            req(5.0, 10, 3, [900], api=0.02),  # preamble: shares nothing with what follows
            req(5.1, 48, 10, [10, 11, 12], api=0.05, model="m-b"),
            req(5.5, 64, 10, [10, 11, 12, 13], api=0.06, model="m-b"),
            req(5.6, 50, 7, [10, 11, 30, 31], api=0.05, model="m-b"),  # forks a worker chain
            sub(5.7, "ag-r", [req(0.05, 25, 5, [300, 301], api=0.02, model="m-b"),
                              req(0.3, 40, 5, [300, 301, 302], api=0.02, model="m-b")]),
            req(6.3, 90, 11, [10, 11, 12, 13, 14, 15], api=0.05, model="m-b"),
            req(6.4, 66, 4, [10, 11, 30, 31, 32], api=0.04, model="m-b"),
            req(6.9, 20, 2, [], api=0.01, model="m-b"),  # hash-less
        ],
    }
    second = {
        "id": "gamma", "models": ["m-a"], "block_size": 16, "hash_id_scope": "local",
        "requests": [
            req(0.0, 32, 5, [1, 2], api=0.1),
            req(0.3, 50, 5, [1, 2, 3, 4]),  # no api_time: a zero-width interval
            req(0.31, 80, 6, [1, 2, 3, 4, 5], api=0.02),
        ],
    }
    return [first, second]


CONFIG = """engine:
  mode: aggregated
  model: Qwen/Qwen3-8B
  hardware: h200_sxm
  backend: vllm
  context_length: 32768
  workers:
    aggregated:
      parallelism:
        replicas: {replicas}
        tensor: 1
      scheduler:
        max_batched_tokens: 8192
        max_sequences: 256
      kv_cache:
        block_size: 16
        prefix_caching: true
        capacity:
          type: fixed
          blocks: 2000
      timing:
        type: {timing}
traffic:
  source:
    type: trace
    format: weka
    paths:
    - {path}
{basis}  load:
    type: trace_timestamps
{load}"""


PD_CONFIG = """engine:
  mode: disaggregated
  model: Qwen/Qwen3-8B
  hardware: h200_sxm
  backend: vllm
  context_length: {context}
  workers:
    prefill:
      parallelism: {{replicas: {replicas}}}
      kv_cache: {{block_size: 16, prefix_caching: true, capacity: {{type: fixed, blocks: 1000}}}}
      timing: {timing}
    decode:
      parallelism: {{replicas: {replicas}}}
      kv_cache: {{block_size: 16, prefix_caching: true, capacity: {{type: fixed, blocks: 1000}}}}
      timing: {timing}
  kv_transfer: {{bytes_per_token: 100000, bandwidth_gb_per_second: 10, timing_mode: full_prompt}}
traffic:
  source:
    type: trace
    format: weka
    paths:
    - {path}
  load:
    type: trace_timestamps
{load}"""
FIXED = "{type: fixed, prefill_ms: 10, decode_ms: 2}"


def write_pd_case(root: Path, name: str, filename: str, text: str, *, replicas=1, timing=FIXED,
                  load="    speedup: 1\n", context=32768) -> None:
    """A case on disaggregated prefill/decode pools."""
    folder = root / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / filename).write_text(text)
    (folder / "config.yaml").write_text(PD_CONFIG.format(replicas=replicas, timing=timing, path=filename, load=load,
                                                         context=context))


def shifted(trace: dict, offset_s: float) -> dict:
    """`trace` with its top-level timestamps moved `offset_s` later (nested relative ones stay)."""
    out = json.loads(json.dumps(trace))
    for row in out["requests"]:
        row["t"] = round(row["t"] + offset_s, 6)
    return out


def seeded_snapshot(lanes: int, seed: int, speedup: float, warmup: bool = False) -> str:
    """A load with a seed-only `agentic_snapshot` (0.13 draws every lane's play and cut)."""
    return (f"    speedup: {speedup}\n    agentic_lanes: {lanes}\n" + ("    agentic_warmup: true\n" if warmup else "")
            + f"    agentic_snapshot:\n      seed: {seed}\n")


def explicit_snapshot(cuts: list[tuple[str, float]], seed: int, speedup: float, warmup: bool = False,
                      cursor: int | None = None) -> str:
    """A load whose `agentic_snapshot` gives every lane's (source play, cut)."""
    rows = "".join(f"      - source_play_id: {play}\n        t_star_ms: {cut}\n" for play, cut in cuts)
    return (f"    speedup: {speedup}\n    agentic_lanes: {len(cuts)}\n" + ("    agentic_warmup: true\n" if warmup else "")
            + f"    agentic_snapshot:\n      seed: {seed}\n      initial_selections:\n{rows}"
            f"      corpus_cursor: {len(cuts) if cursor is None else cursor}\n")


def profile(duration_s: float, **options: float) -> str:
    """An `agentic_profile` of `duration_s` seconds (the other options at 0.13's defaults unless given)."""
    rows = "".join(f"      {key}: {value}\n" for key, value in options.items())
    return f"    agentic_profile:\n      duration_seconds: {duration_s}\n{rows}"


LIVE_POLICY = "    agentic_warmup_policy: live_trajectory_v1\n"


def write_case(root: Path, name: str, filename: str, text: str, *, replicas=1, timing="polynomial",
               basis=None, load="    speedup: 1\n") -> None:
    folder = root / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / filename).write_text(text)
    basis_line = f"    nested_timestamp_basis: {basis}\n" if basis else ""
    (folder / "config.yaml").write_text(CONFIG.format(replicas=replicas, timing=timing, path=filename,
                                                      basis=basis_line, load=load))


def main(argv: list[str]) -> int:
    root = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parents[1] / "tests/cases/weka"
    alpha = json.dumps(chain_trace(), indent=1) + "\n"
    rel = "".join(json.dumps(t) + "\n" for t in relative_traces())
    write_case(root, "chain-json", "alpha.json", alpha)
    write_case(root, "chain-json-2x", "alpha.json", alpha, replicas=2, load="    speedup: 2\n")
    write_case(root, "relative-jsonl", "plays.jsonl", rel)
    write_case(root, "relative-jsonl-explicit", "plays.jsonl", rel, basis="relative", replicas=2)
    three = "".join(json.dumps(t) + "\n" for t in [*relative_traces(), chain_trace()])
    write_case(root, "lanes1-jsonl", "plays.jsonl", rel, load="    speedup: 1\n    agentic_lanes: 1\n")
    write_case(root, "lanes2-three-plays", "three.jsonl", three, replicas=2,
               load="    speedup: 1.5\n    agentic_lanes: 2\n")
    write_case(root, "snap-seed-lanes3", "three.jsonl", three, replicas=2, load=seeded_snapshot(3, 123456789, 1))
    write_case(root, "snap-seed-lanes1", "three.jsonl", three, load=seeded_snapshot(1, 0, 1))
    offset = "".join(json.dumps(shifted(t, 1234.5678 + 0.37 * k)) + "\n" for k, t in enumerate(relative_traces()))
    write_case(root, "snap-seed-offset-max", "offset.jsonl", offset, replicas=2,
               load=seeded_snapshot(2, 2**64 - 1, 2))
    beta, gamma, alpha = ("weka:e3d8d5a7ba5f60f0:play:beta", "weka:56c6fa620555e68f:play:gamma",
                          "weka:aeca4954cc94d3e7:play:alpha")  # the plays of three.jsonl
    write_case(root, "warm-seed-lanes2", "three.jsonl", three, replicas=2, load=seeded_snapshot(2, 4, 1.5, True))
    write_case(root, "warm-seed-lanes3", "three.jsonl", three, replicas=2,
               load=seeded_snapshot(3, 123456789, 1, True))
    write_case(root, "warm-no-primers", "three.jsonl", three, replicas=2,  # warm-up from the replayed roots
               load=explicit_snapshot([(beta, 0.0), (gamma, 310.0), (alpha, 2650.0)], 1, 1, True))
    write_case(root, "warm-three-primers", "three.jsonl", three,
               load=explicit_snapshot([(beta, 873.79), (gamma, 0.0)], 7, 2, True))
    write_pd_case(root, "pd-three-plays", "three.jsonl", three)
    write_pd_case(root, "pd-lanes2-poly", "three.jsonl", three, replicas=2, timing="{type: polynomial}",
                  load="    speedup: 1.5\n    agentic_lanes: 2\n")
    write_pd_case(root, "pd-warm-seed-lanes2", "three.jsonl", three, replicas=2, load=seeded_snapshot(2, 4, 1.5, True))
    write_pd_case(root, "pd-snap-poly", "three.jsonl", three, timing="{type: polynomial}",
                  load=seeded_snapshot(3, 123456789, 1))
    write_pd_case(root, "pd-profile-3s", "three.jsonl", three, replicas=2,
                  load=seeded_snapshot(2, 4, 1.5) + profile(3.0))
    write_pd_case(root, "pd-profile-poly", "three.jsonl", three, timing="{type: polynomial}",
                  load=explicit_snapshot([(beta, 873.79), (gamma, 0.0), (alpha, 400.0)], 9, 1, cursor=5)
                  + profile(5.5))
    write_pd_case(root, "pd-warm-profile", "three.jsonl", three, replicas=2,
                  load=seeded_snapshot(2, 4, 1.5, True) + profile(3.0))
    for name, caps in (("global", {"global_idle_cap_seconds": 0.05}), ("tree", {"tree_idle_cap_seconds": 0.2}),
                       ("both", {"global_idle_cap_seconds": 0.08, "tree_idle_cap_seconds": 0.15})):
        write_pd_case(root, f"pd-profile-{name}-idle", "three.jsonl", three, replicas=2,
                      load=seeded_snapshot(2, 4, 1.5) + profile(4.0 if name == "both" else 3.0, **caps))
    write_case(root, "profile-seed-lanes2", "three.jsonl", three, replicas=2,
               load=seeded_snapshot(2, 4, 1.5) + profile(3.0))
    # more lanes than plays: idle lanes, and plays replayed on several lanes (own cache scopes)
    write_pd_case(root, "pd-lanes4-idle", "three.jsonl", three, replicas=2, load="    speedup: 1.5\n    agentic_lanes: 4\n")
    write_pd_case(root, "pd-snap-lanes5", "three.jsonl", three, replicas=2, load=seeded_snapshot(5, 4, 1.5))
    write_pd_case(root, "pd-snap-dup-explicit", "three.jsonl", three,
                  load=explicit_snapshot([(beta, 873.79), (beta, 873.79), (alpha, 400.0), (alpha, 1500.0)], 3, 1))
    write_pd_case(root, "pd-warm-lanes4", "three.jsonl", three, replicas=2, load=seeded_snapshot(4, 4, 1.5, True))
    write_pd_case(root, "pd-profile-lanes4", "three.jsonl", three, replicas=2,
                  load=seeded_snapshot(4, 4, 1.5) + profile(3.0))
    # requests still running at the response-grace deadline are canceled there
    slow = "{type: fixed, prefill_ms: 10, decode_ms: 30}"
    write_pd_case(root, "pd-grace-cancel", "three.jsonl", three, replicas=2, timing=slow,
                  load=seeded_snapshot(2, 4, 1.5) + profile(1.0, response_grace_seconds=0.1, cancel_drain_seconds=0.5))
    write_pd_case(root, "pd-grace-zero", "three.jsonl", three, timing="{type: fixed, prefill_ms: 10, decode_ms: 25}",
                  load=seeded_snapshot(3, 7, 1) + profile(0.8, response_grace_seconds=0))
    write_pd_case(root, "pd-warm-grace", "three.jsonl", three, replicas=2, timing=slow,
                  load=seeded_snapshot(2, 4, 1.5, True) + profile(1.0, response_grace_seconds=0.05))
    write_pd_case(root, "pd-grace-lanes4", "three.jsonl", three, replicas=2, timing=slow,
                  load=seeded_snapshot(4, 4, 1.5) + profile(1.5, response_grace_seconds=0.02))
    # a preparation request that cannot complete aborts the warm-up (0.13 saves the report, exits 1):
    # tests/cases/weka_aborted, beside tests/cases/weka
    aborted = root.parent / "weka_aborted"
    write_pd_case(aborted, "pd-warm-rejected", "three.jsonl", three, replicas=2, context=80,
                  load=seeded_snapshot(2, 4, 1.5, True))
    write_pd_case(aborted, "pd-warm-profile-rejected", "three.jsonl", three, replicas=2, context=80,
                  load=seeded_snapshot(2, 4, 1.5, True) + profile(3.0))
    write_pd_case(aborted, "pd-warm-lanes3-rejected", "three.jsonl", three, context=60,
                  load=seeded_snapshot(3, 123456789, 1, True))
    # the live_trajectory_v1 warm-up (not built in servesim: refused; 0.13's outputs kept for it)
    live = root.parent / "weka_live"
    for name, lanes, seed, speedup in (("pd-live-lanes2", 2, 4, 1.5), ("pd-live-lanes2-1x", 2, 4, 1),
                                       ("pd-live-lanes3", 3, 7, 1), ("pd-live-lanes2-2x", 2, 9, 2)):
        write_pd_case(live, name, "three.jsonl", three, replicas=2,
                      load=seeded_snapshot(lanes, seed, speedup, True) + LIVE_POLICY + profile(3.0))
    write_pd_case(live, "pd-live-lanes4", "three.jsonl", three, replicas=2,
                  load=seeded_snapshot(4, 4, 1.5, True) + LIVE_POLICY + profile(3.0))
    write_pd_case(live, "pd-live-no-primers", "three.jsonl", three, replicas=2,
                  load=explicit_snapshot([(beta, 0.0), (gamma, 310.0), (alpha, 2650.0)], 1, 1, True) + LIVE_POLICY
                  + profile(3.0))
    write_pd_case(live, "pd-live-grace", "three.jsonl", three, replicas=2, timing=slow,
                  load=seeded_snapshot(2, 4, 1.5, True) + LIVE_POLICY + profile(1.0, response_grace_seconds=0.05))
    write_pd_case(live, "pd-live-poly", "three.jsonl", three, timing="{type: polynomial}",
                  load=explicit_snapshot([(beta, 873.79), (gamma, 0.0), (alpha, 400.0)], 9, 1, True, cursor=5)
                  + LIVE_POLICY + profile(5.5))
    write_pd_case(aborted, "pd-live-rejected", "three.jsonl", three, replicas=2, context=80,
                  load=seeded_snapshot(2, 4, 1.5, True) + LIVE_POLICY + profile(3.0))
    write_pd_case(aborted, "pd-live-trajectory-rejected", "three.jsonl", three, replicas=2, context=95,
                  load=seeded_snapshot(2, 4, 1.5, True) + LIVE_POLICY + profile(3.0))
    write_pd_case(aborted, "pd-warm-lane1-rejected", "three.jsonl", three, context=85,
                  load=explicit_snapshot([(gamma, 250.0), (beta, 1320.0)], 7, 1, True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
