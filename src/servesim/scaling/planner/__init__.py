"""Dynamo's planner (autoscaler) as a servesim scaling policy (docs/scaling.md).

`settings` (resolved options), `observed` (what it saw), `load` (load scaling), `capacity`
(predictions and throughput capacity), `budget` (the GPU band), `policy` (`DynamoPlanner`).

A periodic controller: every base tick (the gcd of the enabled decision intervals, first tick
one interval after the start) it runs whichever decisions are due —

* **throughput scaling** (every ``throughput_adjustment_interval_seconds``, target ``sla``
  only): forecasts the next interval's request count and shape from the traffic windows,
  sizes one engine with the pool's timing model and asks for ``ceil(demand / engine rps)``
  workers (at most ``max_throughput_scaling_replicas`` away from now). With load scaling also
  on, that number is only a floor for it;
* **load scaling** (every ``load_adjustment_interval_seconds``): one step up or down from the
  latest forward-pass metrics (FPM) of every active (worker, rank). Targets ``throughput``,
  ``latency`` and ``load`` compare queue / KV-utilisation values with fixed thresholds;
  ``sla`` predicts the next request's TTFT and the next pass's ITL with the timing model.

Then the minimum worker counts and the GPU budget are applied. The answer is the desired
non-draining worker count per pool; ``reason`` and ``diagnostics`` say why.

Where servesim follows the Dynamo reference stack's replay adapter rather than the live planner:
worker counts are ``ready = active`` and ``expected = active + starting`` with no pending
count, so any tick with a worker still starting is ``scaling_in_progress`` (no decision at
all, hence no scale-up either); the latest FPM of a rank is kept across ticks until its worker
stops being active; SLA values come from ``evaluation.sla`` only for target ``sla`` (otherwise
Dynamo's defaults, 500 ms / 50 ms).

Simplifications (documented, deliberate):

* Latency predictions use the pool's own timing model (the one the engines run) instead of
  Dynamo's regression on FPM samples, so the SLA target needs no warm-up
  (``load_min_observations`` and ``fpm_sample_bucket_size`` are accepted and unused). A chunk of
  ``c`` uncached prompt tokens is timed as ``prefill(1, c, 0)``; an aggregated pass adds
  ``decode(batch, kv, …)`` for the decodes riding along.
* The average ISL behind the SLA TTFT estimate is the last traffic window's mean prompt length
  (the FPM mean before any window completed a request); the mean decode length and the prefill
  time riding on an aggregated pass are moving averages over ``max_num_fpm_samples`` FPMs (the
  mean of each sampled pass's prefill time, not the time of the mean token count, so the fixed
  per-pass cost is not charged to passes without prompt work).
* The GPU budget is Dynamo's direction-preserving guard; where Dynamo searches for the best
  feasible opposing prefill/decode rebalance at a full budget, servesim accepts the proposed
  pair if it fits and holds otherwise.
* Throughput capacity is per worker (rank capacity × attention-DP ranks); when no candidate
  batch meets the SLA the least-violating one is used. Speculative decoding is not modelled
  (accept length 1).
"""
