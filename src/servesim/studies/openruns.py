"""The four open real runs of LLMServingSim's vLLM bench and the servesim configs that replay them.

Each run (``<data>/examples/<hw>/<model>/``) is a real vLLM 0.19.0 serving run of a 300-request
ShareGPT trace (~10 req/s) with its engine settings (``vllm/meta.json``) and measured
per-request timestamps (``vllm/requests.jsonl``); ``<data>/traces`` holds the same requests as
Mooncake traces. By default the data is the open pack shipped with servesim
(``servesim/data/llmservingsim-vllm-validation``: those files, MIT, without the workloads'
token ids; its SOURCE.md says what was kept); a full copy of the data set can be given instead.

Two anchors for the measured latencies:

* **engine** — from ``queued_ts``, when the engine core queued the request (the data set's own
  convention, LLMServingSim's numbers);
* **client** — from ``arrival_time``, when the API server received it, moved onto the engine
  clock by the smallest ``queued_ts − arrival_time`` of the run (the request that met an idle
  engine). This is what servesim's arrival means (the send time), so the tables use it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from servesim import safejson
from servesim.errors import TraceError
from servesim.limits import MAX_TOKENS
from servesim.measured import Measured, load_measured

PACK = Path(__file__).resolve().parents[1] / "data" / "llmservingsim-vllm-validation"
"""The open measurement pack shipped as package data."""
DEFAULT_DATA = PACK


@dataclass(frozen=True)
class OpenRun:
    """One real run and how servesim names its deployment."""

    name: str
    folder: str
    """``examples/<hw>/<model>`` below the data folder."""
    trace: str
    model: str
    """The model id servesim (and AIConfigurator) knows it by."""
    hardware: str
    parallelism: dict[str, int]

    def files(self, data: Path) -> tuple[Path, Path, Path]:
        """(meta.json, requests.jsonl, Mooncake trace) of the run."""
        base = data / "examples" / self.folder / "vllm"
        return base / "meta.json", base / "requests.jsonl", data / "traces" / f"{self.trace}.mooncake.jsonl"


RUNS = (
    OpenRun("RTX 4090 · Llama-3.1-8B · TP1", "RTX4090/Llama-3.1-8B", "sharegpt-llama-3.1-8b-300-sps10",
            "meta-llama/Meta-Llama-3.1-8B", "rtx_4090", {"tensor": 1}),
    OpenRun("RTX PRO 6000 · Llama-3.1-8B · TP1", "RTXPRO6000/Llama-3.1-8B", "sharegpt-llama-3.1-8b-300-sps10",
            "meta-llama/Meta-Llama-3.1-8B", "rtx_pro_6000_server", {"tensor": 1}),
    OpenRun("RTX PRO 6000 · Qwen3-32B · TP2", "RTXPRO6000/Qwen3-32B", "sharegpt-qwen3-32b-300-sps10",
            "Qwen/Qwen3-32B", "rtx_pro_6000_server", {"tensor": 2}),
    OpenRun("RTX PRO 6000 · Qwen3-30B-A3B · DP2 + EP2", "RTXPRO6000/Qwen3-30B-A3B-Instruct-2507",
            "sharegpt-qwen3-30b-a3b-300-sps10", "Qwen/Qwen3-30B-A3B",
            "rtx_pro_6000_server", {"tensor": 1, "attention_data": 2, "moe_expert": 2}),
)


def has_aic_data(run: OpenRun, systems: str | None = None) -> bool:
    """Whether the AIConfigurator database can time the run's GPU (else servesim uses the roofline)."""
    from servesim.perf.hardware import aic_system, ready_systems_dir, systems_dir

    path, how = systems_dir(systems)
    ready_systems_dir(path, how, run.hardware)
    gpu = aic_system(run.hardware, path)
    return gpu is not None and gpu.has_aic_data


def data_folder(explicit: str | Path | None = None) -> Path:
    """The data folder: `explicit`, else the shipped pack (`PACK`)."""
    return Path(explicit) if explicit is not None else DEFAULT_DATA


