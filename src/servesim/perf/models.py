"""Model configs: where a model's HF ``config.json`` comes from, and what servesim reads from it.

A model is named the way the reference names it (``engine.model``):

* a local directory holding ``config.json`` (and optionally ``hf_quant_config.json``),
* a Hugging Face id among the model configs bundled with the AIConfigurator database
  (``aiconfigurator_core/model_configs/<org>--<name>_config.json``; the directory can be moved
  with ``AICONFIGURATOR_MODEL_CONFIGS_PATH``, like AIConfigurator itself allows), or
* any other Hugging Face id: its ``config.json`` is fetched from the Hub (`servesim.perf.hub`).

The package is located without importing it, so resolving a bundled model costs a file read.
`ModelSpec` holds the geometry the KV-capacity formula and the roofline need.
"""

from __future__ import annotations

import importlib.util
import math
import os
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from servesim import safejson
from servesim.errors import RunError

CONTEXT_KEYS = ("max_position_embeddings", "model_max_length", "max_sequence_length",
                "seq_length", "n_positions")

# Weight storage in bytes per parameter for a checkpoint quantization (block scales included:
# NVFP4 stores one fp8 scale per 16 values, 4.5 bits per weight).
WEIGHT_BYTES = {"bfloat16": 2.0, "float16": 2.0, "fp8": 1.0, "fp8_block": 1.0, "nvfp4": 0.5625}

# Architectures whose layer list is the plain dense GQA decoder (attention + gated MLP).
DENSE_ARCHITECTURES = frozenset({"LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM"})
# Architectures whose MLP is a routed mixture of experts without shared experts.
MOE_ARCHITECTURES = frozenset({"Qwen3MoeForCausalLM", "MixtralForCausalLM"})


class ModelNotFound(RunError):
    """The model is neither a local directory with config.json nor a bundled model config."""


@dataclass(frozen=True)
class ModelSpec:
    """What servesim reads from a model's HF config."""

    name: str
    """The model as configured (`engine.model`)."""
    source: str
    """'local' (a directory), 'bundled' (AIConfigurator's model_configs) or 'hub' (fetched)."""
    config: dict[str, Any] = field(repr=False, compare=False, hash=False)
    """The raw config.json (with hf_quant_config.json's section under 'hf_quant')."""
    architecture: str
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    num_experts: int
    """Routed experts (0 for a dense model)."""
    experts_per_token: int
    moe_intermediate_size: int
    context_length: int | None
    quant: str
    """Weight format of the layer GEMMs: bfloat16, float16, fp8, fp8_block, nvfp4 or another name."""
    kv_cache_bytes: int
    """Bytes per KV element servesim assumes: 1 for FP8/NVFP4 checkpoints (or an fp8 KV algorithm), else 2."""
    sliding_window: bool
    """Some layers use sliding-window attention (the KV per token is then not constant)."""
    mla: bool
    """Multi-head latent attention (DeepSeek-style compressed KV)."""

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def family(self) -> str | None:
        """'dense' or 'moe' when servesim's own formulas cover the architecture exactly, else None."""
        if self.sliding_window or self.mla or self.quant not in WEIGHT_BYTES:
            return None
        if self.architecture in DENSE_ARCHITECTURES and not self.is_moe:
            return "dense"
        if self.architecture in MOE_ARCHITECTURES and self.is_moe:
            return "moe"
        return None

    @property
    def weight_bytes(self) -> float:
        """Bytes per parameter of the layer GEMMs (2 for an unknown format)."""
        return WEIGHT_BYTES.get(self.quant, 2.0)

    def kv_heads_per_rank(self, tp: int) -> int:
        """KV heads one tensor-parallel rank holds (replicated when tp exceeds the KV heads)."""
        return math.ceil(self.num_kv_heads / tp)

    def kv_bytes_per_token(self, tp: int) -> int:
        """KV-cache bytes per token on one tensor-parallel rank (all layers, K and V)."""
        return self.num_layers * self.kv_heads_per_rank(tp) * self.head_dim * 2 * self.kv_cache_bytes


def aic_package_dir() -> Path | None:
    """The installed `aiconfigurator_core` package directory, found without importing it."""
    try:
        found = importlib.util.find_spec("aiconfigurator_core")
    except (ImportError, ValueError):
        return None
    if found is None or not found.submodule_search_locations:
        return None
    return Path(list(found.submodule_search_locations)[0])


