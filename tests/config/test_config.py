"""Tests of servesim.config: schema rules, defaults, YAML loading and --set overrides.

Accept/reject decisions were checked against the reference `aisimulate predict`.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pydantic
import pytest
import yaml

from servesim.config import (
    ConcurrencyLoad,
    DefaultCapacity,
    DefaultTiming,
    FixedCapacity,
    FixedTiming,
    PoissonLoad,
    SimConfig,
    SyntheticSource,
    TraceSource,
    apply_overrides,
    load_config,
    parse_config,
    request_count,
    runtime_rejections,
)
from servesim.config import schema
from servesim.config.reference import field_doc
from servesim.errors import ConfigError

CONFIGS = Path(__file__).resolve().parents[1] / "data" / "configs"
CASE_FILES = sorted(p.name for p in CONFIGS.glob("*.yaml"))

# From each case's lowered-spec*.json (reference): per role (block_size, max_num_seqs,
# max_num_batched_tokens, enable_prefix_caching, dp_size); request_count; trace_block_size; max_in_flight.
FACTS: dict[str, tuple[dict[str, tuple[int, int, int, bool, int]], int | None, int | None, int | None]] = {
    "engine-01-config.yaml": ({"aggregated": (16, 2, 64, True, 1)}, None, 16, None),
    "engine-02-config-noprefix.yaml": ({"aggregated": (16, 256, 8192, False, 1)}, None, 16, None),
    "engine-02-config.yaml": ({"aggregated": (16, 256, 8192, True, 1)}, None, 16, None),
    "engine-03-config-small-kv.yaml": ({"aggregated": (16, 256, 8192, True, 1)}, None, 16, None),
    "engine-03-config.yaml": ({"aggregated": (16, 256, 8192, True, 1)}, None, 16, None),
    "engine-04-config.yaml": ({"aggregated": (1, 256, 64, True, 1)}, None, 16, None),
    "engine-05-config-vllm-control.yaml": ({"aggregated": (16, 256, 8192, True, 1)}, None, 16, None),
    "engine-05-config-vllm-overlong.yaml": ({"aggregated": (16, 256, 8192, True, 1)}, None, 16, None),
    "engine-05-config.yaml": ({"aggregated": (16, 256, 8192, True, 1)}, None, 16, None),
    "engine-06-config.yaml": ({"aggregated": (16, 256, 8192, True, 2)}, None, 16, None),
    "engine-07-config-single.yaml": ({"aggregated": (64, 256, 8192, True, 1)}, 1, 512, 1),
    "engine-07-config.yaml": ({"aggregated": (64, 256, 8192, True, 1)}, 2, 512, 2),
    "replay-01-config.yaml": ({"aggregated": (64, 256, 8192, True, 1)}, 5, 512, 2),
    "replay-02-config.yaml": ({"aggregated": (64, 256, 8192, True, 1)}, 30, 512, None),
    "replay-03-config.yaml": ({"aggregated": (64, 256, 8192, True, 1)}, 4, 512, 2),
    "replay-04-config.yaml": ({"aggregated": (64, 256, 8192, True, 1)}, 7, 512, None),
    "replay-05-config.yaml": ({"aggregated": (64, 256, 8192, True, 1)}, None, 512, None),
    "replay-06-config.yaml": ({"aggregated": (64, 256, 8192, True, 1)}, None, 512, None),
    "replay-07-config.yaml": ({"aggregated": (64, 256, 8192, True, 1)}, None, 512, 1),
    "replay-08-config.yaml": ({"aggregated": (64, 256, 8192, True, 1)}, None, 512, None),
    "replay-09-config.yaml": ({"aggregated": (64, 256, 8192, True, 1)}, 4, 512, 2),
    "replay-10-config.yaml": ({"aggregated": (64, 256, 8192, True, 1)}, None, 512, None),
    "replay-11-config-destination-missing.yaml": ({"decode": (64, 256, 8192, True, 1), "prefill": (64, 1, 8192, True, 1)}, None, 512, None),
    "replay-11-config.yaml": ({"decode": (64, 256, 8192, True, 1), "prefill": (64, 1, 8192, True, 1)}, 4, 512, 2),
    "replay-12-config.yaml": ({"aggregated": (16, 8, 256, True, 1)}, None, 512, 3),
    "timing-01-config.yaml": ({"aggregated": (64, 256, 8192, True, 1)}, 120, 512, 24),
    "timing-02-config.yaml": ({"aggregated": (64, 96, 2048, True, 1)}, 100, 512, None),
}

DELETE = object()

W = "engine.workers.aggregated"


def synthetic() -> dict[str, Any]:
    """A small valid aggregated config with synthetic traffic."""
    return {
        "engine": {
            "model": "Qwen/Qwen3-8B",
            "hardware": "h200_sxm",
            "context_length": 32768,
            "workers": {
                "aggregated": {
                    "kv_cache": {"capacity": {"type": "fixed", "blocks": 1000}},
                    "timing": {"type": "fixed", "prefill_ms": 10, "decode_ms": 2},
                }
            },
        },
        "traffic": {
            "source": {"type": "synthetic", "input_tokens": 64, "output_tokens": 2},
            "load": {"type": "concurrency", "concurrency": 2},
            "stop": {"requests": 3},
        },
    }


def session() -> dict[str, Any]:
    """Synthetic multi-turn sessions."""
    return edit(
        synthetic(),
        ("traffic.source", {"type": "synthetic-session", "session": {"turns": 2}}),
        ("traffic.stop", {"sessions": 2}),
    )


def trace(fmt: str = "mooncake") -> dict[str, Any]:
    """Trace traffic on trace timestamps."""
    return edit(synthetic(), ("traffic", {"source": {"type": "trace", "paths": ["/traces/t.jsonl"], "format": fmt}, "load": {"type": "trace_timestamps"}}))


def disaggregated() -> dict[str, Any]:
    """Prefill + decode pools."""
    config = synthetic()
    worker = config["engine"]["workers"].pop("aggregated")
    config["engine"]["mode"] = "disaggregated"
    config["engine"]["workers"] = {"prefill": worker, "decode": copy.deepcopy(worker)}
    return config


def edit(config: dict[str, Any], *changes: tuple[str, Any]) -> dict[str, Any]:
    """Copy `config` and set (or delete, with DELETE) each dotted path."""
    config = copy.deepcopy(config)
    for path, value in changes:
        *parents, last = path.split(".")
        node = config
        for key in parents:
            node = node.setdefault(key, {})
        if value is DELETE:
            node.pop(last, None)
        else:
            node[last] = copy.deepcopy(value)
    return config


def rejected(config: dict[str, Any]) -> str:
    """Validate `config`, expecting a ConfigError; return its message."""
    with pytest.raises(ConfigError) as info:
        parse_config(config)
    return str(info.value)


# ------------------------------------------------------------------------------------------
# Every reference case config loads and resolves to the reference's lowered values
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", CASE_FILES)
def test_case_config_loads_with_reference_defaults(name: str) -> None:
    config = load_config(CONFIGS / name)
    ranks, count, trace_block_size, max_in_flight = FACTS[name]
    engine = config.engine
    assert set(engine.roles) == set(ranks)
    for role, (block_size, max_seqs, max_tokens, prefix_caching, dp_size) in ranks.items():
        worker = engine.roles[role]  # type: ignore[index]
        assert engine.block_size(role) == block_size  # type: ignore[arg-type]
        assert worker.scheduler.max_sequences_for(role) == max_seqs  # type: ignore[arg-type]
        assert worker.scheduler.max_batched_tokens == max_tokens
        assert worker.kv_cache.prefix_caching == prefix_caching
        assert worker.parallelism.attention_data == dp_size
    assert request_count(config.traffic) == count
    source = config.traffic.source
    if isinstance(source, TraceSource):
        assert source.trace_block_size == trace_block_size
        # no trace beside these copies nor in the current directory: kept as written (the
        # reference reads it from the current directory)
        assert all(not Path(p).is_absolute() and not (CONFIGS / p).exists() for p in source.paths)
    load = config.traffic.load
    assert (load.concurrency if isinstance(load, ConcurrencyLoad) else None) == max_in_flight
    assert runtime_rejections(config) == []


def test_case_configs_are_all_covered() -> None:
    assert len(CASE_FILES) >= 27
    assert set(CASE_FILES) == set(FACTS)


# ------------------------------------------------------------------------------------------
# Rejections: every message names the offending key path
# ------------------------------------------------------------------------------------------

BAD_CONFIGS: list[tuple[str, dict[str, Any], str]] = [
    # engine
    ("mode", edit(synthetic(), ("engine.mode", "agg")), "engine.mode"),
    ("model missing", edit(synthetic(), ("engine.model", DELETE)), "engine.model"),
    ("model empty", edit(synthetic(), ("engine.model", "")), "engine.model"),
    ("model not a string", edit(synthetic(), ("engine.model", 5)), "engine.model"),
    ("hardware auto", edit(synthetic(), ("engine.hardware", "auto")), "engine.hardware"),
    ("backend", edit(synthetic(), ("engine.backend", "VLLM")), "engine.backend"),
    ("backend_version number", edit(synthetic(), ("engine.backend_version", 0.19)), "engine.backend_version"),
    ("context_length zero", edit(synthetic(), ("engine.context_length", 0)), "engine.context_length"),
    ("context_length string", edit(synthetic(), ("engine.context_length", "1000")), "engine.context_length"),
    ("context_length float", edit(synthetic(), ("engine.context_length", 1000.0)), "engine.context_length"),
    ("context_length MAX", edit(synthetic(), ("engine.context_length", "MAX")), "engine.context_length"),
    ("engine unknown key", edit(synthetic(), ("engine.foo", 1)), "engine.foo"),
    ("engine null", edit(synthetic(), ("engine", None)), "engine"),
    ("aggregated missing", edit(synthetic(), ("engine.workers", {})), "engine.workers.aggregated"),
    ("aggregated rejects prefill", edit(synthetic(), ("engine.workers.prefill", {})), "engine.workers.prefill"),
    ("disaggregated rejects aggregated", edit(disaggregated(), ("engine.workers.aggregated", {})), "engine.workers.aggregated"),
    ("disaggregated needs decode", edit(disaggregated(), ("engine.workers.decode", DELETE)), "engine.workers.decode"),
    ("trtllm disaggregated", edit(disaggregated(), ("engine.backend", "trtllm")), "engine.backend"),
    ("kv_transfer aggregated", edit(synthetic(), ("engine.kv_transfer", {})), "engine.kv_transfer"),
    ("bytes_per_token zero", edit(disaggregated(), ("engine.kv_transfer", {"bytes_per_token": 0})), "engine.kv_transfer.bytes_per_token"),
    ("bytes_per_token float", edit(disaggregated(), ("engine.kv_transfer", {"bytes_per_token": 100.0})), "engine.kv_transfer.bytes_per_token"),
    ("bandwidth string", edit(disaggregated(), ("engine.kv_transfer", {"bandwidth_gb_per_second": "10"})), "engine.kv_transfer.bandwidth_gb_per_second"),
    ("bandwidth infinite", edit(disaggregated(), ("engine.kv_transfer", {"bandwidth_gb_per_second": float("inf")})), "engine.kv_transfer.bandwidth_gb_per_second"),
    ("timing_mode", edit(disaggregated(), ("engine.kv_transfer", {"timing_mode": "x"})), "engine.kv_transfer.timing_mode"),
    # workers
    ("replicas zero", edit(synthetic(), (f"{W}.parallelism", {"replicas": 0})), f"{W}.parallelism.replicas"),
    ("tensor bool", edit(synthetic(), (f"{W}.parallelism", {"tensor": True})), f"{W}.parallelism.tensor"),
    ("replicas string", edit(synthetic(), (f"{W}.parallelism", {"replicas": "2"})), f"{W}.parallelism.replicas"),
    ("parallelism null", edit(synthetic(), (f"{W}.parallelism", None)), f"{W}.parallelism"),
    ("max_batched_tokens float", edit(synthetic(), (f"{W}.scheduler", {"max_batched_tokens": 64.0})), f"{W}.scheduler.max_batched_tokens"),
    ("max_sequences null", edit(synthetic(), (f"{W}.scheduler", {"max_sequences": None})), f"{W}.scheduler.max_sequences"),
    ("block_size 1 vllm", edit(synthetic(), (f"{W}.kv_cache.block_size", 1)), f"{W}.kv_cache.block_size"),
    ("block_size 1 trtllm", edit(synthetic(), (f"{W}.kv_cache.block_size", 1), ("engine.backend", "trtllm")), f"{W}.kv_cache.block_size"),
    ("block_size string", edit(synthetic(), (f"{W}.kv_cache.block_size", "16")), f"{W}.kv_cache.block_size"),
    ("prefix_caching null", edit(synthetic(), (f"{W}.kv_cache.prefix_caching", None)), f"{W}.kv_cache.prefix_caching"),
    ("prefix_caching 2", edit(synthetic(), (f"{W}.kv_cache.prefix_caching", 2)), f"{W}.kv_cache.prefix_caching"),
    ("fixed needs blocks", edit(synthetic(), (f"{W}.kv_cache.capacity", {"type": "fixed"})), f"{W}.kv_cache.capacity"),
    ("fixed blocks null", edit(synthetic(), (f"{W}.kv_cache.capacity", {"type": "fixed", "blocks": None})), f"{W}.kv_cache.capacity"),
    ("fixed rejects memory_fraction", edit(synthetic(), (f"{W}.kv_cache.capacity", {"type": "fixed", "blocks": 9, "memory_fraction": 0.5})), f"{W}.kv_cache.capacity.memory_fraction"),
    ("fixed blocks zero", edit(synthetic(), (f"{W}.kv_cache.capacity", {"type": "fixed", "blocks": 0})), f"{W}.kv_cache.capacity.blocks"),
    ("default rejects blocks", edit(synthetic(), (f"{W}.kv_cache.capacity", {"type": "default", "blocks": 9})), f"{W}.kv_cache.capacity.blocks"),
    ("untyped capacity is default", edit(synthetic(), (f"{W}.kv_cache.capacity", {"blocks": 9})), f"{W}.kv_cache.capacity.blocks"),
    ("memory_fraction zero", edit(synthetic(), (f"{W}.kv_cache.capacity", {"memory_fraction": 0})), f"{W}.kv_cache.capacity.memory_fraction"),
    ("memory_fraction above 1", edit(synthetic(), (f"{W}.kv_cache.capacity", {"memory_fraction": 1.1})), f"{W}.kv_cache.capacity.memory_fraction"),
    ("capacity type", edit(synthetic(), (f"{W}.kv_cache.capacity", {"type": "auto"})), f"{W}.kv_cache.capacity.type"),
    ("capacity unknown key", edit(synthetic(), (f"{W}.kv_cache.capacity", {"type": "fixed", "blocks": 9, "x": 1})), f"{W}.kv_cache.capacity.x"),
    ("fixed timing needs decode_ms", edit(synthetic(), (f"{W}.timing", {"type": "fixed", "prefill_ms": 1})), f"{W}.timing"),
    ("fixed timing negative", edit(synthetic(), (f"{W}.timing", {"type": "fixed", "prefill_ms": -1, "decode_ms": 1})), f"{W}.timing.prefill_ms"),
    ("fixed timing nan", edit(synthetic(), (f"{W}.timing", {"type": "fixed", "prefill_ms": float("nan"), "decode_ms": 1})), f"{W}.timing.prefill_ms"),
    ("polynomial rejects prefill_ms", edit(synthetic(), (f"{W}.timing", {"type": "polynomial", "prefill_ms": 1})), f"{W}.timing.prefill_ms"),
    ("untyped timing is default", edit(synthetic(), (f"{W}.timing", {"prefill_ms": 1, "decode_ms": 1})), f"{W}.timing.prefill_ms"),
    ("timing type", edit(synthetic(), (f"{W}.timing", {"type": "aic"})), f"{W}.timing.type"),
    ("timing null", edit(synthetic(), (f"{W}.timing", None)), f"{W}.timing"),
    ("startup negative", edit(synthetic(), (f"{W}.startup_seconds", -1)), f"{W}.startup_seconds"),
    ("worker unknown key", edit(synthetic(), (f"{W}.foo", 1)), f"{W}.foo"),
    # traffic.source
    ("source type missing", edit(synthetic(), ("traffic.source", {"input_tokens": 5})), "traffic.source.type"),
    ("source type unknown", edit(synthetic(), ("traffic.source", {"type": "foo"})), "traffic.source.type"),
    ("input_tokens zero", edit(synthetic(), ("traffic.source.input_tokens", 0)), "traffic.source.input_tokens"),
    ("input_tokens float", edit(synthetic(), ("traffic.source.input_tokens", 64.0)), "traffic.source.input_tokens"),
    ("synthetic rejects session", edit(synthetic(), ("traffic.source.session", {})), "traffic.source.session"),
    ("session required", edit(session(), ("traffic.source.session", DELETE)), "traffic.source.session"),
    ("turns below 2", edit(session(), ("traffic.source.session.turns", 1)), "traffic.source.session.turns"),
    ("ratio without groups", edit(session(), ("traffic.source.session.shared_prefix_ratio", 0.5)), "traffic.source.session.prefix_groups"),
    ("ratio above 1", edit(session(), ("traffic.source.session", {"shared_prefix_ratio": 1.1, "prefix_groups": 1})), "traffic.source.session.shared_prefix_ratio"),
    ("delay string", edit(session(), ("traffic.source.session.inter_turn_delay_ms", "5")), "traffic.source.session.inter_turn_delay_ms"),
    ("paths empty", edit(trace(), ("traffic.source.paths", [])), "traffic.source.paths"),
    ("paths empty string", edit(trace(), ("traffic.source.paths", ["a", ""])), "traffic.source.paths"),
    ("paths not a list", edit(trace(), ("traffic.source.paths", "t.jsonl")), "traffic.source.paths"),
    ("paths item not a string", edit(trace(), ("traffic.source.paths", [5])), "traffic.source.paths[0]"),
    ("two paths mooncake", edit(trace(), ("traffic.source.paths", ["a", "b"])), "traffic.source.paths"),
    ("trace format", edit(trace(), ("traffic.source.format", "jsonl")), "traffic.source.format"),
    ("trace block_size float", edit(trace(), ("traffic.source.block_size", 512.0)), "traffic.source.block_size"),
    # traffic.load
    ("load null", edit(synthetic(), ("traffic.load", None)), "traffic.load"),
    ("load missing", edit(synthetic(), ("traffic.load", DELETE)), "traffic.load"),
    ("load type", edit(synthetic(), ("traffic.load", {"type": "closed"})), "traffic.load.type"),
    ("concurrency zero", edit(synthetic(), ("traffic.load.concurrency", 0)), "traffic.load.concurrency"),
    ("concurrency null", edit(synthetic(), ("traffic.load.concurrency", None)), "traffic.load.concurrency"),
    ("concurrency rejects seed", edit(synthetic(), ("traffic.load.seed", 42)), "traffic.load.seed"),
    ("concurrency rejects speedup", edit(synthetic(), ("traffic.load.speedup", 2)), "traffic.load.speedup"),
    ("poisson rejects concurrency", edit(synthetic(), ("traffic.load", {"type": "poisson", "requests_per_second": 5, "concurrency": 2})), "traffic.load.concurrency"),
    ("poisson needs rate", edit(synthetic(), ("traffic.load", {"type": "poisson"})), "traffic.load.requests_per_second"),
    ("poisson session rate on synthetic", edit(synthetic(), ("traffic.load", {"type": "poisson", "sessions_per_second": 5})), "traffic.load.sessions_per_second"),
    ("poisson request rate on sessions", edit(session(), ("traffic.load", {"type": "poisson", "requests_per_second": 5})), "traffic.load.requests_per_second"),
    ("poisson seed negative", edit(synthetic(), ("traffic.load", {"type": "poisson", "requests_per_second": 5, "seed": -1})), "traffic.load.seed"),
    ("poisson rate string", edit(synthetic(), ("traffic.load", {"type": "poisson", "requests_per_second": "5"})), "traffic.load.requests_per_second"),
    ("constant_rate rejects seed", edit(synthetic(), ("traffic.load", {"type": "constant_rate", "requests_per_second": 5, "seed": 1})), "traffic.load.seed"),
    ("constant_rate needs rate", edit(synthetic(), ("traffic.load", {"type": "constant_rate"})), "traffic.load.requests_per_second"),
    ("speedup zero", edit(trace(), ("traffic.load.speedup", 0)), "traffic.load.speedup"),
    ("trace_timestamps rejects concurrency", edit(trace(), ("traffic.load.concurrency", 2)), "traffic.load.concurrency"),
    ("synthetic rejects trace_timestamps", edit(synthetic(), ("traffic.load", {"type": "trace_timestamps"})), "traffic.load.type"),
    ("trace rejects poisson", edit(trace(), ("traffic.load", {"type": "poisson", "requests_per_second": 5})), "traffic.load.type"),
    ("agentic needs trace_timestamps", edit(trace("agentic_mooncake"), ("traffic.load", {"type": "concurrency"})), "traffic.load.type"),
    ("applied_compute_agentic needs concurrency", trace("applied_compute_agentic"), "traffic.load.type"),
    # traffic.stop
    ("synthetic needs stop", edit(synthetic(), ("traffic.stop", DELETE)), "traffic.stop"),
    ("synthetic stop empty", edit(synthetic(), ("traffic.stop", {})), "traffic.stop"),
    ("two count stops", edit(synthetic(), ("traffic.stop", {"requests": 3, "requests_per_load_unit": 2})), "traffic.stop"),
    ("synthetic rejects session stop", edit(synthetic(), ("traffic.stop", {"sessions": 2})), "traffic.stop.sessions"),
    ("sessions reject request stop", edit(session(), ("traffic.stop", {"requests": 2})), "traffic.stop.requests"),
    ("synthetic rejects time cap", edit(synthetic(), ("traffic.stop.max_virtual_time_seconds", 5)), "traffic.stop.max_virtual_time_seconds"),
    ("trace rejects request stop", edit(trace(), ("traffic.stop", {"requests": 2})), "traffic.stop.requests"),
    ("agentic rejects time cap", edit(trace("agentic_mooncake"), ("traffic.stop", {"max_virtual_time_seconds": 5})), "traffic.stop.max_virtual_time_seconds"),
    ("requests float", edit(synthetic(), ("traffic.stop.requests", 3.0)), "traffic.stop.requests"),
    ("ratio zero", edit(synthetic(), ("traffic.stop", {"requests_per_load_unit": 0})), "traffic.stop.requests_per_load_unit"),
    ("time cap infinite", edit(trace(), ("traffic.stop", {"max_virtual_time_seconds": float("inf")})), "traffic.stop.max_virtual_time_seconds"),
    ("stop unknown key", edit(synthetic(), ("traffic.stop.x", 1)), "traffic.stop.x"),
    ("traffic null", edit(synthetic(), ("traffic", None)), "traffic"),
    ("traffic empty", edit(synthetic(), ("traffic", {})), "traffic.source"),
    # cross-section
    ("mooncake-delta disaggregated", edit(disaggregated(), ("traffic", trace("mooncake-delta")["traffic"])), "traffic.source.format"),
    ("agentic disaggregated", edit(disaggregated(), ("traffic", trace("agentic_mooncake")["traffic"])), "traffic.source.format"),
    # evaluation
    ("ttft without itl", edit(synthetic(), ("evaluation", {"sla": {"ttft_ms": 10}})), "evaluation.sla.itl_ms"),
    ("itl without ttft", edit(synthetic(), ("evaluation", {"sla": {"itl_ms": 10}})), "evaluation.sla.ttft_ms"),
    ("e2e with ttft/itl", edit(synthetic(), ("evaluation", {"sla": {"ttft_ms": 1, "itl_ms": 1, "e2e_ms": 1}})), "evaluation.sla.e2e_ms"),
    ("sla zero", edit(synthetic(), ("evaluation", {"sla": {"e2e_ms": 0}})), "evaluation.sla.e2e_ms"),
    ("sla unknown key", edit(synthetic(), ("evaluation", {"sla": {"tpot_ms": 3}})), "evaluation.sla.tpot_ms"),
    ("evaluation null", edit(synthetic(), ("evaluation", None)), "evaluation"),
    # top level
    ("optimization section", edit(synthetic(), ("optimization", {})), "optimization"),
    ("optimizer section", edit(synthetic(), ("optimizer", None)), "optimizer"),
    ("unknown adapter section", edit(synthetic(), ("output", {"dir": "x"})), "engine.output"),
    ("adapter section not a mapping", edit(synthetic(), ("metrics", 5)), "metrics"),
    ("router section not a mapping", edit(synthetic(), ("router", 5)), "router"),
    ("unknown router policy", edit(synthetic(), ("router", {"policy": "fastest"})), "router.policy"),
    ("negative router credit", edit(synthetic(), ("router", {"overlap_score_credit": -1})), "router.overlap_score_credit"),
]


@pytest.mark.parametrize(("config", "path"), [pytest.param(c, p, id=i) for i, c, p in BAD_CONFIGS])
def test_bad_config_is_rejected_naming_the_key(config: dict[str, Any], path: str) -> None:
    message = rejected(config)
    assert path in message
    for internal in ("pydantic", "https://", "Capacity", "Timing", "Load", "Source", "[type="):
        assert internal not in message


def test_bad_table_is_large() -> None:
    assert len(BAD_CONFIGS) >= 40


def test_several_problems_are_reported_together() -> None:
    message = rejected(edit(synthetic(), ("engine.foo", 1), ("traffic.load.concurrency", 0), ("output", {})))
    lines = message.splitlines()
    assert any(line.strip().startswith("engine.foo: unknown key") for line in lines)
    assert any(line.strip().startswith("traffic.load.concurrency: must be > 0 (got 0)") for line in lines)
    assert any("engine.output" in line for line in lines)


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        (1, "top-level key 1"),
        ("", "top-level key ''"),
        ("a.b", "top-level key 'a.b'"),
        (None, "top-level key null"),
    ],
)
def test_top_level_keys_must_be_plain_names(key: Any, expected: str) -> None:
    config = synthetic()
    config[key] = {}
    assert expected in rejected(config)


def test_messages_use_readable_rules() -> None:
    assert "traffic.load.requests_per_second: must be > 0 (got -1)" in rejected(
        edit(synthetic(), ("traffic.load", {"type": "poisson", "requests_per_second": -1}))
    )
    assert f"{W}.kv_cache.capacity: 'blocks' (or 'bytes') is required when type is 'fixed'" in rejected(
        edit(synthetic(), (f"{W}.kv_cache.capacity", {"type": "fixed"}))
    )
    assert "traffic.source.foo: unknown key" in rejected(edit(synthetic(), ("traffic.source.foo", 1)))
    assert f"{W}.kv_cache.capacity.blocks: must be an integer (got 10.0)" in rejected(
        edit(synthetic(), (f"{W}.kv_cache.capacity.blocks", 10.0))
    )


# ------------------------------------------------------------------------------------------
# Accepted edge cases (the reference accepts them too)
# ------------------------------------------------------------------------------------------

ACCEPTED: list[tuple[str, dict[str, Any]]] = [
    ("hardware AUTO (only exact 'auto' is refused)", edit(synthetic(), ("engine.hardware", "AUTO"))),
    ("whitespace model", edit(synthetic(), ("engine.model", " "))),
    ("empty backend_version", edit(synthetic(), ("engine.backend_version", ""))),
    ("null backend_version", edit(synthetic(), ("engine.backend_version", None))),
    ("kv_transfer null in aggregated", edit(synthetic(), ("engine.kv_transfer", None))),
    ("sglang disaggregated", edit(disaggregated(), ("engine.backend", "sglang"))),
    ("sglang block_size 1", edit(synthetic(), ("engine.backend", "sglang"), (f"{W}.kv_cache.block_size", 1))),
    ("vllm odd block size", edit(synthetic(), (f"{W}.kv_cache.block_size", 3))),
    ("block_size null", edit(synthetic(), (f"{W}.kv_cache.block_size", None))),
    ("prefix_caching as YAML-ish string", edit(synthetic(), (f"{W}.kv_cache.prefix_caching", "yes"))),
    ("prefix_caching as 1", edit(synthetic(), (f"{W}.kv_cache.prefix_caching", 1))),
    ("prefill_ms as string", edit(synthetic(), (f"{W}.timing.prefill_ms", "1e1"))),
    ("decode_ms as bool", edit(synthetic(), (f"{W}.timing.decode_ms", True))),
    ("zero fixed timing", edit(synthetic(), (f"{W}.timing", {"type": "fixed", "prefill_ms": 0, "decode_ms": 0}))),
    ("polynomial with null prefill_ms", edit(synthetic(), (f"{W}.timing", {"type": "polynomial", "prefill_ms": None}))),
    ("startup_seconds as string", edit(synthetic(), (f"{W}.startup_seconds", "1"))),
    ("memory_fraction 1 (int)", edit(synthetic(), (f"{W}.kv_cache.capacity", {"memory_fraction": 1}))),
    ("fixed with null memory_fraction", edit(synthetic(), (f"{W}.kv_cache.capacity", {"type": "fixed", "blocks": 9, "memory_fraction": None}))),
    ("default with null blocks", edit(synthetic(), (f"{W}.kv_cache.capacity", {"type": "default", "blocks": None}))),
    ("moe parallelism", edit(synthetic(), (f"{W}.parallelism", {"pipeline": 4, "moe_tensor": 2, "moe_expert": 2}))),
    ("load without type", edit(synthetic(), ("traffic.load", {"concurrency": 3}))),
    ("load defaults", edit(synthetic(), ("traffic.load", {"type": "concurrency"}))),
    ("poisson with null foreign keys", edit(synthetic(), ("traffic.load", {"type": "poisson", "requests_per_second": 5, "concurrency": None, "sessions_per_second": None, "seed": None}))),
    ("poisson u64 seed", edit(synthetic(), ("traffic.load", {"type": "poisson", "requests_per_second": 5, "seed": 2**64 - 1}))),
    ("trace_timestamps null speedup", edit(trace(), ("traffic.load.speedup", None))),
    ("source defaults", edit(synthetic(), ("traffic.source", {"type": "synthetic"}))),
    ("empty session", edit(session(), ("traffic.source.session", {}))),
    ("groups without ratio", edit(session(), ("traffic.source.session", {"prefix_groups": 3}))),
    ("ratio 1", edit(session(), ("traffic.source.session", {"shared_prefix_ratio": 1, "prefix_groups": 1}))),
    ("sessions per load unit", edit(session(), ("traffic.stop", {"sessions_per_load_unit": 1}))),
    ("null count next to the real one", edit(synthetic(), ("traffic.stop", {"requests": None, "requests_per_load_unit": 1}))),
    ("integer ratio", edit(synthetic(), ("traffic.stop", {"requests_per_load_unit": 2}))),
    ("trace under concurrency", edit(trace(), ("traffic.load", {"type": "concurrency"}))),
    ("trace empty stop", edit(trace(), ("traffic.stop", {}))),
    ("trace null stop", edit(trace(), ("traffic.stop", None))),
    ("trace time cap", edit(trace(), ("traffic.stop", {"max_virtual_time_seconds": 0.5}))),
    ("trace null block_size", edit(trace(), ("traffic.source.block_size", None))),
    ("dynamo with two paths", edit(trace("dynamo"), ("traffic.source.paths", ["a", "b"]))),
    ("dynamo disaggregated", edit(disaggregated(), ("traffic", trace("dynamo")["traffic"]))),
    ("mooncake disaggregated", edit(disaggregated(), ("traffic", trace()["traffic"]))),
    ("applied_compute_agentic disaggregated", edit(disaggregated(), ("traffic", edit(trace("applied_compute_agentic"), ("traffic.load", {"type": "concurrency"}))["traffic"]))),
    ("agentic with empty stop", edit(trace("agentic_mooncake"), ("traffic.stop", {}))),
    ("empty sla", edit(synthetic(), ("evaluation", {"sla": {}}))),
    ("null sla", edit(synthetic(), ("evaluation", {"sla": None}))),
    ("empty evaluation", edit(synthetic(), ("evaluation", {}))),
    ("e2e sla", edit(synthetic(), ("evaluation", {"sla": {"e2e_ms": 100}}))),
    ("traffic omitted", edit(synthetic(), ("traffic", DELETE))),
]


@pytest.mark.parametrize("config", [pytest.param(c, id=i) for i, c in ACCEPTED])
def test_edge_case_is_accepted(config: dict[str, Any]) -> None:
    assert isinstance(parse_config(config), SimConfig)


def test_lax_fields_are_converted() -> None:
    config = parse_config(edit(synthetic(), (f"{W}.timing.prefill_ms", "1e1"), (f"{W}.startup_seconds", "2"), (f"{W}.kv_cache.prefix_caching", "off")))
    worker = config.engine.roles["aggregated"]
    assert isinstance(worker.timing, FixedTiming)
    assert worker.timing.prefill_ms == 10.0
    assert worker.startup_seconds == 2.0
    assert worker.kv_cache.prefix_caching is False


def test_empty_sla_means_no_sla() -> None:
    assert parse_config(edit(synthetic(), ("evaluation", {"sla": {}}))).evaluation.sla is None
    sla = parse_config(edit(synthetic(), ("evaluation", {"sla": {"ttft_ms": 60, "itl_ms": 20}}))).evaluation.sla
    assert sla is not None and (sla.ttft_ms, sla.itl_ms, sla.e2e_ms) == (60.0, 20.0, None)


# ------------------------------------------------------------------------------------------
# Defaults
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("backend", "block_size", "fraction"), [("vllm", 64, 0.9), ("sglang", 1, 0.88), ("trtllm", 32, 0.9)])
def test_backend_defaults(backend: str, block_size: int, fraction: float) -> None:
    config = parse_config(edit(synthetic(), ("engine.backend", backend), (f"{W}.kv_cache", {})))
    kv = config.engine.roles["aggregated"].kv_cache
    assert config.engine.block_size("aggregated") == block_size
    assert isinstance(kv.capacity, DefaultCapacity)
    assert kv.capacity.memory_fraction_for(config.engine.backend) == fraction


def test_explicit_memory_fraction_wins() -> None:
    config = parse_config(edit(synthetic(), (f"{W}.kv_cache.capacity", {"memory_fraction": 0.5})))
    capacity = config.engine.roles["aggregated"].kv_cache.capacity
    assert isinstance(capacity, DefaultCapacity) and capacity.memory_fraction_for("sglang") == 0.5


def test_max_sequences_per_role() -> None:
    config = parse_config(edit(disaggregated(), ("engine.workers.decode.scheduler", {"max_sequences": 7})))
    prefill, decode = config.engine.roles["prefill"], config.engine.roles["decode"]
    assert prefill.scheduler.max_sequences is None
    assert prefill.scheduler.max_sequences_for("prefill") == 1
    assert prefill.scheduler.max_sequences_for("aggregated") == 256
    assert prefill.scheduler.max_sequences_for("decode") == 256
    assert decode.scheduler.max_sequences_for("decode") == 7
    assert decode.scheduler.max_sequences_for("prefill") == 7


def test_worker_defaults() -> None:
    config = parse_config(edit(synthetic(), (W, {})))
    worker = config.engine.roles["aggregated"]
    assert isinstance(worker.timing, DefaultTiming)
    assert isinstance(worker.kv_cache.capacity, DefaultCapacity)
    assert worker.kv_cache.prefix_caching is True
    assert worker.scheduler.max_batched_tokens == 8192
    assert worker.startup_seconds == 0.0
    p = worker.parallelism
    assert (p.replicas, p.tensor, p.pipeline, p.attention_data, p.moe_tensor, p.moe_expert) == (1,) * 6
    engine = config.engine
    assert (engine.mode, engine.backend, engine.backend_version) == ("aggregated", "vllm", None)
    assert parse_config(edit(synthetic(), ("engine.context_length", DELETE))).engine.context_length == "max"


def test_kv_transfer_defaults() -> None:
    transfer = parse_config(edit(disaggregated(), ("engine.kv_transfer", {}))).engine.kv_transfer
    assert transfer is not None
    assert (transfer.bytes_per_token, transfer.bandwidth_gb_per_second, transfer.timing_mode) == ("auto", None, "destination_missing")
    assert parse_config(disaggregated()).engine.kv_transfer is None


def test_default_traffic_when_omitted() -> None:
    traffic = parse_config(edit(synthetic(), ("traffic", DELETE))).traffic
    assert isinstance(traffic.source, SyntheticSource)
    assert (traffic.source.input_tokens, traffic.source.output_tokens) == (1024, 128)
    assert isinstance(traffic.load, ConcurrencyLoad) and traffic.load.concurrency == 10
    assert request_count(traffic) == 100


def test_load_and_source_defaults() -> None:
    traffic = parse_config(edit(synthetic(), ("traffic.load", {"type": "poisson", "requests_per_second": 8}))).traffic
    assert isinstance(traffic.load, PoissonLoad) and traffic.load.seed == 42 and traffic.load.rate == 8.0
    load = parse_config(edit(synthetic(), ("traffic.load", {}))).traffic.load
    assert isinstance(load, ConcurrencyLoad) and load.concurrency == 10
    src = parse_config(edit(session(), ("traffic.source.session", {}))).traffic.source
    assert src.type == "synthetic-session"
    assert (src.new_input_tokens_per_turn, src.output_tokens_per_turn) == (1024, 128)
    s = src.session
    assert (s.turns, s.shared_prefix_ratio, s.prefix_groups, s.inter_turn_delay_ms) == (4, 0.0, 0, 0.0)
    speedup = parse_config(edit(trace(), ("traffic.load.speedup", None))).traffic.load
    assert speedup.type == "trace_timestamps" and speedup.speedup == 1.0


@pytest.mark.parametrize(("fmt", "block_size", "expected"), [("mooncake", None, 512), ("mooncake-delta", None, 512), ("dynamo", None, None), ("dynamo", 16, 16), ("mooncake", 16, 16)])
def test_trace_block_size(fmt: str, block_size: int | None, expected: int | None) -> None:
    source = parse_config(edit(trace(fmt), ("traffic.source.block_size", block_size))).traffic.source
    assert isinstance(source, TraceSource) and source.trace_block_size == expected


# ------------------------------------------------------------------------------------------
# Relative stops (reference values; Python round = half to even)
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("load", "ratio", "expected"),
    [
        ({"type": "concurrency", "concurrency": 2}, 1.25, 2),  # 2.5 -> 2
        ({"type": "concurrency", "concurrency": 2}, 1.75, 4),  # 3.5 -> 4
        ({"type": "concurrency", "concurrency": 2}, 0.1, 1),  # 0.2 -> 0 -> at least 1
        ({"type": "concurrency", "concurrency": 1}, 2.5, 2),
        ({"type": "concurrency", "concurrency": 1}, 3.5, 4),
        ({"type": "concurrency", "concurrency": 10}, 2, 20),
        ({"type": "poisson", "requests_per_second": 5}, 0.5, 2),  # 2.5 -> 2
        ({"type": "constant_rate", "requests_per_second": 5}, 0.7, 4),  # 3.5 -> 4
    ],
)
def test_relative_request_stop(load: dict[str, Any], ratio: float, expected: int) -> None:
    config = parse_config(edit(synthetic(), ("traffic.load", load), ("traffic.stop", {"requests_per_load_unit": ratio})))
    assert request_count(config.traffic) == expected


@pytest.mark.parametrize(
    ("load", "ratio", "expected"),
    [({"type": "concurrency", "concurrency": 2}, 1.5, 3), ({"type": "poisson", "sessions_per_second": 5}, 0.5, 2), ({"type": "concurrency", "concurrency": 3}, 0.5, 2)],
)
def test_relative_session_stop(load: dict[str, Any], ratio: float, expected: int) -> None:
    config = parse_config(edit(session(), ("traffic.load", load), ("traffic.stop", {"sessions_per_load_unit": ratio})))
    assert request_count(config.traffic) == expected


def test_request_count_absolute_and_trace() -> None:
    assert request_count(parse_config(synthetic()).traffic) == 3
    assert request_count(parse_config(session()).traffic) == 2
    assert request_count(parse_config(trace()).traffic) is None


# ------------------------------------------------------------------------------------------
# --set overrides
# ------------------------------------------------------------------------------------------


def test_overrides_apply_in_order_and_parse_yaml() -> None:
    data = apply_overrides(
        synthetic(),
        [
            "traffic.stop.requests=0",
            "traffic.stop.requests=7",
            "traffic.load={type: poisson, requests_per_second: 8}",
            "evaluation.sla.e2e_ms=100",  # creates evaluation and evaluation.sla
            "engine.backend_version=",  # empty YAML is null
            "engine.model=a=b",  # only the first '=' splits
        ],
    )
    assert data["traffic"]["stop"] == {"requests": 7}
    assert data["traffic"]["load"] == {"type": "poisson", "requests_per_second": 8}
    assert data["evaluation"] == {"sla": {"e2e_ms": 100}}
    assert data["engine"]["backend_version"] is None
    assert data["engine"]["model"] == "a=b"
    config = parse_config(data)
    assert request_count(config.traffic) == 7


def test_overrides_do_not_mutate_input() -> None:
    original = synthetic()
    before = copy.deepcopy(original)
    apply_overrides(original, ["traffic.stop.requests=9", "engine.workers.aggregated.scheduler.max_sequences=3"])
    assert original == before


def test_override_values_are_typed_by_yaml() -> None:
    assert "engine.context_length" in rejected(apply_overrides(synthetic(), ["engine.context_length='1000'"]))
    config = parse_config(apply_overrides(synthetic(), ["engine.context_length=1000"]))
    assert config.engine.context_length == 1000


@pytest.mark.parametrize(
    ("override", "fragment"),
    [
        ("traffic.stop.requests", "expected PATH=YAML_VALUE"),
        ("traffic..requests=4", "empty key"),
        (".traffic=4", "empty key"),
        ("traffic.=4", "empty key"),
        ("=4", "empty key"),
        ("traffic.source.paths.0=x", "sequence indexes are unsupported"),
        ("traffic.1.5=x", "sequence indexes are unsupported"),
        ("0=x", "sequence indexes are unsupported"),
        ("traffic.²=x", "sequence indexes are unsupported"),
        ("traffic.stop.requests.x=4", "crosses the non-mapping value at 'traffic.stop.requests'"),
        ("optimization.x=1", "not in the schema"),
        ("optimizer=1", "not in the schema"),
        ("engine.backend_version=[1,", "invalid YAML value for --set 'engine.backend_version'"),
    ],
)
def test_bad_override_is_rejected(override: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        apply_overrides(synthetic(), [override])
    assert fragment in str(info.value)


def test_override_cannot_cross_a_replaced_value() -> None:
    with pytest.raises(ConfigError, match="crosses"):
        apply_overrides(synthetic(), ["traffic.stop=5", "traffic.stop.requests=3"])
    with pytest.raises(ConfigError, match="crosses"):
        apply_overrides(synthetic(), ["traffic.stop=null", "traffic.stop.requests=3"])


@pytest.mark.parametrize(
    ("override", "fragment"),
    [
        ("engine.foo=1", "engine.foo: unknown key"),
        ("traffic.-1=x", "traffic.-1: unknown key"),
        ("output.dir=x", "engine.output"),
        ("engine=null", "engine: must be a mapping"),
        ("traffic.stop=null", "traffic.stop: is required"),
    ],
)
def test_override_results_are_validated(override: str, fragment: str) -> None:
    assert fragment in rejected(apply_overrides(synthetic(), [override]))


# ------------------------------------------------------------------------------------------
# Files
# ------------------------------------------------------------------------------------------


def write(tmp_path: Path, text: str, name: str = "config.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "must be one YAML mapping"),
        ("# only a comment\n", "must be one YAML mapping"),
        ("- a\n", "must be one YAML mapping"),
        ("5\n", "must be one YAML mapping"),
        ("engine: [1,\n", "malformed YAML"),
        ("engine: {}\n---\ntraffic: {}\n", "malformed YAML"),
        ("engine:\n\tmodel: x\n", "malformed YAML"),
    ],
)
def test_unusable_file_is_rejected_naming_it(tmp_path: Path, text: str, fragment: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(path) in str(info.value) and fragment in str(info.value)


def test_unreadable_file_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="could not read"):
        load_config(tmp_path / "missing.yaml")
    with pytest.raises(ConfigError, match="could not read"):
        load_config(tmp_path)


def test_file_errors_name_the_file_and_key(tmp_path: Path) -> None:
    path = write(tmp_path, yaml.safe_dump(edit(synthetic(), ("traffic.load.concurrency", 0))))
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(path) in str(info.value) and "traffic.load.concurrency" in str(info.value)


def test_load_config_applies_overrides(tmp_path: Path) -> None:
    path = write(tmp_path, yaml.safe_dump(synthetic()))
    config = load_config(path, ["traffic.stop.requests=11", "engine.backend=sglang"])
    assert request_count(config.traffic) == 11 and config.engine.block_size("aggregated") == 1
    with pytest.raises(ConfigError, match="sequence indexes"):
        load_config(path, ["engine.workers.0=1"])


def test_duplicate_keys_are_an_error_unless_the_last_may_win(tmp_path: Path) -> None:
    """servesim refuses a repeated key; `allow_duplicate_keys` restores the reference's last-wins."""
    text = yaml.safe_dump(synthetic()) + "evaluation: {}\nevaluation: {sla: {e2e_ms: 5}}\n"
    path = write(tmp_path, text)
    line = text.count("\n")
    with pytest.raises(ConfigError, match=f"{path}:{line}: duplicate key 'evaluation' \\(first on line {line - 1}\\)"):
        load_config(path)
    sla = load_config(path, allow_duplicate_keys=True).evaluation.sla
    assert sla is not None and sla.e2e_ms == 5.0


