"""Which replay path a run takes: the one place that decides it.

One vLLM pass is implemented four ways — the plain walk over every running request, the decode
cohort advanced implicitly (`engine.vllm.cohort`), decode-only passes run ahead to a horizon
(`engine.vllm.ahead`, also SGLang's), and the steady lane of counts per pass (`engine.vllm.steady`) —
and a run is replayed by one of three loops: the steady replay (`cluster.steady`), one worker at a
time (`runtime.isolated`) or the shared clock (`runtime.replay`). Each fast path is exact only on
the runs its invariants hold for; `decide` says which paths a run may take, with the reason each
refused one is refused, and every site that branches on a fast path asks the `ReplayPaths` it
returns. What a pass finds at run time (a cohort that no longer fits, a steady pass of no
duration) is still checked where it happens: those are the paths' own exits, not gates.

Every config knob is classified here too (`KNOBS`: which paths it can refuse, and how), and a
test fails when a knob is not.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from servesim.engine.pass_time import MixedPassTiming
from servesim.engine.vllm.cohort import cohort_refusal

if TYPE_CHECKING:
    from servesim.build import LoweredRun, PoolSpec
    from servesim.traffic.driver import RequestDriver

COHORT = "decode cohort"
"""Steady decoders advanced implicitly (`engine.vllm.cohort`), on vLLM-core ranks."""
RUN_AHEAD = "run ahead"
"""A lone decode-only rank runs passes back to back up to the horizon (`Worker.start_pass`)."""
RUN_ON = "run on"
"""In the per-worker replay, a full pass may open a run ahead."""
BULK_ROUTING = "bulk routing"
"""Requests placed a window at a time without being looked at (`StateFreeRouter.place_many`)."""
ISOLATED = "one worker at a time"
"""The per-worker replay (`runtime.isolated.IsolatedReplay`)."""
STEADY = "steady lane"
"""The replay as counts per pass (`cluster.steady.SteadyReplay`); falls back when a pass leaves
its class."""
SHARED = "shared clock"
"""The general loop (`runtime.replay.ReplayLoop`): no path to decide, always possible."""
PATHS = (COHORT, RUN_AHEAD, RUN_ON, BULK_ROUTING, ISOLATED, STEADY)
"""Every fast path, in the order reports list them."""

STATE_FREE_POLICIES = frozenset({"round_robin", "random"})
"""Router policies whose placements depend only on the order of arrivals (`Router.state_free`)."""
BULK_POLICIES = frozenset({"round_robin", "random"})
"""Router policies that can place requests without seeing them (`StateFreeRouter.places_in_bulk`,
with one rank per worker and no session affinity)."""


@dataclass(frozen=True)
class ReplayPaths:
    """The fast paths one run may take and the reason each other one is refused."""

    allowed: frozenset[str]
    refused: tuple[tuple[str, str], ...]
    """(path, why), in `PATHS` order."""
    cohort_roles: frozenset[str] = frozenset()
    """The pool roles whose ranks keep a decode cohort (the cohort is allowed when one does; a
    role missing here keeps none, `cohort_refusal` says why)."""

    def allows(self, path: str) -> bool:
        """Whether the run may take `path`."""
        return path in self.allowed

    def reason(self, path: str) -> str | None:
        """Why `path` is refused (None: it is allowed)."""
        return next((why for name, why in self.refused if name == path), None)

    def cohort(self, role: str) -> bool:
        """Whether the ranks of the pool of `role` keep a decode cohort."""
        return role in self.cohort_roles

    @property
    def run_ahead(self) -> bool:
        return RUN_AHEAD in self.allowed

    @property
    def run_on(self) -> bool:
        return RUN_ON in self.allowed

    @property
    def bulk_routing(self) -> bool:
        return BULK_ROUTING in self.allowed

    @property
    def isolated(self) -> bool:
        return ISOLATED in self.allowed

    @property
    def steady(self) -> bool:
        return STEADY in self.allowed

    @property
    def loop(self) -> str:
        """The replay loop the run starts with (`STEADY`, `ISOLATED` or `SHARED`)."""
        return STEADY if self.steady else ISOLATED if self.isolated else SHARED

    def provenance(self, loop: str, left_steady: str | None = None) -> dict[str, str]:
        """What the report records (`Report.provenance`): the loop that replayed the run (and why
        it left the steady lane, if it did) and the fast paths that loop could take."""
        if loop == STEADY:
            used: list[str] = []  # no engine rank passes at all
        else:
            per_worker = (RUN_ON, BULK_ROUTING) if loop != ISOLATED else ()
            used = [p for p in (COHORT, RUN_AHEAD, RUN_ON, BULK_ROUTING) if p in self.allowed and p not in per_worker]
        text = loop if left_steady is None else f"{loop} (left the steady lane: {left_steady})"
        return {"replay_loop": text, "fast_paths": ", ".join(used) or "none"}


@dataclass(frozen=True)
class CallFacts:
    """What the caller of a replay adds to the run: `fast=False` refuses every fast path;
    a scaling policy, passes someone watches (time series) and reports that need every record
    whole (agentic traces, disaggregated handoffs)."""

    fast: bool = True
    scaling: bool = False
    watched: bool = False
    whole_records: bool = False


def decide(run: LoweredRun, driver: RequestDriver, call: CallFacts) -> ReplayPaths:
    """The paths `run`, fed by `driver`, may take (see the module). A path that needs another
    one is refused with that one's reason."""
    if not call.fast:
        return _paths(dict.fromkeys(PATHS, "fast paths turned off (fast=False)"), frozenset())
    why: dict[str, str] = {}
    cohorts = {p.role: cohort_refusal(p.rank_config) for p in run.pools}
    roles = frozenset(role for role, reason in cohorts.items() if reason is None)
    if not roles:
        why[COHORT] = "; ".join(sorted({r for r in cohorts.values() if r is not None}))
    _refuse(why, RUN_AHEAD, _run_ahead_refusal(run, driver))
    _refuse(why, ISOLATED, _isolated_refusal(run, driver, call))
    _refuse(why, RUN_ON, why.get(ISOLATED) or why.get(RUN_AHEAD) or _run_on_refusal(run, call))
    _refuse(why, BULK_ROUTING, why.get(ISOLATED) or _bulk_refusal(run))
    _refuse(why, STEADY, why.get(BULK_ROUTING) or _steady_refusal(run, driver, call))
    return _paths(why, roles)


