"""Benchmark points: one measured serving point per CSV row (InferenceX's form), and the
servesim config that replays it as a user would write it.

A point is a deployment (GPU, engine and its image, TP/EP/attention-DP, the server flags), a
closed-loop workload (``conc`` requests in flight, ``num_prompts`` requests, input and output
lengths independent uniform integers in ``[int(range_ratio·L), L]``, ``--ignore-eos``, prefix
caching off) and the client's measured means (TTFT, TPOT, E2E, throughput per GPU).

`read_points(path)` reads the CSV; a bad row is a `TraceError` naming ``file:line`` and the
column. `point_config(point, trace)` is the servesim config; `write_trace(point, path)` writes the
point's requests as a Mooncake trace (the workload servesim's ``concurrency`` load replays in
order). The benchmark's warm-up requests are not replayed: they only warm caches and CUDA graphs,
neither of which servesim models, and the client does not count them.
"""

from __future__ import annotations

import csv
import json
import re
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from servesim.errors import TraceError
from servesim.limits import MAX_REQUESTS, MAX_TOKENS, MAX_WORKERS

GPUS = {"h100": "h100_sxm", "h200": "h200_sxm", "b200": "b200_sxm", "gb200": "gb200_sxm",
        "h20": "h20_sxm", "a100": "a100_sxm", "b300": "b300_sxm"}
"""Benchmark GPU names → servesim's (AIConfigurator's) system names."""
BACKENDS = ("vllm", "sglang", "trtllm")
_VERSION = re.compile(r":v?(\d+\.\d+(?:\.\d+)?(?:(?:rc|\.post|\.dev|post|dev)\d+)*)")
REQUIRED = ("row_id", "model", "gpu", "engine", "tp", "isl", "osl", "conc", "num_prompts",
            "mean_ttft_ms", "mean_tpot_ms", "tput_per_gpu")


@dataclass(frozen=True)
class BenchmarkPoint:
    """One measured serving point: deployment, workload and the client's means."""

    path: str
    line: int
    row_id: str
    model: str
    gpu: str
    """servesim's system name (e.g. ``h200_sxm``)."""
    backend: str
    image: str
    version: str | None
    """The engine version from the image tag (None when the image is not recorded)."""
    tp: int
    ep: int
    dp_attention: bool
    num_gpus: int
    max_num_seqs: int | None
    max_num_tokens: int | None
    chunked_prefill_size: int | None
    max_prefill_tokens: int | None
    kv_mem_fraction: float | None
    kv_cache_dtype: str
    prefix_caching: bool
    max_model_len: int | None
    isl: int
    osl: int
    range_ratio: float
    conc: int
    num_prompts: int
    warmup_requests: int
    mean_ttft_ms: float
    mean_tpot_ms: float
    mean_e2e_ms: float | None
    tput_per_gpu: float

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"


class _Row:
    """Typed access to one CSV row; errors name file:line and column."""

    def __init__(self, path: str, line: int, row: dict[str, str]) -> None:
        self.path, self.line, self.row = path, line, row

    def fail(self, column: str, message: str) -> TraceError:
        return TraceError(self.path, self.line, f"column {column!r}: {message}")

    def text(self, column: str, default: str | None = None) -> str:
        value = (self.row.get(column) or "").strip()
        if not value:
            if default is None:
                raise self.fail(column, "required, empty")
            return default
        return value

    def _parsed(self, column: str, optional: bool, parse: Callable[[str], Any], kind: str) -> Any:
        """The column's value parsed by `parse`; None when empty and `optional`, else an error."""
        value = (self.row.get(column) or "").strip()
        if not value:
            if optional:
                return None
            raise self.fail(column, "required, empty")
        try:
            return parse(value)
        except ValueError:
            raise self.fail(column, f"expected {kind}, got {value!r}") from None

    def integer(self, column: str, minimum: int = 1, optional: bool = False,
                maximum: int | None = None) -> int | None:
        number = self._parsed(column, optional, int, "an integer")
        if number is None:
            return None
        if number < minimum:
            raise self.fail(column, f"must be >= {minimum}, got {number}")
        top = _MAXIMA.get(column) if maximum is None else maximum
        if top is not None and number > top:
            raise self.fail(column, f"must be at most {top:,}, got {number}")
        return number

    def req_int(self, column: str, minimum: int = 1) -> int:
        value = self.integer(column, minimum)
        assert value is not None
        return value

    def number(self, column: str, optional: bool = False, low: float = 0.0, high: float = float("inf")) -> float | None:
        number = self._parsed(column, optional, float, "a number")
        if number is not None and not low < number <= high:
            raise self.fail(column, f"must be in ({low:g}, {high:g}], got {self.row.get(column, '').strip()}")
        return number

    def flag(self, column: str, default: bool) -> bool:
        value = (self.row.get(column) or "").strip().lower()
        if not value:
            return default
        if value not in ("true", "false"):
            raise self.fail(column, f"expected true or false, got {value!r}")
        return value == "true"