def test_parse_config_keeps_relative_paths_without_base_dir() -> None:
    source = parse_config(edit(trace(), ("traffic.source.paths", ["t.jsonl"]))).traffic.source
    assert isinstance(source, TraceSource) and source.paths == ["t.jsonl"]


# ------------------------------------------------------------------------------------------
# Runtime-only rejections, immutability, documentation
# ------------------------------------------------------------------------------------------


def test_runtime_rejections() -> None:
    config = parse_config(edit(disaggregated(), ("engine.workers.prefill.parallelism", {"attention_data": 2})))
    problems = runtime_rejections(config)
    assert any(p.startswith("engine.workers.prefill.parallelism.attention_data") for p in problems)


def test_infinite_and_absurd_durations_are_config_errors() -> None:
    """The reference accepts them and fails once the run starts (exit 1); servesim refuses them
    in the schema (exit 2), as finite values up to MAX_MS."""
    with pytest.raises(ConfigError) as error:
        parse_config(edit(disaggregated(), ("engine.workers.decode.startup_seconds", float("inf")),
                          ("engine.workers.decode.timing.prefill_ms", "1e300")))
    assert "engine.workers.decode.startup_seconds: must be a finite number (got inf)" in str(error.value)
    assert "engine.workers.decode.timing.prefill_ms: must be <= 1000000000000 (got '1e300')" in str(error.value)
    seed = parse_config(edit(synthetic(), ("traffic.load", {"type": "poisson", "requests_per_second": 5, "seed": 2**64})))
    assert runtime_rejections(seed) == [f"traffic.load.seed: must fit in 64 bits (got {2**64})"]
    assert runtime_rejections(parse_config(edit(synthetic(), (f"{W}.parallelism.attention_data", 2)))) == []


