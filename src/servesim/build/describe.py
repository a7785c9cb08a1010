"""What a run simulates, in words: the deployment and the offered load (the report's headline)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from servesim.config.schema import SimConfig

if TYPE_CHECKING:
    from servesim.config.schema import WorkerConfig


def describe(config: SimConfig) -> dict[str, str]:
    """{item: text} in headline order: model, gpu, backend, deployment, gpus, load, source and,
    when set, the time cap."""
    engine = config.engine
    backend = engine.backend + (f" {engine.backend_version}" if engine.backend_version else "")
    roles = engine.roles
    shapes = [_shape(worker) for worker in roles.values()]
    gpus = sum(worker.parallelism.replicas * worker.parallelism.gpus_per_worker for worker in roles.values())
    if engine.mode == "aggregated":
        deployment = f"aggregated, {shapes[0]}"
    else:
        deployment = "disaggregated, " + " + ".join(f"{role} {shape}" for role, shape in zip(roles, shapes, strict=True))
    items = {"model": engine.model, "gpu": engine.hardware, "backend": backend, "deployment": deployment,
             "gpus": str(gpus), "load": _load(config), "source": _source(config)}
    stop = config.traffic.stop
    if stop is not None and stop.max_virtual_time_seconds is not None:
        items["time cap"] = f"{stop.max_virtual_time_seconds:g} s simulated"
    return items


def _shape(worker: WorkerConfig) -> str:
    """'2 × (tp 2, pp 1, dp 1)': replicas of one worker's GPU split."""
    par = worker.parallelism
    return f"{par.replicas} × (tp {par.tensor}, pp {par.pipeline}, dp {par.attention_data})"


def _load(config: SimConfig) -> str:
    """The offered load: concurrency, a rate, or the trace's own timestamps."""
    load = config.traffic.load
    if load.type == "concurrency":
        return f"concurrency {load.concurrency}"
    if load.type == "trace_timestamps":
        return "trace timestamps" + (f" × {load.speedup:g} speed-up" if load.speedup != 1 else "")
    unit = "sessions/s" if load.sessions_per_second is not None else "req/s"
    kind = "Poisson" if load.type == "poisson" else "constant rate"
    return f"{kind} {load.rate:g} {unit}"


def _source(config: SimConfig) -> str:
    """What arrives: synthetic token counts, or a trace's format and file."""
    source = config.traffic.source
    if source.type == "trace":
        names = ", ".join(path.replace("\\", "/").rsplit("/", 1)[-1] for path in source.paths)
        return f"{source.format} trace {names}"
    if source.type == "synthetic":
        return f"synthetic {source.input_tokens} → {source.output_tokens} tokens"
    return (f"synthetic sessions of {source.session.turns} turns, +{source.new_input_tokens_per_turn} → "
            f"{source.output_tokens_per_turn} tokens each")