def _paths(why: dict[str, str], cohort_roles: frozenset[str]) -> ReplayPaths:
    allowed = frozenset(p for p in PATHS if p not in why)
    return ReplayPaths(allowed, tuple((p, why[p]) for p in PATHS if p in why), cohort_roles)


def _refuse(why: dict[str, str], path: str, reason: str | None) -> None:
    if reason is not None:
        why[path] = reason



HOST_TIER = "a host KV tier (loads from host memory end on their own clock)"


def _host_tier(run: LoweredRun) -> bool:
    return any(p.rank_config.host is not None for p in run.pools)


def _run_ahead_refusal(run: LoweredRun, driver: RequestDriver) -> str | None:
    """Why no worker may run passes ahead to a horizon."""
    if _host_tier(run):
        return HOST_TIER
    if run.disaggregated:
        return "disaggregated serving (a handoff can change a worker's work at any pass end)"
    if not driver.fixed_arrivals:
        return "arrivals are not fixed in advance (closed loop or multi-turn sessions)"
    if any(p.dp_size > 1 for p in run.pools):
        return "attention DP (ranks pass behind a barrier)"
    return None


def _isolated_refusal(run: LoweredRun, driver: RequestDriver, call: CallFacts) -> str | None:
    """Why workers cannot be replayed one at a time (their timelines could interact)."""
    if _host_tier(run):
        return HOST_TIER
    if run.disaggregated:
        return "disaggregated serving (the pools hand requests to each other)"
    if not driver.fixed_arrivals:
        return "arrivals are not fixed in advance (closed loop or multi-turn sessions)"
    if run.router.policy not in STATE_FREE_POLICIES:
        return f"router policy {run.router.policy} looks at the workers' state"
    if call.scaling:
        return "scaling (the fleet changes while the run goes)"
    if run.traffic.client_timeout_ms is not None:
        return "client timeouts"
    return None


def _run_on_refusal(run: LoweredRun, call: CallFacts) -> str | None:
    """Why a full pass may not open a run ahead in the per-worker replay."""
    if call.watched:
        return "every pass is watched (time series)"
    if run.time_cap_ms is not None:
        return "a time cap (it could cut a full pass's admissions off)"
    return None


