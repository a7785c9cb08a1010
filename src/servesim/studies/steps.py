"""Decode step times of the open real runs against the timing model.

Each run's ``vllm/timeseries.csv`` logs, once a second, the tokens generated and prompted in
that second and the requests running and waiting (summed over DP engines). In the seconds with
no prompt token and nobody waiting — the run's drain, when every pass is a pure decode step —
the step time is measurable: the requests running during the second (sampled 21 times from
the per-request timestamps) × 1000 / the tokens generated in it, in ms. The log's clock is put
on the engine's by the offset (10 ms steps within ±3 s) that best matches its ``running``
column with the requests between ``scheduled_ts`` and ``last_token_ts``.

The model's step for the same state is the role's ``decode`` with ⌈running / DP⌉ sequences per
rank at the running requests' mean context (prompt + tokens produced so far, linear between the
first and the last token) — what a balanced DP worker's pass costs in the simulation — in `sum`
mode and in `fused` mode (which adds the DP step synchronisation, and on a roofline GPU vLLM's
measured decode attention).
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from servesim.studies import openruns

BANDS = ((1, 5), (5, 15), (15, 40), (40, 90), (90, 150), (150, 200), (200, 257))
"""Bands of running requests (all DP ranks) the seconds are grouped by."""


@dataclass(frozen=True)
class StepBand:
    """The pure-decode seconds of one run (its drain, or with requests waiting) with a running
    count in [lo, hi)."""

    run: str
    waiting: bool
    """Seconds in which requests waited (else the drain)."""
    lo: int
    hi: int
    seconds: int
    measured_ms: float
    model_ms: float
    """`sum` mode's step."""
    fused_ms: float
    """`fused` mode's step."""


def drain_seconds(folder: Path, waiting: bool = False) -> list[tuple[float, float, float]]:
    """(mean running, step ms, mean context) of every pure-decode second of a run's log: in its
    drain (nobody waiting), or with `waiting` the seconds in which requests waited (for KV); then
    the running count is the log's, averaged over the second's two ends, since a preempted
    request is between its scheduling and its last token without running."""
    rows = [json.loads(line) for line in (folder / "requests.jsonl").read_text().splitlines() if line.strip()]
    with (folder / "timeseries.csv").open() as f:
        log = list(csv.DictReader(f))
    col = {k: np.array([r[k] for r in rows], dtype=float) for k in
           ("queued_ts", "scheduled_ts", "first_token_ts", "last_token_ts", "input_toks", "output_toks")}
    start, end = col["scheduled_ts"], col["last_token_ts"]

    def running(t: np.ndarray) -> np.ndarray:
        return ((start[None, :] <= t[:, None]) & (end[None, :] > t[:, None])).sum(axis=1)

    ticks = np.array([float(r["t"]) for r in log])
    logged = np.array([float(r["running"]) for r in log])
    origin = float(col["queued_ts"].min())
    offsets = np.arange(-300, 301) / 100
    errors = [float(np.sum((running(origin + o + ticks) - logged) ** 2)) for o in offsets]
    clock = origin + float(offsets[int(np.argmin(errors))])
    tpot = (end - col["first_token_ts"]) / np.maximum(col["output_toks"] - 1, 1)
    out = []
    for i, (tick, r) in enumerate(zip(ticks, log, strict=True)):
        generated = float(r["gen_throughput"])
        if float(r["prompt_throughput"]) or bool(float(r["waiting"])) != waiting or not generated or not i:
            continue
        t = clock + tick
        if waiting:  # preempted requests are in flight but not running: the log's count, both ends
            mean_running = (logged[i - 1] + logged[i]) / 2
        else:
            mean_running = float(np.mean(running(np.linspace(t - 1, t, 21))))
        active = (start <= t) & (end > t)
        if not active.any():
            continue
        produced = np.clip((t - col["first_token_ts"][active]) / tpot[active], 0, col["output_toks"][active])
        out.append((mean_running, 1000 * mean_running / generated,
                    float(np.mean(col["input_toks"][active] + produced))))
    return out


def compare(run: openruns.OpenRun, data: Path, systems: str | None = None, waiting: bool = False) -> list[StepBand]:
    """The run's drain seconds (with `waiting`: its seconds with requests waiting) by band,
    measured and modelled (`timing: default`, sum and fused mode)."""
    from servesim.build import lower
    from servesim.config import parse_config

    pools = [lower(parse_config(openruns.config(run, data, {"type": "default", "mixed_pass": mode}, systems))).pools[0]
             for mode in ("sum", "fused")]
    pool = pools[0]
    total_kv = pool.rank_config.num_blocks * pool.rank_config.block_size
    seconds = drain_seconds(run.files(data)[1].parent, waiting)
    bands = []
    for lo, hi in BANDS:
        picked = [s for s in seconds if lo <= s[0] < hi]
        if not picked:
            continue
        model: list[list[float]] = [[], []]
        for running, _, ctx in picked:
            batch = math.ceil(running / pool.dp_size)
            context = round(ctx)
            for times, mode_pool in zip(model, pools, strict=True):
                times.append(mode_pool.timing.decode(batch, batch * context, context, total_kv))
        bands.append(StepBand(run.name, waiting, lo, hi, len(picked), float(np.mean([s[1] for s in picked])),
                              float(np.mean(model[0])), float(np.mean(model[1]))))
    return bands


def render(bands: list[StepBand]) -> str:
    """A Markdown table of the bands."""
    lines = ["Pure-decode step time in the runs' drain, and in the seconds in which requests waited "
             "(running = requests over all DP ranks):", "",
             "| run | requests waiting | running | seconds | measured (ms) | model, sum (ms) | measured − sum (ms) "
             "| model, fused (ms) | measured − fused (ms) |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|"]
    lines += [f"| {b.run} | {'yes' if b.waiting else 'no (drain)'} | {b.lo}–{b.hi - 1} | {b.seconds} | "
              f"{b.measured_ms:.1f} | {b.model_ms:.1f} | {b.measured_ms - b.model_ms:+.1f} | "
              f"{b.fused_ms:.1f} | {b.measured_ms - b.fused_ms:+.1f} |" for b in bands]
    return "\n".join(lines) + "\n"
