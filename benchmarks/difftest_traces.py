#!/usr/bin/env python3
"""Differential test of the agentic and Dynamo trace formats: random traces run by both tools.

    python3 benchmarks/difftest_traces.py --count 300 [--seed 0] [--format dynamo] [--out DIR]
    python3 benchmarks/difftest_traces.py --make-case tests/cases/traffic/NAME --seed 7 --format agentic_mooncake

Each case is a random aggregated deployment (vLLM or SGLang, replicas, fixed or polynomial
timing, small KV pools for pressure, token budgets, context limits that reject requests) with a
random trace in one of the formats:

* `agentic_mooncake`, legacy rows: random DAGs with fan-out and joins (`wait_for`), random
  `delay` / `tool_wait_ms`, roots at random timestamps, shared hash-id prefixes;
* `agentic_mooncake`, v2 header: plays with `dispatch` and `completion` edges, not-before times;
* `applied_compute_agentic`: conversations of 0-3 tool turns under a concurrency load;
* `dynamo`: `request_end` records over 1-3 shards (some gzip, some wrapped in `{"event"}`,
  `request_payload` lines between), or agent-aware sessions with child sessions and tool events.

Every summary field (the trajectory fields and `agentic_graph` included) and every per-request
record are compared; a case matches when both tools agree or both fail (servesim runs with
`--unservable fail`, the reference's behaviour for requests that can never fit). `--make-case` writes
one case (config, trace files, the reference's report.json and requests.jsonl) for the parity
tests. Needs the reference (../shared/reference).
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import shutil
import sys
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from difftest_disagg import HOST, OWN_FIELDS, OWN_RECORD_FIELDS, REFERENCE, run, run_servesim, same  # noqa: E402

FORMATS = ("agentic_mooncake", "agentic_v2", "applied_compute_agentic", "dynamo", "dynamo_agentic")


# -- engines --------------------------------------------------------------------------------------

def random_engine(rng: random.Random) -> dict:
    backend = rng.choice(["vllm", "vllm", "sglang"])
    page = rng.choice([1, 4, 16]) if backend == "sglang" else rng.choice([16, 32, 64])
    tokens = rng.choice([400, 1000, 3000, 64000])
    worker = {
        "parallelism": {"replicas": rng.choice([1, 1, 2, 3]), "tensor": rng.choice([1, 2])},
        "scheduler": {"max_batched_tokens": rng.choice([64, 256, 8192]),
                      "max_sequences": rng.choice([2, 4, 256])},
        "kv_cache": {"block_size": page, "prefix_caching": rng.random() < 0.85,
                     "capacity": {"type": "fixed", "blocks": max(4, tokens // page)}},
        "timing": ({"type": "fixed", "prefill_ms": rng.choice([10, 3.3]), "decode_ms": rng.choice([2, 0.7])}
                   if rng.random() < 0.6 else {"type": "polynomial"}),
    }
    return {"mode": "aggregated", "model": "Qwen/Qwen3-8B", "hardware": "h200_sxm", "backend": backend,
            "context_length": rng.choice([32768, 32768, 32768, 400]), "workers": {"aggregated": worker}}


# -- traces ---------------------------------------------------------------------------------------

def _prompt(rng: random.Random, pool: list[list[int]], block: int, fresh: list[int]) -> tuple[list[int], int]:
    """Hash ids sharing a random prefix with an earlier prompt, and an input length that fits."""
    base = rng.choice(pool) if pool and rng.random() < 0.7 else []
    keep = base[: rng.randint(0, len(base))]
    ids = keep + [fresh.pop() for _ in range(rng.randint(0 if keep else 1, 3))]
    pool.append(ids)
    return ids, rng.randint((len(ids) - 1) * block + 1, len(ids) * block)


def _dag(rng: random.Random, n: int) -> list[list[int]]:
    """Parents of each node: random earlier nodes (fan-out and joins), node 0 a root."""
    return [[] if i == 0 or rng.random() < 0.3 else sorted(rng.sample(range(i), rng.randint(1, min(3, i))))
            for i in range(n)]


def legacy_agentic(rng: random.Random, block: int) -> list[dict]:
    n = rng.randint(2, 12)
    ids = [f"r{rng.randint(0, 999):03d}-{i}" for i in range(n)]
    fresh, pool, rows = list(range(10_000, 0, -1)), [], []
    origin = rng.choice([0, 0, 1000])
    for i, parents in enumerate(_dag(rng, n)):
        hashes, length = _prompt(rng, pool, block, fresh)
        row = {"request_id": ids[i], "input_length": length, "output_length": rng.randint(0 if i else 1, 12),
               "hash_ids": hashes}
        if rng.random() < 0.8:
            row["session_id"] = f"s{rng.randint(0, 2)}"
        if parents:
            row["wait_for"] = [ids[p] for p in parents]
            if rng.random() < 0.6:
                row[rng.choice(["delay", "delay_ms"])] = rng.choice([0, 1.5, 7, 30])
            if rng.random() < 0.6:
                row["tool_wait_ms"] = rng.choice([0, 2.5, 20, 55])
        elif rng.random() < 0.9:
            row["timestamp"] = origin + rng.choice([0, 0, 3, 25.5, 80, 200])
        rows.append(row)
    rng.shuffle(rows)
    return rows


def v2_agentic(rng: random.Random, block: int) -> list[dict]:
    header = {"schema": "dynamo.agentic_mooncake", "version": 2, "block_size": block, "hash_id_scope": "local",
              "source": {"format": "difftest", "digest": f"case-{rng.randint(0, 99)}"}}
    fresh, pool, rows = list(range(10_000, 0, -1)), [], []
    for play in range(rng.randint(1, 3)):
        n = rng.randint(1, 6)
        ids = [f"p{play}-n{i}" for i in range(n)]
        for i, parents in enumerate(_dag(rng, n)):
            hashes, length = _prompt(rng, pool, block, fresh)
            deps = [_v2_dependency(rng, ids[p]) for p in parents]
            rows.append({"request_id": ids[i], "play_id": f"play-{play}", "session_id": f"s{play}-{i % 2}",
                         "model": "m", "input_length": length, "output_length": rng.randint(1, 10),
                         "hash_ids": hashes, "dependencies": deps,
                         "not_before_ms": rng.choice([0, 0, 5, 40, 120]) + (500 if not parents else 0)})
    rng.shuffle(rows)
    return [header, *rows]


def _v2_dependency(rng: random.Random, parent: str) -> dict:
    """A completion edge of any relation, or a dispatch-triggered spawn (the only dispatch edge)."""
    dispatch = rng.random() < 0.3
    relation = "spawn" if dispatch else rng.choice(["sequence", "spawn", "join", "replay_barrier"])
    return {"request_id": parent, "trigger": "dispatch" if dispatch else "completion",
            "delay_ms": rng.choice([0, 1, 4.5, 30]), "relation": relation}


def applied_compute(rng: random.Random) -> list[dict]:
    rows = []
    for _ in range(rng.randint(1, 4)):
        n = rng.randint(0, 3)
        rows.append({"num_turns": n, "input_prompt_length": rng.randint(1, 300),
                     "assistant_response_length": [rng.randint(0, 20) for _ in range(n)],
                     "tool_call_output_length": [rng.randint(0, 120) for _ in range(n)],
                     "tool_call_latency": [rng.choice([0, 0.002, 0.01, 0.05]) for _ in range(n)],
                     "final_assistant_response_length": rng.randint(1, 12)})
    return rows


def _request_end(rng: random.Random, rid: str, start: float, total: float, hashes: list[int], length: int,
                 block: int, context: dict | None = None) -> dict:
    request = {"request_id": rid, "output_tokens": rng.randint(1, 10), "total_time_ms": total,
               "replay": {"trace_block_size": block, "input_length": length, "input_sequence_hashes": hashes}}
    if rng.random() < 0.8:
        request["request_received_ms"] = start
    event = {"schema": "dynamo.request.trace.v1", "event_type": "request_end",
             "event_time_unix_ms": start + round(total), "request": request}
    if context is not None:
        event["agent_context"] = context
    return event


def dynamo_standard(rng: random.Random, block: int) -> list[dict]:
    fresh, pool, rows = list(range(10_000, 0, -1)), [], []
    for i in range(rng.randint(1, 12)):
        hashes, length = _prompt(rng, pool, block, fresh)
        start = 1_700_000_000_000 + rng.choice([0, 0, 5, 17, 60, 300])
        rows.append(_request_end(rng, f"req-{rng.randint(0, 99)}-{i}", start, rng.choice([1, 12.5, 40]),
                                 hashes, length, block))
    return rows


def dynamo_agentic(rng: random.Random, block: int) -> list[dict]:
    fresh, pool, rows = list(range(10_000, 0, -1)), [], []
    sessions: list[tuple[str, list[tuple[str, float, float]]]] = []
    t0 = 1_700_000_000_000

    def session(name: str, start: float, parent: str | None) -> None:
        requests, t = [], start
        for k in range(rng.randint(1, 3)):
            hashes, length = _prompt(rng, pool, block, fresh)
            total = rng.choice([2, 7.5, 30])
            context = {"session_id": name, **({"parent_session_id": parent} if parent else {})}
            rows.append(_request_end(rng, f"{name}-{k}", t, total, hashes, length, block, context))
            requests.append((f"{name}-{k}", t, t + total))
            t += round(total) + rng.choice([0, 3, 20, 80])
        sessions.append((name, requests))

    for root in range(rng.randint(1, 2)):
        session(f"root{root}", t0 + rng.choice([0, 10, 50]), None)
    for child in range(rng.randint(0, 3)):
        parent, requests = rng.choice(sessions)
        source = rng.choice(requests)
        name = f"child{child}"
        session(name, round(source[1]) + rng.choice([1, 5, 12]), parent)
        if rng.random() < 0.5:
            later = [r for r in requests if r[1] > source[1]]
            claude = {"source_request_id": source[0], "child_session_id": name, "execution_mode": "blocking"}
            if later:
                claude["consumer_request_id"] = later[0][0]
            rows.append({"schema": "dynamo.request.trace.v1", "event_type": rng.choice(["tool_end", "tool_error"]),
                         "event_time_unix_ms": round(source[2]) + 1, "agent_context": {"session_id": parent},
                         "tool": {"tool_call_id": f"t{child}", "tool_class": "agent",
                                  "started_at_unix_ms": round(source[2]), "ended_at_unix_ms": round(source[2]) + 1,
                                  "claude": claude}})
    return rows


def _write_shards(rng: random.Random, folder: Path, rows: list[dict]) -> list[str]:
    """Split Dynamo rows over 1-3 shards, some gzip, some rows wrapped, payload lines between."""
    rng.shuffle(rows)
    count = rng.randint(1, min(3, len(rows)))
    names = []
    for k in range(count):
        lines = []
        for row in rows[k::count]:
            if rng.random() < 0.2:
                lines.append(json.dumps({"event_type": "request_payload", "request_id": "x"}))
            lines.append(json.dumps({"event": row} if rng.random() < 0.3 else row))
        text = "".join(line + "\n" for line in lines).encode()
        name = f"trace-{k}.jsonl" + (".gz" if rng.random() < 0.4 else "")
        (folder / name).write_bytes(gzip.compress(text, mtime=0) if name.endswith(".gz") else text)
        names.append(name)
    return names


def lengthen(rows: list[dict], block: int, share: float, rng: random.Random) -> None:
    """Give about `share` of the prompts of an agentic or Dynamo trace 401-520 tokens (fresh hash
    ids), beyond the 400-token context some engines have: rejected requests, aborted plays."""
    for row in rows:
        prompt = row if "input_length" in row else row.get("request", {}).get("replay")
        if prompt is None or rng.random() >= share:
            continue
        length = rng.randint(401, 520)
        key = "hash_ids" if "hash_ids" in prompt else "input_sequence_hashes"
        prompt[key] = prompt[key] + [rng.randint(90_000, 10**9) for _ in range(-(-length // block) - len(prompt[key]))]
        prompt["input_length"] = length


def make_case(rng: random.Random, folder: Path, fmt: str, long_prompts: float = 0.0,
              long_rng: random.Random | None = None) -> None:
    """Write config.yaml and the trace files of one random case (`long_prompts`: the share of
    over-long prompts, drawn from `long_rng` so the rest of the case does not depend on it)."""
    folder.mkdir(parents=True, exist_ok=True)
    engine = random_engine(rng)
    block = rng.choice([16, 64])
    source: dict = {"type": "trace", "format": fmt}
    load: dict = {"type": "trace_timestamps", "speedup": rng.choice([1, 1, 2, 0.5])}
    if fmt in ("dynamo", "dynamo_agentic"):
        rows = dynamo_standard(rng, block) if fmt == "dynamo" else dynamo_agentic(rng, block)
        lengthen(rows, block, long_prompts, long_rng or random.Random(0))
        source.update(format="dynamo", paths=_write_shards(rng, folder, rows))
        if rng.random() < 0.3:
            source["block_size"] = block
        if fmt == "dynamo" and rng.random() < 0.3:
            load = {"type": "concurrency", "concurrency": rng.randint(1, 4)}
    else:
        if fmt == "applied_compute_agentic":
            rows = applied_compute(rng)
            load = {"type": "concurrency", "concurrency": rng.randint(1, 3)}
        else:
            rows = legacy_agentic(rng, block) if fmt == "agentic_mooncake" else v2_agentic(rng, block)
            lengthen(rows, block, long_prompts, long_rng or random.Random(0))
            source["format"] = "agentic_mooncake"
        (folder / "trace.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        source.update(paths=["trace.jsonl"], block_size=block)
    config = {"engine": engine, "traffic": {"source": source, "load": load}}
    (folder / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))


# -- comparing ------------------------------------------------------------------------------------

def record_key(record: dict) -> tuple:
    return record.get("request_id"), record["session_id"], record["turn_index"]


def compare(ref: dict, ours: dict) -> list[str]:
    """Every summary field and every per-request field except uuids of non-agentic requests."""
    diffs = [f"{k}: reference {ref[k]!r}, servesim {ours.get(k)!r}" for k in sorted(ref)
             if k not in HOST and not same(ref[k], ours.get(k))]
    diffs += [f"{k}: only in servesim" for k in sorted(set(ours) - set(ref) - HOST - OWN_FIELDS)]
    mine = {record_key(r): r for r in ours.get("per_request", [])}
    if len(mine) != len(ref.get("per_request", [])):
        diffs.append(f"{len(ref.get('per_request', []))} reference records, {len(mine)} servesim records")
    for r in ref.get("per_request", []):
        o = mine.get(record_key(r))
        if o is None:
            diffs.append(f"request {record_key(r)} missing")
            continue
        diffs += [f"request {record_key(r)}.{f}: reference {r.get(f)!r}, servesim {o.get(f)!r}"
                  for f in sorted(set(r) | set(o) - OWN_RECORD_FIELDS)
                  if (f != "uuid" or "request_id" in r) and not same(r.get(f), o.get(f))]
    return diffs


def store_case(folder: Path, report: dict) -> None:
    """Keep the reference's outputs next to the config, as the parity tests read them."""
    records = report.pop("per_request")
    (folder / "report.json").write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
    (folder / "requests.jsonl").write_text("".join(json.dumps(r, sort_keys=True, separators=(",", ":")) + "\n"
                                                   for r in records))
    shutil.rmtree(folder / "reference", ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--count", type=int, default=100)
    parser.add_argument("--format", choices=FORMATS, action="append", help="default: all, in turn")
    parser.add_argument("--out", default="difftest-traces")
    parser.add_argument("--servesim", default=f"{sys.executable} -m servesim --compat reference")
    parser.add_argument("--reference", default=str(REFERENCE))
    parser.add_argument("--keep-all", action="store_true")
    parser.add_argument("--make-case", help="write one case (seed, first format) to this folder and stop")
    parser.add_argument("--timeout", type=float, default=60.0)
    parser.add_argument("--long-prompts", type=float, default=0.1,
                        help="share of prompts made longer than a 400-token context (0: the cases of "
                             "tests/cases/traffic were made without)")
    args = parser.parse_args()
    formats = args.format or list(FORMATS)
    if args.make_case:
        folder = Path(args.make_case).resolve()
        make_case(random.Random(args.seed), folder, formats[0], args.long_prompts, random.Random(~args.seed))
        ref, err = run(args.reference.split(), folder, "reference", args.timeout)
        if ref is None:
            print(f"the reference failed: {err}")
            return 1
        store_case(folder, ref)
        return 0
    ours_cmd = args.servesim.split()
    matched, failed, both_failed, per_format = 0, [], 0, {f: [0, 0] for f in formats}
    for seed in range(args.seed, args.seed + args.count):
        fmt = formats[seed % len(formats)]
        folder = Path(args.out).resolve() / f"{fmt}-{seed}"
        make_case(random.Random(seed), folder, fmt, args.long_prompts, random.Random(~seed))
        ref, ref_err = run(args.reference.split(), folder, "reference", args.timeout)
        ours, our_err = run_servesim(ours_cmd, folder, args.timeout)
        if ref is None or ours is None:
            diffs = [] if (ref is None and ours is None) else [f"reference: {ref_err or 'ok'} | servesim: {our_err or 'ok'}"]
            both_failed += not diffs
        else:
            diffs = compare(ref, ours)
        per_format[fmt][1] += 1
        if diffs:
            failed.append(seed)
            print(f"[{fmt}-{seed}] {len(diffs)} differences, e.g.", *("    " + d for d in diffs[:5]), sep="\n",
                  flush=True)
        else:
            matched += 1
            per_format[fmt][0] += 1
            if not args.keep_all:
                shutil.rmtree(folder, ignore_errors=True)
    counts = ", ".join(f"{f} {m}/{n}" for f, (m, n) in per_format.items())
    print(f"{matched}/{args.count} cases match ({counts}; {both_failed} fail in both tools)"
          + (f"; failing seeds kept in {args.out}: {failed}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
