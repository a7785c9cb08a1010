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

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

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
    return json.loads(run.files(data)[0].read_text())


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
    rows = [json.loads(line) for line in run.files(data)[1].read_text().splitlines() if line.strip()]
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