def meta(run: OpenRun, data: Path) -> dict[str, Any]:
    """The run's ``meta.json``, checked for what a replay reads of it (`TraceError` naming the
    file, and the line where known, and the rule)."""
    path = run.files(data)[0]
    try:
        info = safejson.read_json(path, max_bytes=16 << 20)
    except OSError as exc:
        raise TraceError(str(path), None, f"cannot read: {exc.strerror or exc}") from None
    except safejson.JsonRefused as exc:
        raise TraceError(str(path), exc.line, exc.message) from None
    if not isinstance(info, dict) or not isinstance(info.get("engine_kwargs"), dict):
        raise TraceError(str(path), None, "engine_kwargs: must be an object (not a vLLM bench meta.json?)")
    kwargs = info["engine_kwargs"]
    for key, optional in (("max_num_batched_tokens", False), ("max_num_seqs", False), ("max_model_len", True)):
        value = kwargs.get(key)
        if (value is not None or not optional) and not _count(value):
            raise TraceError(str(path), None, f"engine_kwargs.{key}: must be an integer in [1, {MAX_TOKENS}] "
                                              f"(got {value!r:.60})")
    if not isinstance(info.get("vllm_version"), str) or len(info["vllm_version"]) > 100:
        raise TraceError(str(path), None, f"vllm_version: must be a string (got {info.get('vllm_version')!r:.60})")
    cache = info.get("kv_cache")
    if cache is not None and not isinstance(cache, dict):
        raise TraceError(str(path), None, "kv_cache: must be an object")
    blocks = (cache or {}).get("num_gpu_blocks")
    if blocks is not None and not _count(blocks):
        raise TraceError(str(path), None, f"kv_cache.num_gpu_blocks: must be an integer in [1, {MAX_TOKENS}] "
                                          f"(got {blocks!r:.60})")
    return info


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_TOKENS


def config(run: OpenRun, data: Path, timing: dict[str, Any] | None = None,
           aic_systems_path: str | None = None) -> dict[str, Any]:
    """The servesim config replaying `run`: its engine settings, its trace at its timestamps.

    The KV capacity is the block count vLLM resolved when meta.json records it, else servesim's
    default capacity.
    """
    info = meta(run, data)
    kwargs = info["engine_kwargs"]
    worker: dict[str, Any] = {
        "parallelism": dict(run.parallelism),
        "scheduler": {"max_batched_tokens": kwargs["max_num_batched_tokens"],
                      "max_sequences": kwargs["max_num_seqs"]},
        "kv_cache": {"block_size": 16},
    }
    blocks = (info.get("kv_cache") or {}).get("num_gpu_blocks")
    if blocks:
        worker["kv_cache"]["capacity"] = {"type": "fixed", "blocks": int(blocks)}
    if timing:
        worker["timing"] = dict(timing)
    engine: dict[str, Any] = {"model": run.model, "hardware": run.hardware, "backend": "vllm",
                              "backend_version": info["vllm_version"], "workers": {"aggregated": worker}}
    if kwargs.get("max_model_len"):
        engine["context_length"] = int(kwargs["max_model_len"])
    if aic_systems_path:
        engine["aic_systems_path"] = aic_systems_path
    trace = run.files(data)[2]
    return {"engine": engine,
            "traffic": {"source": {"type": "trace", "format": "mooncake", "paths": [str(trace.resolve())]},
                        "load": {"type": "trace_timestamps"}}}


def measured(run: OpenRun, data: Path, anchor: str = "client") -> Measured:
    """The run's measured requests; `anchor` "engine" (queued_ts) or "client" (arrival_time)."""
    engine_view = load_measured(run.files(data)[1], "llmservingsim")
    if anchor == "engine":
        return engine_view
    rows = _client_rows(run.files(data)[1])
    rows.sort(key=lambda r: r["queued_ts"])
    arrival = np.array([r["arrival_time"] for r in rows])
    queued = np.array([r["queued_ts"] for r in rows])
    send = arrival + float(np.min(queued - arrival))
    order = np.argsort(send, kind="stable")
    return Measured(engine_view.path, "llmservingsim (client anchor)", send[order],
                    np.array([r["first_token_ts"] for r in rows])[order],
                    np.array([r["last_token_ts"] for r in rows])[order],
                    np.array([r["input_toks"] for r in rows], dtype=np.int64)[order],
                    np.array([r["output_toks"] for r in rows], dtype=np.int64)[order])


_CLIENT_FIELDS = ("arrival_time", "queued_ts", "first_token_ts", "last_token_ts")


def _client_rows(path: Path) -> list[dict[str, Any]]:
    """The run's request lines with the fields the client anchor reads, each checked."""
    from servesim.measured.readers import json_lines

    try:
        text = safejson.decode(path.read_bytes())
    except OSError as exc:
        raise TraceError(str(path), None, f"cannot read: {exc.strerror or exc}") from None
    except safejson.JsonRefused as exc:
        raise TraceError(str(path), exc.line, exc.message) from None
    rows = []
    for number, row in json_lines(str(path), text):
        for key in _CLIENT_FIELDS:
            if safejson.finite_number(row.get(key)) is None:
                raise TraceError(str(path), number, f"{key}: must be a finite number (got {row.get(key)!r:.60})")
        for key in ("input_toks", "output_toks"):
            if not isinstance(row.get(key), int) or isinstance(row.get(key), bool) or not 0 <= row[key] <= MAX_TOKENS:
                raise TraceError(str(path), number, f"{key}: must be an integer in [0, {MAX_TOKENS}] "
                                                    f"(got {row.get(key)!r:.60})")
        rows.append(row)
    if not rows:
        raise TraceError(str(path), None, "no requests")
    return rows