def image_version(image: str) -> str | None:
    """The engine version in a container image tag (``vllm/vllm-openai:v0.13.0`` → ``0.13.0``)."""
    found = _VERSION.search(image)
    return found.group(1) if found else None


def _point(row: _Row) -> BenchmarkPoint:
    gpu = row.text("gpu").lower()
    if gpu not in GPUS:
        raise row.fail("gpu", f"unknown GPU {gpu!r} (known: {', '.join(GPUS)})")
    backend = row.text("engine").lower()
    if backend not in BACKENDS:
        raise row.fail("engine", f"unknown engine {backend!r} (known: {', '.join(BACKENDS)})")
    image = row.text("engine_image", "")
    version = image_version(image) if image else None
    if image and version is None:
        raise row.fail("engine_image", f"no version in the image tag {image!r}")
    tp, ep = row.req_int("tp"), row.integer("ep", optional=True) or 1
    if tp % ep:
        raise row.fail("ep", f"ep {ep} does not divide tp {tp}")
    ratio = row.number("range_ratio", optional=True, high=1.0)
    return BenchmarkPoint(
        path=row.path, line=row.line, row_id=row.text("row_id"), model=row.text("model"),
        gpu=GPUS[gpu], backend=backend, image=image, version=version, tp=tp, ep=ep,
        dp_attention=row.flag("dp_attention", False), num_gpus=row.integer("num_gpus", optional=True) or tp,
        max_num_seqs=row.integer("max_num_seqs", optional=True),
        max_num_tokens=row.integer("max_num_tokens", optional=True),
        chunked_prefill_size=row.integer("chunked_prefill_size", optional=True),
        max_prefill_tokens=row.integer("max_prefill_tokens", optional=True),
        kv_mem_fraction=row.number("kv_mem_fraction", optional=True, high=1.0),
        kv_cache_dtype=row.text("kv_cache_dtype", "auto"), prefix_caching=row.flag("prefix_caching", False),
        max_model_len=row.integer("max_model_len", optional=True),
        isl=row.req_int("isl"), osl=row.req_int("osl"), range_ratio=1.0 if ratio is None else ratio,
        conc=row.req_int("conc"), num_prompts=row.req_int("num_prompts"),
        warmup_requests=row.integer("warmup_requests", minimum=0, optional=True) or 0,
        mean_ttft_ms=_req(row.number("mean_ttft_ms")), mean_tpot_ms=_req(row.number("mean_tpot_ms")),
        mean_e2e_ms=row.number("mean_e2e_ms", optional=True), tput_per_gpu=_req(row.number("tput_per_gpu")))


def _req(value: float | None) -> float:
    assert value is not None
    return value


def read_points(path: str | Path) -> list[BenchmarkPoint]:
    """Every point of a benchmark-point CSV, in file order (a bad row: `TraceError` at file:line)."""
    name = str(path)
    text = _points_text(name)
    reader = csv.DictReader(text.splitlines())
    try:
        return _read_rows(name, reader)
    except csv.Error as exc:  # a field over the csv module's limit (128 KiB), a NUL byte
        raise TraceError(name, reader.line_num + 1, f"not a benchmark-point CSV: {exc}") from None  # the record read


def _points_text(name: str) -> str:
    """The CSV's text: a regular file of UTF-8 text, at most `MAX_POINTS_BYTES`."""
    from servesim.safejson import regular_file_or_error

    try:
        regular_file_or_error(name)
        with open(name, "rb") as handle:
            data = handle.read(MAX_POINTS_BYTES + 1)
    except OSError as exc:
        raise TraceError(name, None, f"cannot read benchmark points: {exc.strerror or exc}") from None
    if len(data) > MAX_POINTS_BYTES:
        raise TraceError(name, None, f"larger than {MAX_POINTS_BYTES >> 20} MiB: not a benchmark-point CSV")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise TraceError(name, data.count(b"\n", 0, exc.start) + 1, f"not UTF-8 text ({exc.reason})") from None


MAX_POINTS_BYTES = 64 << 20
_MAXIMA = {"isl": MAX_TOKENS, "osl": MAX_TOKENS, "num_prompts": MAX_REQUESTS, "conc": MAX_REQUESTS,
           "tp": MAX_WORKERS, "ep": MAX_WORKERS, "num_gpus": MAX_WORKERS}
