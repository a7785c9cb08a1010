"""What a recommend run writes: the recommended configs, the ledger, CSV tables, stdout.

    <out>/recommendations/NNNN.yaml   each recommendation as a complete `predict` config, best first
    <out>/recommendation.json         the ledger: every candidate, its knobs, metrics, score,
                                      status and reason, plus the target, SLA and GPU budget
    <out>/recommendation.csv          the ledger as one row per candidate
    <out>/pareto.csv                  target pareto: the non-dominated set
"""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path
from typing import Any

import yaml

from servesim.outputs import OutputSet
from servesim.search.run import SearchResult
from servesim.search import score
from servesim.search.score import REPORT_KEYS

LEDGER_VERSION = 1
TABLE_ROWS = 10


LEDGER_FILES = ("recommendation.json", "recommendation.csv", "pareto.csv")
"""The files the ledger is written to (after each round, and at the end with the rest)."""


def write_recommendations(out_dir: Path, result: SearchResult, outputs: OutputSet | None = None) -> None:
    """`recommendations/NNNN.yaml` for every ranked candidate; sets each entry's config_path.

    Staged in `outputs` (committed by the caller with the rest), or written at once."""
    if outputs is None:
        out_dir.mkdir(parents=True, exist_ok=True)
        with OutputSet(out_dir, owned=(), numbered=False) as own:
            write_recommendations(out_dir, result, own)
            own.commit()
        return
    for entry in result.ranked():
        name = f"recommendations/{entry['rank']:04d}.yaml"
        # the reference's recommended configs exactly under compat: reference (the key is the run's, not the file's)
        config = {k: v for k, v in result.configs[entry["trial"]].items() if k != "compat"}
        outputs.stage(name, yaml.safe_dump(config, sort_keys=False, allow_unicode=True))
        entry["config_path"] = name


def ledger(result: SearchResult) -> dict[str, Any]:
    """The whole search as one JSON document."""
    cfg = result.config
    statuses: dict[str, int] = {}
    for entry in result.entries:
        statuses[entry["status"]] = statuses.get(entry["status"], 0) + 1
    return {
        "version": LEDGER_VERSION,
        "target": cfg.optimization.target,
        "objectives": ["throughput_per_gpu", "throughput_per_user"] if cfg.optimization.target == "pareto"
        else [cfg.optimization.target],
        "min_goodput_rps": cfg.optimization.goodput_floor,
        "strict_sla": cfg.optimization.strict_sla,
        "sla_attainment": cfg.optimization.sla_attainment,
        "gpu_hour_price": cfg.optimization.gpu_hour_price,
        "sla": (cfg.evaluation or {}).get("sla"),
        "gpu_budget": {"min": cfg.optimization.constraints.min_candidate_gpus,
                       "max": cfg.optimization.constraints.max_candidate_gpus},
        "algorithm": result.algorithm,
        "max_trials": cfg.optimizer.max_trials,
        "seed": cfg.optimizer.seed,
        "interrupted": result.interrupted,
        "wall_seconds": round(result.wall_seconds, 3),
        "screen_seconds": round(result.screen_seconds, 3),
        "statuses": dict(sorted(statuses.items())),
        "notes": result.notes,
        "coverage": result.coverage,
        "workers": result.workers,
        "closest": None if result.feasible or result.closest() is None else result.closest()["trial"],  # type: ignore[index]
        "sizing": result.sizing,
        "provenance": provenance(result),
        "candidates": result.entries,
    }


def provenance(result: SearchResult) -> dict[str, str]:
    """What the candidates' replays resolved, as flat text (as `Report.provenance`): servesim's
    version, compat, the backend versions and the fidelity modes."""
    from servesim.version import __version__
    from servesim.build.resolve import resolved_mixed_pass
    from servesim.perf.aicdata import DEFAULT_BACKEND_VERSIONS

    compat = result.config.compat
    versions, modes = set(), set()
    for config in result.configs.values():
        engine = config["engine"]
        backend = engine["backend"]
        versions.add(f"{backend} {engine.get('backend_version') or DEFAULT_BACKEND_VERSIONS.get(backend, 'current')}"
                     f" on {engine['hardware']}")
        for worker in engine.get("workers", {}).values():
            mode = (worker.get("timing") or {}).get("mixed_pass") or resolved_mixed_pass(backend, compat)
            modes.add("reference" if compat == "reference" and mode == "sum" else mode)
    return {"servesim_version": __version__, "compat": compat or "none",
            "backend_versions": ", ".join(sorted(versions)) or "none", "fidelity": ", ".join(sorted(modes)) or "none",
            "calibration": "none"}


