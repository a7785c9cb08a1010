"""Plug your own scaling policy into servesim (run: python examples/custom_scaling.py).

A policy implements two methods (`servesim.scaling.contract.ScalingPolicy`):
`initial_tick_ms()` and `on_tick(snapshot) -> Decision`. The snapshot gives, per pool, the
active / starting / draining workers, each active rank's latest forward-pass metrics and KV
usage, and the traffic since the previous tick; the decision says how many non-draining workers
each pool should have and when to tick next.
"""

from __future__ import annotations

from servesim import simulate
from servesim.scaling.contract import Decision, Snapshot


class QueueThreshold:
    """Add a worker while any rank has more than `high` requests waiting; remove one when
    every rank's queue is empty and KV use is below 50 %."""

    def __init__(self, interval_ms: float = 2000.0, high: int = 4, max_workers: int = 6) -> None:
        self.interval_ms = interval_ms
        self.high = high
        self.max_workers = max_workers

    def initial_tick_ms(self) -> float:
        return self.interval_ms

    def on_tick(self, snapshot: Snapshot) -> Decision:
        pool = snapshot.pools["decode"]
        current = pool.non_draining
        next_tick = snapshot.now_ms + self.interval_ms
        if pool.starting:
            return Decision(next_tick_ms=next_tick, reason="waiting_for_startup")
        if any(rank.waiting > self.high for rank in pool.ranks) and current < self.max_workers:
            return Decision(target_decode=current + 1, next_tick_ms=next_tick, reason="scale_up")
        idle = all(r.waiting == 0 and r.active_blocks < 0.5 * r.total_blocks for r in pool.ranks)
        if idle and current > 1:
            return Decision(target_decode=current - 1, next_tick_ms=next_tick, reason="scale_down")
        return Decision(next_tick_ms=next_tick, reason="hold")


CONFIG = {
    "engine": {
        "model": "Qwen/Qwen3-8B", "hardware": "h200_sxm", "context_length": 32768,
        "workers": {"aggregated": {
            "parallelism": {"replicas": 1},
            "kv_cache": {"capacity": {"type": "fixed", "blocks": 2000}},
            "timing": {"type": "polynomial"},
            "startup_seconds": 5,
        }},
    },
    "traffic": {
        "source": {"type": "synthetic", "input_tokens": 2048, "output_tokens": 256},
        "load": {"type": "poisson", "requests_per_second": 6, "seed": 1},
        "stop": {"requests": 600},
    },
}

if __name__ == "__main__":
    report = simulate(CONFIG, scaling=QueueThreshold()).to_dict()
    planner = report["planner"]
    for event in planner["scaling_events"]:
        print(f"{event['at_s']:7.1f} s  {event['from_count']} -> {event['to_count']}  ({event['reason']})")
    print(f"peak workers {planner['peak_workers']}, GPU-hours {report['gpu_hours']:.4f}, "
          f"mean TTFT {report['mean_ttft_ms']:.0f} ms")