def bundled_configs_dir() -> Path | None:
    """Where AIConfigurator keeps its bundled HF model configs."""
    configured = os.environ.get("AICONFIGURATOR_MODEL_CONFIGS_PATH")
    if configured:
        return Path(configured)
    package = aic_package_dir()
    return package / "model_configs" if package is not None else None


MAX_DIMENSION = 10_000_000
"""Largest layer count, width, head count, expert count or vocabulary of a model config read
(the largest real ones are ~10⁶: a vocabulary)."""


def _read_json(path: Path) -> dict[str, Any]:
    """A model config file's JSON object (`safejson`: bounded integers and nesting, UTF-8);
    AIConfigurator's copies may hold bare Infinity/NaN in fields servesim ignores, so those pass."""
    try:
        data = safejson.read_json(path, max_bytes=64 << 20, constants=True)
    except safejson.JsonRefused as exc:
        raise RunError(f"cannot read the model config: {exc.where(path)}") from None
    if not isinstance(data, dict):
        raise RunError(f"{path}: cannot read the model config (not a JSON object)")
    return data


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except (OSError, ValueError):  # a name too long for the file system, a NUL byte
        return False


def find_model_files(model: str) -> tuple[str, Path, Path | None]:
    """(source, config.json path, hf_quant_config.json path or None) of a model."""
    local = Path(model)
    try:
        is_dir = local.is_dir()
    except (OSError, ValueError):  # a name too long for a path, a NUL byte
        is_dir = False
    if is_dir:
        config = local / "config.json"
        if not config.is_file():
            raise ModelNotFound(f"model directory {model!r} has no config.json")
        quant = local / "hf_quant_config.json"
        return "local", config, quant if quant.is_file() else None
    folder = bundled_configs_dir()
    if folder is not None:
        stem = model.replace("/", "--")
        config = folder / f"{stem}_config.json"
        if _is_file(config):
            quant = folder / f"{stem}_hf_quant_config.json"
            return "bundled", config, quant if _is_file(quant) else None
    from servesim.perf.hub import HubUnavailable, hub_config, looks_like_repo_id

    why = "not a Hugging Face model id"
    if looks_like_repo_id(model):
        try:
            return "hub", hub_config(model), None
        except HubUnavailable as exc:
            why = f"no config.json from the Hugging Face Hub: {exc}"
    raise ModelNotFound(
        f"model {model!r}: not a local directory holding config.json, not among the AIConfigurator "
        f"database's bundled model configs, and {why} - give a directory with the model's HF "
        "config.json (or set HF_TOKEN for a gated model, HF_ENDPOINT for a mirror)")


@lru_cache(maxsize=64)
def resolve_model(model: str) -> ModelSpec:
    """Read and parse the HF config of `model` (a local directory, a bundled or a Hub HF id)."""
    source, config_path, quant_path = find_model_files(model)
    try:
        raw = _read_json(config_path)
        if quant_path is not None:
            raw = dict(raw, hf_quant=_read_json(quant_path).get("quantization") or {})
    except OSError as exc:
        raise RunError(f"{config_path}: cannot read the model config ({exc.strerror or exc})") from None
    try:
        return parse_hf_config(model, source, raw)
    except _Geometry as exc:
        raise RunError(f"{config_path}: {exc}") from None
    except KeyError as exc:
        raise RunError(f"{config_path}: not a decoder config servesim understands (no {exc.args[0]!r})") from None
    except (TypeError, ValueError, ZeroDivisionError, IndexError, AttributeError) as exc:
        raise RunError(f"{config_path}: not a decoder config servesim understands ({exc!r})") from None


class _Geometry(ValueError):
    """A model config value out of range (the message names the key and the rule)."""


def _int(section: dict[str, Any], *keys: str, default: int | None = None, low: int = 1) -> int:
    """The first of `keys` that holds an integer, checked to lie in [`low`, `MAX_DIMENSION`]."""
    for key in keys:
        value = section.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            if not low <= value <= MAX_DIMENSION:
                raise _Geometry(f"{key}: must be an integer in [{low}, {MAX_DIMENSION:,}] (got {value})")
            return value
    if default is None:
        raise KeyError(keys[0])
    return default


