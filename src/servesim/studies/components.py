"""What the open step and operator measurements say about the timing model's pieces.

* **Splitwise** (``splitwise-perf-model/perf_model.csv``): measured static-batch prefill times
  (``prompt_time``: `batch` prompts of `prompt_size` tokens) and decode-iteration times
  (``token_time``, averaged over the generation) of Llama-2-70B on DGX-H100, TP 2/4/8. Compared
  with servesim's prefill(batch, prompt, 0) and decode(batch, prompt + tokens / 2) from
  AIConfigurator (h100_sxm, vLLM data) and from the roofline.
* **Vidur** (``vidur-profiling-sample/.../mlp.csv``): per-operator GEMM times of Llama-2-7B and
  -70B on H100 for 1-4096 tokens, TP 1-8 (emulated by shape). Compared with AIConfigurator's
  per-layer qkv, attention-output, gate/up and down GEMMs on the same token counts.

Ratios are servesim ÷ measured (> 1: servesim slower). Llama-2 is not among AIConfigurator's
bundled models; its public HF geometry is written to a temporary model folder.
"""

from __future__ import annotations

import csv
import json
import statistics
import tempfile
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

LLAMA_GEOMETRY = {
    "Llama-2-7b-hf": {"hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
                      "num_attention_heads": 32, "num_key_value_heads": 32},
    "Llama-2-70b-hf": {"hidden_size": 8192, "intermediate_size": 28672, "num_hidden_layers": 80,
                       "num_attention_heads": 64, "num_key_value_heads": 8},
    "CodeLlama-34b-hf": {"hidden_size": 8192, "intermediate_size": 22016, "num_hidden_layers": 48,
                         "num_attention_heads": 64, "num_key_value_heads": 8},
}
"""The public geometry of the Llama-2-family checkpoints (not among AIConfigurator's models)."""

VIDUR_OPS = {"attn_pre_proj": "qkv_gemm", "attn_post_proj": "proj_gemm", "mlp_up_proj": "gate_ffn1_gemm",
             "mlp_down_proj": "ffn2_gemm"}


@cache
def model_folder(name: str) -> str:
    """A temporary folder holding the HF config.json of a Llama-2-family checkpoint."""
    folder = Path(tempfile.mkdtemp(prefix="servesim-llama2-"))
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 32000,
              "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "hidden_act": "silu",
              "torch_dtype": "float16", "tie_word_embeddings": False, **LLAMA_GEOMETRY[name]}
    (folder / "config.json").write_text(json.dumps(config))
    return str(folder)