def write_ledger(out_dir: Path, result: SearchResult, outputs: OutputSet | None = None) -> None:
    """recommendation.json and recommendation.csv (and pareto.csv for target pareto).

    Staged in `outputs` (committed by the caller with the rest), or — the ledger after a round —
    committed at once, replacing only the previous ledger files (never through a symbolic link:
    `servesim.outputs.OutputSet`)."""
    if outputs is None:
        out_dir.mkdir(parents=True, exist_ok=True)
        with OutputSet(out_dir, owned=LEDGER_FILES, numbered=False) as own:
            write_ledger(out_dir, result, own)
            own.commit()
        return
    outputs.stage("recommendation.json", json.dumps(ledger(result), indent=1, allow_nan=False, default=_finite) + "\n")
    outputs.stage("recommendation.csv", ledger_csv(result.entries))
    if result.config.optimization.target == "pareto":
        outputs.stage("pareto.csv", ledger_csv([e for e in result.entries if e["pareto"]], front=True))


def _finite(value: Any) -> Any:
    raise TypeError(f"not JSON serialisable: {value!r}")


def ledger_csv(entries: list[dict[str, Any]], front: bool = False) -> str:
    """One row per entry: trial, status, reason, rank, score, GPUs, metrics, then every knob."""
    knobs = sorted({k for e in entries for k in e["knobs"]})
    derived = ["avg_gpus", "throughput_per_gpu", "throughput_per_user", "goodput_per_gpu",
               "cost_per_million_output_tokens"]
    head = ["trial", "rank", "status", "reason", "score", "estimated_score", "used_gpus", "pareto", "config_path",
            "eval_seconds"]
    if front:
        entries = sorted(entries, key=lambda e: e["metrics"]["throughput_per_user"])
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(head + derived + list(REPORT_KEYS) + knobs)
    for e in entries:
        m = e["metrics"] or {}
        writer.writerow([e.get(k) for k in head] + [m.get(k) for k in derived] + [m.get(k) for k in REPORT_KEYS]
                        + [e["knobs"].get(k) for k in knobs])
    return buffer.getvalue()


def stdout_json(result: SearchResult, out_dir: Path | None = None) -> str:
    """The reference's JSON rows (rank, score, objectives, used_gpus, config_path as the
    reference writes it: the output directory as given joined with the file) plus metrics."""
    pareto = result.config.optimization.target == "pareto"
    rows = [{"rank": e["rank"], "score": e["score"], "objectives": e["objectives"] if pareto else None,
             "used_gpus": e["used_gpus"], "config_path": _shown_path(e, out_dir), "metrics": e["metrics"]}
            for e in result.ranked()]
    return json.dumps(rows, sort_keys=True, separators=(",", ":"))


def _shown_path(entry: dict[str, Any], out_dir: Path | None) -> str | None:
    path = entry["config_path"]
    return str(out_dir / path) if path and out_dir is not None else path


def stdout_table(result: SearchResult, out_dir: Path) -> str:
    """The ranked table printed by ``--format table``: the picks (only candidates that meet the
    target), the knobs that vary among them, the SLA percentiles, then the sizing answer."""
    cfg = result.config
    ranked = result.ranked()
    lines = [f"servesim recommendations — target {cfg.optimization.target}, algorithm {result.algorithm}"]
    lines.append(summary_line(result))
    lines += [f"note: {note}" for note in result.notes if " of " in note and "evaluated" in note]
    if not ranked:
        lines.append("No candidate meets the target" + _closest_text(result))
        lines += sizing_lines(result)
        return "\n".join(lines) + "\n"
    sla_keys = score.sla_keys((cfg.evaluation or {}).get("sla"))
    varying = varying_knobs(ranked)
    target = cfg.optimization.target
    cols = ["rank", "score" if target == "pareto" else target, "gpus", "mode", "backend", "parallelism"]
    cols += [name for name, _ in varying]
    cols += ["tok/s/gpu", "tok/s/user", "goodput tok/s", "SLA req/s", "SLA met"]
    cols += [key.replace("_ms", " ms").replace("_", " ") for key in sla_keys] or ["mean TTFT ms"]
    priced = cfg.optimization.gpu_hour_price is not None
    if priced:
        cols.append("$/M tok")
    cols.append("config")
    rows = [_row(e, out_dir, priced, varying, sla_keys or ["mean_ttft_ms"]) for e in ranked[:TABLE_ROWS]]
    widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(cols)]
    lines.append("  ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True)))
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) for r in rows]
    if len(ranked) > TABLE_ROWS:
        lines.append(f"... {len(ranked) - TABLE_ROWS} more in {out_dir / 'recommendation.csv'}")
    lines += sizing_lines(result)
    lines.append(f"Ledger of every candidate: {out_dir / 'recommendation.json'}")
    return "\n".join(lines) + "\n"


def _closest_text(result: SearchResult) -> str:
    closest = result.closest()
    if closest is None:
        return " (no candidate finished its replay)."
    return (f"; closest: trial {closest['trial']} ({describe(closest)}), missing by "
            f"{100 * closest['shortfall']:.0f} %: {'; '.join(closest['missed'])}.")