def _bulk_refusal(run: LoweredRun) -> str | None:
    """Why requests cannot be placed a window at a time without being seen."""
    if run.router.session_affinity:
        return "session affinity (a session's turns follow its first)"
    if run.router.policy not in BULK_POLICIES:
        return f"router policy {run.router.policy} places requests one by one"
    if any(p.dp_size > 1 for p in run.pools):
        return "attention DP (a request goes to a rank, not a worker)"
    return None


def _steady_refusal(run: LoweredRun, driver: RequestDriver, call: CallFacts) -> str | None:
    """Why the run cannot be replayed as counts per pass."""
    if call.whole_records:
        return "the report needs every request's whole record (agentic trace or disaggregated handoff)"
    if run.time_cap_ms is not None:
        return "a time cap"
    if call.watched:
        return "every pass is watched (time series)"
    plain = getattr(driver, "plain_lengths", None)
    lengths = plain() if plain is not None else None
    if lengths is None:
        return "requests are not all alike (same prompt and output, single turn, nothing shared)"
    return next((r for p in run.pools if (r := steady_pool_refusal(p, *lengths)) is not None), None)


def steady_pool_refusal(pool: PoolSpec, prompt: int, output: int) -> str | None:
    """Why the ranks of `pool` serving only requests of `prompt` → `output` tokens that share no
    prefix are not that simple: another core or admission policy, asynchronous scheduling,
    speculative decoding, fused mixed-pass timing, forward-pass metrics, a state cache, a context
    length or KV pool that all running requests together could reach."""
    config = pool.rank_config
    if config.backend != "vllm":
        return f"backend {config.backend} (the steady lane replays vLLM's core and admission)"
    if config.role != "aggregated":
        return "a disaggregated role"
    if pool.async_scheduling:
        return "asynchronous scheduling"
    if config.speculative is not None or config.record_metrics or isinstance(pool.timing, MixedPassTiming):
        return "speculative decoding, forward-pass metrics or fused mixed passes"
    if config.state_blocks:
        return "a state cache (each request also holds its state blocks)"
    if config.prefill_emits_first_token:
        return "upstream 0.13's pass convention (compat: upstream-0.13)"
    if prompt < 1 or output < 1 or config.max_sequences > config.max_batched_tokens:
        return "max_sequences above max_batched_tokens (or an empty prompt or output)"
    if config.max_model_len is not None and prompt + output > config.max_model_len:
        return "a request would reach the context length"
    blocks = -(-(prompt + output) // config.block_size)
    if config.max_sequences * blocks > config.num_blocks:
        return "the KV pool could bind (max_sequences full requests do not fit)"
    return None


# -- every config knob, classified -------------------------------------------------------------


@dataclass(frozen=True)
class Knob:
    """How one config field bears on the paths: the paths it can refuse, and how."""

    refuses: frozenset[str]
    why: str


def _knob(why: str, *refuses: str) -> Knob:
    return Knob(frozenset(refuses), why)


NEUTRAL = _knob("neutral: changes the numbers, never the path")
KV_SIZE = _knob("sizes the KV pool or a request: the steady lane needs the pool and context never to bind", STEADY)
ARRIVALS = _knob("can make arrivals wait for completions (closed loop, later turns, agentic dependencies)",
                 RUN_AHEAD, ISOLATED, RUN_ON, BULK_ROUTING, STEADY)
ALIKE = _knob("decides whether every request is alike and shares nothing (the steady lane)", STEADY)
CORE = _knob("picks the scheduling core and admission: SGLang keeps no cohort, only vLLM's takes the steady lane",
             COHORT, STEADY)
FUSED = _knob("fused mixed passes or asynchronous scheduling (directly or by default): no steady lane", STEADY)
SCALING = _knob("turns the planner on: the fleet changes, workers interact", ISOLATED, RUN_ON, BULK_ROUTING, STEADY)
TIME_CAP = _knob("a time cap: no steady lane, no full pass opening a run ahead", RUN_ON, STEADY)
TOPOLOGY = _knob("disaggregated serving: pools hand requests over at any pass end",
                 RUN_AHEAD, ISOLATED, RUN_ON, BULK_ROUTING, STEADY)
ROUTER = _knob("a router that looks at the workers (kv_router, least_loaded) or places one by one",
               ISOLATED, RUN_ON, BULK_ROUTING, STEADY)
AFFINITY = _knob("session affinity: placed one by one", BULK_ROUTING, STEADY)
ATTENTION_DP = _knob("attention DP: ranks pass behind a barrier and are routed to one by one",
                     RUN_AHEAD, RUN_ON, BULK_ROUTING, STEADY)
BUDGET = _knob("the steady lane needs max_sequences ≤ max_batched_tokens and the KV pool never to bind", STEADY)
FIFO = _knob("FIFO preemption: a victim could be a cohort member", COHORT)
DRAFTS = _knob("speculative decoding: a burst could touch a cohort member", COHORT, STEADY)
TIMEOUTS = _knob("client timeouts: requests leave on their own clock", ISOLATED, RUN_ON, BULK_ROUTING, STEADY)
HOST = _knob("a host KV tier: its loads end on their own clock (timers of the shared loop)",
             RUN_AHEAD, ISOLATED, RUN_ON, BULK_ROUTING, STEADY)
STATE = _knob("a state cache: each request also holds its state blocks (no cohort, no steady lane)", COHORT, STEADY)

_WORKER = "engine.workers.*."
"""Every role's worker fields (aggregated, prefill, decode) share one classification."""

COMPAT = _knob("compat: omitted, fused passes and async scheduling by default; upstream-0.13, 0.13's pass "
               "convention (the steady lane replays 0.1.0.dev2's): no steady lane", STEADY)

KNOBS: dict[str, Knob] = {
    "compat": COMPAT,
    "engine.aic_systems_path": NEUTRAL,
    "engine.backend": CORE,
    "engine.backend_version": NEUTRAL,
    "engine.context_length": KV_SIZE,
    "engine.hardware": KV_SIZE,
    "engine.kv_transfer.bandwidth_gb_per_second": NEUTRAL,
    "engine.kv_transfer.bytes_per_token": NEUTRAL,
    "engine.kv_transfer.timing_mode": NEUTRAL,
    "engine.mode": TOPOLOGY,
    "engine.model": KV_SIZE,
    **{_WORKER + name: KV_SIZE for name in (
        "kv_cache.block_size", "kv_cache.bytes_per_token", "kv_cache.capacity.blocks", "kv_cache.capacity.bytes",
        "kv_cache.capacity.cuda_graph_reserved_bytes", "kv_cache.capacity.memory_fraction",
        "kv_cache.capacity.type", "parallelism.moe_expert", "parallelism.moe_tensor", "parallelism.pipeline",
        "parallelism.tensor", "timing.gpu_spec.memory_gib")},
    _WORKER + "hardware": KV_SIZE,
    _WORKER + "kv_cache.prefix_caching": NEUTRAL,
    _WORKER + "kv_cache.host_offload.num_host_blocks": HOST,
    _WORKER + "kv_cache.state_cache.bytes_per_request": STATE,
    **{_WORKER + "kv_cache.state_cache." + name: NEUTRAL for name in ("indexer_cache_dtype", "mamba_cache_dtype")},
    **{_WORKER + "kv_cache.g3_offload." + name: NEUTRAL for name in (
        "scope", "num_g3_blocks", "latency_to_first_byte_ms", "read_bandwidth_gbps", "write_bandwidth_gbps",
        "shared_read_bandwidth_gbps", "shared_write_bandwidth_gbps")},
    **{_WORKER + "kv_cache.kvcr." + name: NEUTRAL for name in ("latency_to_first_byte_ms", "bandwidth_gbps")},
    **{_WORKER + "kv_cache.host_offload." + name: NEUTRAL for name in (
        "scope", "d2h_bandwidth_gbps", "h2d_bandwidth_gbps", "shared_d2h_bandwidth_gbps",
        "shared_h2d_bandwidth_gbps", "latency_to_first_byte_ms")},
    _WORKER + "parallelism.attention_data": ATTENTION_DP,
    _WORKER + "parallelism.replicas": NEUTRAL,
    _WORKER + "scheduler.async_scheduling": FUSED,
    _WORKER + "scheduler.max_batched_tokens": BUDGET,
    _WORKER + "scheduler.max_sequences": BUDGET,
    _WORKER + "scheduler.preemption_mode": FIFO,
    _WORKER + "scheduler.prefill_decode_interval": NEUTRAL,
    _WORKER + "scheduler.prefill_schedule_interval": NEUTRAL,  # acts with attention DP only (ATTENTION_DP)
    **{_WORKER + "scheduler.sglang." + name: NEUTRAL for name in (
        "chunked_prefill_size", "clip_max_new_tokens", "max_prefill_tokens", "schedule_conservativeness",
        "schedule_policy")},
    _WORKER + "speculative.num_speculative_tokens": DRAFTS,
    _WORKER + "speculative.acceptance_rates": NEUTRAL,
    _WORKER + "speculative.seed": NEUTRAL,
    _WORKER + "startup_seconds": NEUTRAL,
    _WORKER + "timing.mixed_pass": FUSED,
    _WORKER + "timing.type": FUSED,
    _WORKER + "timing.calibration": FUSED,
    **{_WORKER + "timing." + name: NEUTRAL for name in (
        "attention_efficiency", "decode_ms", "dp_sync_ms", "frontend_ms", "gemm_efficiency",
        "gemm_floor_us", "gpu", "gpu_spec.bf16_tflops", "gpu_spec.fp4_tflops", "gpu_spec.fp8_tflops",
        "gpu_spec.interconnect_gb_s", "gpu_spec.memory_bandwidth_gb_s", "interpolate_context", "launch_us",
        "memory_efficiency", "pass_overhead_ms", "prefill_ms")},
    **{"evaluation.sla." + name: NEUTRAL for name in ("e2e_ms", "itl_ms", "ttft_ms")},
    "planner.policy": SCALING,
    **{"planner." + name: NEUTRAL for name in (
        "decode_min_workers", "enable_load_scaling", "enable_throughput_scaling", "fpm_sample_bucket_size",
        "kalman_min_points", "kalman_q_level", "kalman_q_trend", "kalman_r", "load_adjustment_interval_seconds",
        "load_min_observations", "load_predictor", "load_predictor_log1p", "load_scaling_down_sensitivity",
        "max_num_fpm_samples", "max_num_gpus", "max_throughput_scaling_replicas", "min_num_gpus", "min_workers",
        "moving_average_window", "prefill_min_workers", "prophet_window_size", "target",
        "throughput_adjustment_interval_seconds")},
    "router.policy": ROUTER,
    "router.session_affinity": AFFINITY,
    **{"router." + name: NEUTRAL for name in (
        "decode_active_request_weight", "disk_cache_hit_weight", "host_cache_hit_weight", "overlap_score_credit",
        "overlap_score_credit_decay",
        "prefill_load_model.type", "prefill_load_scale", "seed", "temperature")},
    "traffic.client_timeout_seconds": TIMEOUTS,
    "traffic.load.type": ARRIVALS,
    "traffic.load.concurrency": ARRIVALS,
    "traffic.load.agentic_lanes": ARRIVALS,
    "traffic.load.agentic_warmup": ARRIVALS,
    "traffic.load.agentic_warmup_policy": ARRIVALS,
    **{"traffic.load." + name: NEUTRAL for name in (
        "agentic_profile.cancel_drain_seconds", "agentic_profile.duration_seconds",
        "agentic_profile.global_idle_cap_seconds", "agentic_profile.response_grace_seconds",
        "agentic_profile.tree_idle_cap_seconds", "agentic_snapshot.corpus_cursor",
        "agentic_snapshot.initial_selections.source_play_id", "agentic_snapshot.initial_selections.t_star_ms",
        "agentic_snapshot.seed", "requests_per_second", "seed", "sessions_per_second", "speedup")},
    "traffic.source.type": ARRIVALS,
    "traffic.source.format": ARRIVALS,
    "traffic.source.paths": ARRIVALS,
    "traffic.source.session.turns": ARRIVALS,
    "traffic.source.input_tokens": KV_SIZE,
    "traffic.source.output_tokens": KV_SIZE,
    "traffic.source.session.prefix_groups": ALIKE,
    "traffic.source.session.shared_prefix_ratio": ALIKE,
    "traffic.source.cached_prefix_tokens": ALIKE,
    **{"traffic.source." + name: NEUTRAL for name in (
        "block_size", "nested_timestamp_basis", "new_input_tokens_per_turn", "output_tokens_per_turn",
        "session.inter_turn_delay_ms")},
    "traffic.stop.max_virtual_time_seconds": TIME_CAP,
    **{"traffic.stop." + name: NEUTRAL for name in (
        "requests", "requests_per_load_unit", "sessions", "sessions_per_load_unit")},
}
"""Every leaf field of the config (`servesim.config.SimConfig`), by dotted path (a role's worker
fields as `engine.workers.*.…`): which paths it can refuse, and how. `tests/runtime/test_replay_paths.py`
fails when a field is missing or a path here is not a field."""
