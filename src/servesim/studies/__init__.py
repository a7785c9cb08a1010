"""servesim's fidelity extensions: how a simulated server is made to resemble a real one.

Nothing here is used by the reference's defaults. It holds

* `mixed` — the cost of a fused mixed pass (`timing.mixed_pass: fused`);
* `apply` — what a role's fidelity keys change for `servesim.build` (the fused and calibrated
  timing model, the front-end latency and async-scheduling defaults, a measured KV capacity);
* `calibration` — calibration files (`timing.calibration`) and how they scale a timing model;
* `openruns`, `validate` — the sim-vs-real table on the open LLMServingSim runs;
* `calibrate` — fitting a calibration file to a user's measurements; `holdout` — how well a
  calibration predicts requests it was not fitted on;
* `components` — what the splitwise and Vidur step/operator measurements say of the timing model;
  `profiles` — the roofline efficiencies vLLM's own per-layer profiles of a GPU measure; `decode`
  — whether decode at large batch × context is under-costed (three checks);
* `steps` — the open runs' pure-decode step times against the timing model's;
* `commands` — the `servesim validate` and `servesim calibrate` subcommands.
"""
