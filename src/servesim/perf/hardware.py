"""GPU constants: the AIConfigurator database's system files, servesim's own table, the user's.

Which AIConfigurator ``systems`` directory is used (the "database"), first match wins:

1. ``engine.aic_systems_path`` in the config;
2. the environment variable ``SERVESIM_AIC_SYSTEMS_PATH``;
3. servesim's cached copy of the reference's database (`servesim.perf.aicdata`), fetched on first use.

A GPU (``engine.hardware``) is looked up in that database's ``<name>.yaml`` first (memory
capacity, bandwidth, peak FLOP/s, the runtime and NCCL memory reserves the KV-capacity formula
subtracts), then in servesim's table (``gpus.yaml`` next to this module), then in a user file
named by ``SERVESIM_GPU_SPECS`` (same shape; its entries win over the bundled table).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from servesim.perf.models import aic_package_dir
from servesim.errors import RunError

ENV_SYSTEMS_PATH = "SERVESIM_AIC_SYSTEMS_PATH"
ENV_GPU_SPECS = "SERVESIM_GPU_SPECS"
REFERENCE_DATABASE = "servesim's copy of the reference's database"
GIB = 1 << 30
MIB = 1 << 20
DEFAULT_OTHER_MEM = 3758096384  # 3.5 GiB, as in every NVIDIA system file of the database
DEFAULT_NCCL_MEM = {1: 0, 2: 358612992, 4: 411041792, 8: 411041792}
EFFICIENCY_KEYS = ("gemm", "attention", "memory")
DECODE_ATTENTION_KEYS = ("latency_us", "efficiency", "l2_mib")


@dataclass(frozen=True)
class GpuSpec:
    """Constants of one GPU."""

    name: str
    source: str
    """Where the numbers come from: a system-file path, 'servesim table' or a user file."""
    mem_capacity: int
    """Device memory in bytes."""
    mem_bw: float
    """Peak memory bandwidth, bytes/s."""
    bf16_flops: float
    fp8_flops: float | None
    fp4_flops: float | None
    interconnect_bw: float
    """GPU-to-GPU bandwidth per GPU and direction, bytes/s."""
    other_mem: int = DEFAULT_OTHER_MEM
    nccl_mem: dict[int, int] = field(default_factory=lambda: dict(DEFAULT_NCCL_MEM))
    has_aic_data: bool = False
    """The database holds measured performance data for this GPU."""
    efficiency: dict[str, float] = field(default_factory=dict)
    """Measured roofline efficiencies of this GPU (`EFFICIENCY_KEYS`), where known; the roofline
    uses them in place of its generic defaults."""
    decode_attention: dict[str, float] = field(default_factory=dict)
    """vLLM's decode attention as measured on this GPU (`DECODE_ATTENTION_KEYS`: a per-layer
    latency, the KV-read efficiency, the L2 size), where known; fused mode's roofline uses it."""

    def nccl_mem_for(self, tp: int) -> int:
        """NCCL buffer reserve for a tensor-parallel size (clamped to 8, as the database does)."""
        key = min(tp, 8)
        if key in self.nccl_mem:
            return self.nccl_mem[key]
        smaller = [k for k in self.nccl_mem if k <= key]
        return self.nccl_mem[max(smaller)] if smaller else 0


def systems_dir(configured: str | None = None) -> tuple[Path, str]:
    """(the AIConfigurator systems directory in use, how it was chosen); see `ready_systems_dir`."""
    if configured:
        return Path(configured).expanduser(), "engine.aic_systems_path"
    env = os.environ.get(ENV_SYSTEMS_PATH)
    if env:
        return Path(env).expanduser(), ENV_SYSTEMS_PATH
    from servesim.perf import aicdata  # only runs that need the database load the fetcher

    return aicdata.systems_root(), REFERENCE_DATABASE


def ready_systems_dir(path: Path, how: str, gpu: str | None = None, backend: str | None = None,
                      version: str | None = None) -> None:
    """Make the systems directory usable: a configured one must exist; servesim's copy of the
    reference's database gets its top-level files and the data of `gpu` (for a run of `backend`
    at `version`, which the shipped slice may cover) unpacked or fetched if missing."""
    if how == REFERENCE_DATABASE:
        from servesim.perf import aicdata

        aicdata.ensure([gpu] if gpu else [], backend=backend, version=version)
    elif not (path / "data").is_dir():
        raise RunError(f"{how}: {str(path)!r} is not an AIConfigurator systems directory "
                       "(it has no data/ folder)")


def package_systems_dir() -> Path | None:
    """The ``systems`` directory of the installed ``aiconfigurator-core`` package (not the default)."""
    package = aic_package_dir()
    return package / "systems" if package is not None else None


@lru_cache(maxsize=64)
def _system_file(path: str) -> dict[str, Any] | None:
    try:
        data = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError):
        return None
    return data if isinstance(data, dict) else None