@dataclass(frozen=True)
class Ratio:
    """Distribution of servesim ÷ measured over a set of points."""

    what: str
    points: int
    median: float
    p10: float
    p90: float

    @classmethod
    def of(cls, what: str, ratios: Iterable[float]) -> Ratio:
        values = sorted(ratios)
        n = len(values)
        return cls(what, n, statistics.median(values), values[n // 10], values[(9 * n) // 10])


def _aic_engine(model: str, tp: int, systems: str | None):
    from servesim.perf import aic
    from servesim.perf.hardware import ready_systems_dir, systems_dir

    path, how = systems_dir(systems)
    ready_systems_dir(path, how, "h100_sxm")
    version = aic.resolve_version(path, "h100_sxm", "vllm", None)
    key = aic.AicKey(model=model, system="h100_sxm", backend="vllm", version=version, tp=tp, pp=1,
                     attention_dp=1, moe_tp=None, moe_ep=None, block_size=16, systems_path=str(path))
    return aic.aic_engine(key)


def _roofline(model: str, tp: int, systems: str | None):
    from servesim.perf.hardware import resolve_gpu, systems_dir
    from servesim.perf.models import resolve_model
    from servesim.perf.roofline import RooflineTiming

    return RooflineTiming(resolve_model(model), resolve_gpu("h100_sxm", systems_dir(systems)[0]), tp=tp)


def splitwise(path: Path, systems: str | None = None) -> list[Ratio]:
    """Prefill and decode ratios against the splitwise Llama-2-70B H100 measurements, per TP."""
    groups: dict[tuple[str, int, int, int, int], list[float]] = defaultdict(list)
    with path.open() as f:
        for row in csv.DictReader(f):
            if row["model"] == "llama2-70b" and row["hardware"] == "h100-80gb":
                key = (int(row["tensor_parallel"]), int(row["batch_size"]), int(row["prompt_size"]), int(row["token_size"]))
                groups[("prompt",) + key].append(float(row["prompt_time"]))
                groups[("token",) + key].append(float(row["token_time"]))
    model = model_folder("Llama-2-70b-hf")
    out = []
    for tp in sorted({k[1] for k in groups}):
        aic, roof = _aic_engine(model, tp, systems), _roofline(model, tp, systems)
        ratios: dict[str, list[float]] = defaultdict(list)
        for (kind, t, batch, prompt, tokens), times in groups.items():
            if t != tp:
                continue
            measured = statistics.mean(times)
            if kind == "prompt" and tokens == 128:
                ratios["prefill, AIC"].append(aic.predict_prefill_latency(batch, prompt, 0) / measured)
                ratios["prefill, roofline"].append(1000 * roof.prefill_seconds(batch, prompt, 0) / measured)
            elif kind == "token":
                ctx = prompt + tokens // 2
                ratios["decode, AIC"].append(aic.predict_decode_latency(batch, ctx, 2) / measured)
                ratios["decode, roofline"].append(1000 * roof.decode_seconds(batch, batch * ctx) / measured)
        out += [Ratio.of(f"Llama-2-70B TP{tp} {what}", values) for what, values in sorted(ratios.items())]
    return out


def vidur(folder: Path, systems: str | None = None) -> list[Ratio]:
    """GEMM ratios against Vidur's H100 operator profiles, per model, op and token range."""
    out = []
    for name in LLAMA_GEOMETRY:
        path = folder / name / "mlp.csv"
        if not path.is_file():
            continue
        with path.open() as f:
            rows = [r for r in csv.DictReader(f) if int(r["num_tokens"]) in _TOKENS]
        layers = LLAMA_GEOMETRY[name]["num_hidden_layers"]
        ratios: dict[str, list[float]] = defaultdict(list)
        for tp in sorted({int(r["num_tensor_parallel_workers"]) for r in rows}):
            engine = _aic_engine(model_folder(name), tp, systems)
            names = [op[0] for op in engine.run_static_per_op(1, 1, 128, 2, 0, 1.0, 1.0, "static", 32)[0]]
            index = {n.removeprefix("context_"): i for i, n in enumerate(names)}
            for r in rows:
                if int(r["num_tensor_parallel_workers"]) != tp:
                    continue
                tokens = int(r["num_tokens"])
                band = "≤ 128 tokens" if tokens <= 128 else "> 128 tokens"
                ops = [VIDUR_OPS[k] for k in VIDUR_OPS]
                values = engine.evaluate_context_ops([index[o] for o in ops], 1, tokens, 0)
                for (vidur_op, _), (_, ms, *_) in zip(VIDUR_OPS.items(), values, strict=True):
                    ratios[f"{vidur_op} {band}"].append(ms / layers / float(r[f"time_stats.{vidur_op}.median"]))
        out += [Ratio.of(f"{name.removesuffix('-hf')} {what}", values) for what, values in sorted(ratios.items())]
    return out


_TOKENS = frozenset([1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096])


def check(shared_data: Path, systems: str | None = None) -> list[Ratio]:
    """Every comparison whose data is present under `shared_data` (../shared/data)."""
    found = []
    perf = shared_data / "splitwise-perf-model" / "perf_model.csv"
    if perf.is_file():
        found += splitwise(perf, systems)
    compute = shared_data / "vidur-profiling-sample" / "data" / "profiling" / "compute" / "h100" / "meta-llama"
    if compute.is_dir():
        found += vidur(compute, systems)
    return found


def render(ratios: list[Ratio]) -> str:
    """A Markdown table of the ratios."""
    lines = ["servesim ÷ measured for the timing model's pieces (> 1: servesim slower):", "",
             "| piece | points | median | p10 | p90 |", "|---|---:|---:|---:|---:|"]
    lines += [f"| {r.what} | {r.points} | {r.median:.2f} | {r.p10:.2f} | {r.p90:.2f} |" for r in ratios]
    return "\n".join(lines) + "\n"