"""Bounds of the integer columns (`servesim.limits`), checked before any replay."""


def _read_rows(name: str, reader: csv.DictReader) -> list[BenchmarkPoint]:
    missing = [c for c in REQUIRED if c not in (reader.fieldnames or ())]  # (reads the header)
    if missing:
        raise TraceError(name, 1, f"header: missing column {missing[0]!r} (required: {', '.join(REQUIRED)})")
    points: list[BenchmarkPoint] = []
    seen: dict[str, int] = {}
    for row in reader:
        line = reader.line_num
        point = _point(_Row(name, line, row))
        if point.row_id in seen:
            raise TraceError(name, line, f"column 'row_id': {point.row_id!r} repeats line {seen[point.row_id]}")
        seen[point.row_id] = line
        points.append(point)
    if not points:
        raise TraceError(name, None, "no benchmark points")
    return points


# -- the replay -----------------------------------------------------------------------------------

def lengths(point: BenchmarkPoint, requests: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(input, output) lengths of the point's requests: independent uniform integers in
    [int(range_ratio·L), L], seeded by the row id (so the same point draws the same requests; the
    first `requests` of them when capped)."""
    count = point.num_prompts if requests is None else min(requests, point.num_prompts)
    rng = np.random.default_rng(zlib.crc32(point.row_id.encode()))
    low_in, low_out = max(1, int(point.range_ratio * point.isl)), max(1, int(point.range_ratio * point.osl))
    inputs = rng.integers(low_in, point.isl + 1, size=point.num_prompts)[:count]
    outputs = rng.integers(low_out, point.osl + 1, size=point.num_prompts)[:count]
    return inputs.astype(np.int64), outputs.astype(np.int64)


def write_trace(point: BenchmarkPoint, path: Path, requests: int | None = None, block_size: int = 512) -> Path:
    """The point's requests as a Mooncake trace (fresh hash ids: random prompts share nothing)."""
    inputs, outputs = lengths(point, requests)
    next_id = 0
    with path.open("w") as out:
        for isl, osl in zip(inputs.tolist(), outputs.tolist(), strict=True):
            blocks = -(-isl // block_size)
            out.write(json.dumps({"timestamp": 0, "input_length": isl, "output_length": osl,
                                  "hash_ids": list(range(next_id, next_id + blocks))}) + "\n")
            next_id += blocks
    return path


def parallelism(point: BenchmarkPoint, moe: bool) -> dict[str, int]:
    """servesim's parallelism keys: TP (or attention DP) with the MoE split over EP."""
    if point.dp_attention:
        par = {"tensor": 1, "attention_data": point.tp}
    else:
        par = {"tensor": point.tp}
    if moe:
        par.update(moe_tensor=point.tp // point.ep, moe_expert=point.ep)
    return par


def point_config(point: BenchmarkPoint, trace: Path, version: str | None = None,
                 moe: bool = True) -> dict[str, Any]:
    """The servesim config of a point, as a user would write it from the server flags
    (`version`: the backend version to ask for, default the image's)."""
    scheduler: dict[str, Any] = {}
    if point.max_num_seqs is not None:
        scheduler["max_sequences"] = point.max_num_seqs
    if point.backend == "sglang":
        knobs = {k: v for k, v in (("chunked_prefill_size", point.chunked_prefill_size),
                                   ("max_prefill_tokens", point.max_prefill_tokens)) if v is not None}
        if knobs:
            scheduler["sglang"] = knobs
    elif point.max_num_tokens is not None:
        scheduler["max_batched_tokens"] = point.max_num_tokens
    capacity: dict[str, Any] = {"type": "default"}
    if point.kv_mem_fraction is not None:
        capacity["memory_fraction"] = point.kv_mem_fraction
    worker = {"parallelism": parallelism(point, moe), "scheduler": scheduler,
              "kv_cache": {"prefix_caching": point.prefix_caching, "capacity": capacity}}
    engine: dict[str, Any] = {"model": point.model, "hardware": point.gpu, "backend": point.backend,
                              "workers": {"aggregated": worker}}
    chosen = version if version is not None else point.version
    if chosen is not None:
        engine["backend_version"] = chosen
    if point.backend == "vllm" and point.max_model_len is not None:
        engine["context_length"] = point.max_model_len
    return {"engine": engine,
            "traffic": {"source": {"type": "trace", "format": "mooncake", "paths": [str(trace)]},
                        "load": {"type": "concurrency", "concurrency": point.conc}}}