def aic_system(name: str, systems: Path | None) -> GpuSpec | None:
    """The database's own constants for `name`, or None when it has no such system file."""
    if systems is None or "/" in name or name.startswith("."):
        return None
    path = systems / f"{name}.yaml"
    data = _system_file(str(path))
    if data is None or not isinstance(data.get("gpu"), dict):
        return None
    gpu, node, misc = data["gpu"], data.get("node") or {}, data.get("misc") or {}
    data_dir = systems / str(data.get("data_dir", f"data/{name}"))
    has_data = data_dir.is_dir() and any(p.suffix == ".parquet" for p in data_dir.rglob("*.parquet"))
    nccl = misc.get("nccl_mem") or {}
    return GpuSpec(
        name=name, source=str(path),
        mem_capacity=int(gpu["mem_capacity"]), mem_bw=float(gpu["mem_bw"]),
        bf16_flops=float(gpu["bfloat16_tc_flops"]),
        fp8_flops=float(gpu["fp8_tc_flops"]) if gpu.get("fp8_tc_flops") else None,
        fp4_flops=float(gpu["fp4_tc_flops"]) if gpu.get("fp4_tc_flops") else None,
        interconnect_bw=float(node.get("intra_node_bw") or 32e9),
        other_mem=int(misc.get("other_mem", DEFAULT_OTHER_MEM)),
        nccl_mem={int(k): int(v) for k, v in nccl.items()} if nccl else dict(DEFAULT_NCCL_MEM),
        has_aic_data=has_data,
    )


def spec_from_table(name: str, entry: dict[str, Any], source: str) -> GpuSpec:
    """A `GpuSpec` from one gpus.yaml-style entry (human units)."""
    try:
        nccl = entry.get("nccl_mem_mib")
        return GpuSpec(
            name=name, source=source,
            mem_capacity=int(round(float(entry["memory_gib"]) * GIB)),
            mem_bw=float(entry["memory_bandwidth_gb_s"]) * 1e9,
            bf16_flops=float(entry["bf16_tflops"]) * 1e12,
            fp8_flops=float(entry["fp8_tflops"]) * 1e12 if entry.get("fp8_tflops") else None,
            fp4_flops=float(entry["fp4_tflops"]) * 1e12 if entry.get("fp4_tflops") else None,
            interconnect_bw=float(entry.get("interconnect_gb_s", 32)) * 1e9,
            other_mem=int(round(float(entry.get("other_mem_gib", DEFAULT_OTHER_MEM / GIB)) * GIB)),
            nccl_mem={int(k): int(float(v) * MIB) for k, v in nccl.items()} if nccl else dict(DEFAULT_NCCL_MEM),
            efficiency=_efficiency(name, entry.get("efficiency"), source),
            decode_attention=_decode_attention(name, entry.get("decode_attention"), source),
        )
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise RunError(f"{source}: GPU {name!r} needs memory_gib, memory_bandwidth_gb_s and "
                       f"bf16_tflops as numbers ({exc!r})") from None


def _efficiency(name: str, entry: Any, source: str) -> dict[str, float]:
    """An entry's measured efficiencies: a mapping of `EFFICIENCY_KEYS` to fractions in (0, 1]."""
    if entry is None:
        return {}
    if not isinstance(entry, dict) or any(k not in EFFICIENCY_KEYS for k in entry) or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v <= 1 for v in entry.values()):
        raise RunError(f"{source}: GPU {name!r}: efficiency must map {', '.join(EFFICIENCY_KEYS)} to "
                       f"fractions in (0, 1] (got {entry!r})")
    return {str(k): float(v) for k, v in entry.items()}


def _decode_attention(name: str, entry: Any, source: str) -> dict[str, float]:
    """An entry's measured decode attention: all of `DECODE_ATTENTION_KEYS` as positive numbers,
    the efficiency at most 1."""
    if entry is None:
        return {}
    if not isinstance(entry, dict) or set(entry) != set(DECODE_ATTENTION_KEYS) or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 for v in entry.values()) \
            or entry["efficiency"] > 1:
        raise RunError(f"{source}: GPU {name!r}: decode_attention must map each of "
                       f"{', '.join(DECODE_ATTENTION_KEYS)} to a positive number, the efficiency at most 1 "
                       f"(got {entry!r})")
    return {str(k): float(v) for k, v in entry.items()}


@lru_cache(maxsize=4)
def _table(user_file: str | None) -> dict[str, GpuSpec]:
    bundled = Path(__file__).with_name("gpus.yaml")
    found = {name: spec_from_table(name, entry, "servesim table")
             for name, entry in (yaml.safe_load(bundled.read_text()) or {}).items()}
    if user_file:
        try:
            extra = yaml.safe_load(Path(user_file).read_text()) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise RunError(f"{ENV_GPU_SPECS}={user_file}: cannot read ({exc})") from None
        if not isinstance(extra, dict):
            raise RunError(f"{ENV_GPU_SPECS}={user_file}: must map GPU names to specs")
        found.update({str(n): spec_from_table(str(n), e, user_file) for n, e in extra.items()})
    return found


def gpu_table() -> dict[str, GpuSpec]:
    """servesim's GPU table plus the user's ``SERVESIM_GPU_SPECS`` file."""
    return _table(os.environ.get(ENV_GPU_SPECS) or None)


def resolve_gpu(name: str, systems: Path | None) -> GpuSpec:
    """The constants of GPU `name`: the database's system file, else servesim's/the user's table."""
    user = os.environ.get(ENV_GPU_SPECS)
    table = gpu_table()
    if user and name in table and table[name].source == user:
        return table[name]
    spec = aic_system(name, systems)
    if spec is not None:
        if name in table:
            own = table[name]
            return replace(spec, efficiency=own.efficiency, decode_attention=own.decode_attention)
        return spec
    if name in table:
        return table[name]
    known = sorted(set(table) | {p.stem for p in systems.glob("*.yaml")} if systems else set(table))
    raise RunError(f"engine.hardware {name!r}: unknown GPU (not in the AIConfigurator database nor in "
                   f"servesim's table; add it to a YAML file named by {ENV_GPU_SPECS}); known: "
                   + ", ".join(k for k in known if not k.startswith(("attention_", "perf_", "query_"))))
