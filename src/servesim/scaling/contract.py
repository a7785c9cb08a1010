"""The contract between the replay and a scaling policy (an autoscaler / planner).

The runtime calls the policy at virtual-time ticks, after everything else due at that instant
has settled, with a `Snapshot` of the fleet; the policy answers with a `Decision`: the number
of non-draining workers it wants per pool and when to tick next. A user's own policy only needs
to implement `ScalingPolicy` (see `examples/custom_scaling.py`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from servesim.engine.metrics import ForwardPassMetrics
from servesim.engine.pass_time import TimingModel


@dataclass(slots=True)
class RankSnapshot:
    """One active (worker, DP rank): its latest forward-pass metrics and scheduler state."""

    worker_id: int
    dp_rank: int
    metrics: ForwardPassMetrics | None
    """The latest forward-pass metrics since the previous tick (an empty record for a rank
    that has been idle for a whole second); None if the rank has published none yet."""
    active_blocks: int
    total_blocks: int
    running: int
    waiting: int


@dataclass(slots=True)
class PoolSnapshot:
    """One pool ("decode" — also the aggregated pool — or "prefill")."""

    role: str
    active: list[int]
    starting: list[int]
    draining: list[int]
    ranks: list[RankSnapshot]
    """Ranks of the active workers, worker-major."""
    gpus_per_worker: int
    block_size: int
    max_batched_tokens: int
    max_sequences: int
    context_length: int | None
    timing: TimingModel
    """The pool's pass-time model, for policies that predict latencies."""
    ranks_per_worker: int = 1
    """Attention-DP ranks of one worker."""
    kv_blocks_per_rank: int = 0
    """KV blocks of one rank (0: unknown; policies then read `ranks`)."""

    @property
    def max_kv_tokens(self) -> int:
        """KV capacity of one worker in tokens (all its DP ranks)."""
        return self.kv_blocks_per_rank * self.block_size * self.ranks_per_worker

    @property
    def non_draining(self) -> int:
        return len(self.active) + len(self.starting)


@dataclass(slots=True)
class TrafficWindow:
    """Traffic since the previous tick."""

    duration_s: float = 0.0
    num_req: int = 0
    """Requests that arrived."""
    avg_isl: float = 0.0
    avg_osl: float = 0.0
    """Over requests that completed (not rejected), output tokens actually emitted."""
    avg_ttft_ms: float = 0.0
    avg_itl_ms: float = 0.0
    avg_kv_hit_rate: float = 0.0
    """Mean over admissions of the prompt fraction found in the prefix cache."""
    num_completed: int = 0
    num_kv_hit_samples: int = 0
    """Admissions behind avg_kv_hit_rate."""


@dataclass(slots=True)
class Snapshot:
    """What a scaling policy sees at a tick."""

    tick: int
    now_ms: float
    pools: dict[str, PoolSnapshot]
    traffic: TrafficWindow
    disaggregated: bool


@dataclass(slots=True)
class Decision:
    """The policy's answer: desired non-draining workers per pool (None: unchanged)."""

    target_decode: int | None = None
    """The aggregated pool's target in aggregated serving."""
    target_prefill: int | None = None
    next_tick_ms: float | None = None
    """Absolute time of the next tick; None (or not in the future) stops ticking."""
    reason: str = ""
    diagnostics: dict[str, object] = field(default_factory=dict)


class ScalingPolicy(Protocol):
    """Decides the fleet size over time."""

    def initial_tick_ms(self) -> float:
        """Time of the first tick (inf: never)."""

    def on_tick(self, snapshot: Snapshot) -> Decision:
        """Called once per tick, after every other effect of that instant."""