def _quant(raw: dict[str, Any]) -> tuple[str, bool]:
    """(weight format, fp8 KV) inferred from quantization_config / hf_quant_config."""
    qc = raw.get("quantization_config") or {}
    hq = raw.get("hf_quant") or {}
    algo = str(qc.get("quant_algo") or hq.get("quant_algo") or "").lower()
    method = str(qc.get("quant_method") or "").lower()
    kv_algo = str(qc.get("kv_cache_quant_algo") or hq.get("kv_cache_quant_algo") or "").lower()
    if algo:
        fmt = algo.replace("-", "_")
    elif method == "fp8":
        fmt = "fp8_block" if qc.get("weight_block_size") else "fp8"
    elif method:
        fmt = method
    else:
        dtype = str(raw.get("torch_dtype") or raw.get("dtype") or "bfloat16").lower()
        fmt = "float16" if dtype in ("float16", "fp16", "half") else "bfloat16"
    fp8_kv = fmt in ("fp8", "fp8_block", "nvfp4") or kv_algo == "fp8"
    return fmt, fp8_kv


def parse_hf_config(name: str, source: str, raw: dict[str, Any]) -> ModelSpec:
    """The geometry of a decoder-only model's HF config (text_config of a multimodal one)."""
    text = raw.get("text_config") if isinstance(raw.get("text_config"), dict) else None
    cfg = {**raw, **text} if text else raw
    archs = raw.get("architectures") or cfg.get("architectures") or ["unknown"]
    arch = archs[0] if isinstance(archs, list) and archs else "unknown"
    hidden = _int(cfg, "hidden_size", "d_model", "n_embd")
    heads = _int(cfg, "num_attention_heads", "n_head")
    kv_heads = _int(cfg, "num_key_value_heads", default=heads)
    head_dim = cfg.get("head_dim")
    if not isinstance(head_dim, int) or isinstance(head_dim, bool) or head_dim <= 0:
        head_dim = hidden // heads
    if not isinstance(head_dim, int) or isinstance(head_dim, bool) or not 0 < head_dim <= MAX_DIMENSION:
        raise _Geometry(f"head_dim: must be an integer in [1, {MAX_DIMENSION:,}] (got {head_dim!r}; "
                        f"hidden_size {hidden} / num_attention_heads {heads} when not given)")
    experts = _int(cfg, "num_experts", "num_local_experts", "n_routed_experts", default=0, low=0)
    inter = _int(cfg, "intermediate_size", "ffn_hidden_size", "n_inner", default=4 * hidden)
    moe_inter = _int(cfg, "moe_intermediate_size", default=inter) if experts else 0
    context = None
    for section in ([text] if text else []) + [raw]:
        for key in CONTEXT_KEYS:
            value = section.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                context = value
                break
        if context is not None:
            break
    layer_types = cfg.get("layer_types") or []
    sliding = bool(cfg.get("use_sliding_window")) or any("sliding" in str(t) for t in layer_types)
    if cfg.get("sliding_window") and arch not in ("Qwen2ForCausalLM", "Qwen3ForCausalLM", "Qwen3MoeForCausalLM"):
        sliding = True  # Qwen configs carry a window that is off unless use_sliding_window
    quant, fp8_kv = _quant(raw)
    return ModelSpec(
        name=name, source=source, config=raw, architecture=str(arch),
        num_layers=_int(cfg, "num_hidden_layers", "n_layer", "num_layers"),
        hidden_size=hidden, num_heads=heads, num_kv_heads=kv_heads, head_dim=head_dim,
        intermediate_size=inter, vocab_size=_int(cfg, "vocab_size"),
        num_experts=experts,
        experts_per_token=_int(cfg, "num_experts_per_tok", "moe_topk", default=2 if experts else 0, low=0),
        moe_intermediate_size=moe_inter, context_length=context, quant=quant,
        kv_cache_bytes=1 if fp8_kv else 2, sliding_window=sliding,
        mla=bool(cfg.get("kv_lora_rank")),
    )


def model_context_length(model: str) -> int:
    """`context_length: max` — the context length in the model's HF config."""
    try:
        spec = resolve_model(model)
    except ModelNotFound as exc:
        raise RunError(f"engine.context_length 'max' needs the HF config: {exc}; "
                       "or set engine.context_length to a number") from None
    if spec.context_length is None:
        raise RunError(f"model {model!r}: no context length among {', '.join(CONTEXT_KEYS)} in its "
                       "HF config; set engine.context_length to a number")
    return spec.context_length
