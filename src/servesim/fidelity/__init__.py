"""servesim's fidelity extensions: how a simulated server is made to resemble a real one.

Nothing here is used by the reference's defaults. It holds

* `mixed` — the cost of a fused mixed pass (`timing.mixed_pass: fused`);
* `frontend` — the default per-request front-end latency;
* `calibration` — calibration files (`timing.calibration`) and how they scale a timing model;
* `measured` — per-request measurements of real runs (three file formats);
* `openruns`, `validate` — the sim-vs-real table on the open LLMServingSim runs;
* `calibrate` — fitting a calibration file to a user's measurements;
* `components` — what the splitwise and Vidur step/operator measurements say of the timing model.
"""