def describe(entry: dict[str, Any]) -> str:
    """``vllm, 4 GPUs, A 2x tp2``."""
    return f"{entry['knobs']['engine.backend']}, {entry['used_gpus']} GPUs, {_shapes(entry)}"


def sizing_lines(result: SearchResult) -> list[str]:
    """The sizing answer: per shape, the fewest GPUs that meet the target and the capacity curve
    (SLA-meeting request rate at the offered load, per GPU count replayed)."""
    rows = result.sizing[:TABLE_ROWS]
    if not rows:
        return []
    lines = ["Sizing — fewest GPUs that meet the target, per shape (curve: GPUs: SLA-meeting req/s, "
             "ok = meets the target):"]
    width = max(len(f"{r['mode'][:5]} {r['shape']}") for r in rows)
    for r in rows:
        fewest = f"{r['fewest_gpus']} GPUs" if r["fewest_gpus"] is not None else "none within budget"
        misses = f", {r['misses_at']} miss" if r["misses_at"] is not None else ""
        curve = "  ".join(f"{p['gpus']}: {_num(p['goodput_request_throughput_rps'])} "
                          f"{'ok' if p['meets_target'] else 'miss'}" for p in r["curve"])
        lines.append(f"  {(r['mode'][:5] + ' ' + r['shape']).ljust(width)}  {fewest}{misses}  |  {curve}")
    return lines


def varying_knobs(entries: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(column name, knob) for every knob outside backend, mode and parallelism whose value
    differs among `entries` (so rows that differ only there do not look alike)."""
    keys = sorted({k for e in entries for k in e["knobs"]})
    keys = [k for k in keys if k not in ("engine.mode", "engine.backend") and ".parallelism." not in k
            and len({json.dumps(e["knobs"].get(k)) for e in entries}) > 1]
    renamed = {"router.prefill_load_model.type": "load_model", "planner.policy": "planner"}
    short = [renamed.get(k, k.rsplit(".", 1)[1]) for k in keys]
    out = []
    for key, name in zip(keys, short, strict=True):
        if short.count(name) > 1 and key.startswith("engine.workers."):
            name = f"{key.split('.')[2][0].upper()} {name}"
        out.append((name, key))
    return out


def summary_line(result: SearchResult) -> str:
    counts: dict[str, int] = {}
    for entry in result.entries:
        counts[entry["status"]] = counts.get(entry["status"], 0) + 1
    parts = ", ".join(f"{n} {status.replace('_', ' ')}" for status, n in sorted(counts.items()))
    tail = " (interrupted)" if result.interrupted else ""
    return f"{len(result.entries)} candidates: {parts or 'none'}; wall {result.wall_seconds:,.1f} s{tail}"


def _shapes(entry: dict[str, Any]) -> str:
    return " | ".join(f"{role[0].upper()} " + _shape(entry["knobs"], role) for role in ("aggregated", "prefill", "decode")
                      if f"engine.workers.{role}.parallelism.replicas" in entry["knobs"])


def _row(entry: dict[str, Any], out_dir: Path, priced: bool, varying: list[tuple[str, str]],
         latency_keys: list[str]) -> list[str]:
    m = entry["metrics"]
    row = [str(entry["rank"]), _num(entry["score"]), str(entry["used_gpus"]), entry["mode"][:5],
           entry["knobs"]["engine.backend"], _shapes(entry)]
    row += [_value(entry["knobs"].get(key)) for _, key in varying]
    row += [_num(m["throughput_per_gpu"]), _num(m["throughput_per_user"]),
            _num(m.get("goodput_output_throughput_tok_s")), _num(m.get("goodput_request_throughput_rps")),
            "-" if m.get("sla_attainment") is None else f"{100 * m['sla_attainment']:.1f} %"]
    row += [_num(m.get(key)) for key in latency_keys]
    if priced:
        row.append(_num(m.get("cost_per_million_output_tokens")))
    row.append(str(out_dir / entry["config_path"]) if entry["config_path"] else "-")
    return row


def _value(value: Any) -> str:
    if isinstance(value, float):
        return _num(value)
    return "-" if value is None else str(value)


def _shape(knobs: dict[str, Any], role: str) -> str:
    p = {k.rsplit(".", 1)[1]: v for k, v in knobs.items() if k.startswith(f"engine.workers.{role}.parallelism.")}
    text = f"{p['replicas']}x tp{p['tensor']}"
    for key, tag in (("pipeline", "pp"), ("attention_data", "dp"), ("moe_tensor", "mtp"), ("moe_expert", "ep")):
        if p[key] > 1:
            text += f" {tag}{p[key]}"
    return text


def _num(value: Any) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return f"{value:,.4g}" if abs(value) < 1e5 else f"{value:,.0f}"