def test_models_are_frozen() -> None:
    config = parse_config(synthetic())
    with pytest.raises(pydantic.ValidationError):
        config.engine.model = "x"  # type: ignore[misc]


def test_models_accept_instances() -> None:
    config = parse_config(synthetic())
    again = SimConfig(engine=config.engine, traffic=config.traffic)
    assert again == config
    worker = config.engine.roles["aggregated"]
    assert isinstance(worker.kv_cache.capacity, FixedCapacity) and worker.kv_cache.capacity.blocks == 1000


def _models() -> list[type[pydantic.BaseModel]]:
    """Every section model the document module exposes (the sections live in their own modules)."""
    return [m for m in vars(schema).values() if isinstance(m, type) and issubclass(m, pydantic.BaseModel)
            and m.__module__.startswith("servesim.config.") and m is not schema.SchemaModel]


@pytest.mark.parametrize("model", _models(), ids=lambda m: m.__name__)
def test_every_field_is_documented(model: type[pydantic.BaseModel]) -> None:
    assert model.__doc__
    for name in model.model_fields:
        assert field_doc(model, name), f"{model.__name__}.{name} has no attribute docstring"


def test_sections_are_the_sim_config_fields() -> None:
    assert schema.SECTIONS == ("engine", "traffic", "evaluation", "router", "planner", "compat")
