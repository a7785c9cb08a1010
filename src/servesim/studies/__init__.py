"""servesim's studies of real servers, and the commands that run them.

How well the simulated server resembles a real one (none of it runs in a simulation; what a
run's timing uses lives in `servesim.perf`: `mixed`, `dpsync`, `calibration`):

* `openruns`, `validate` — the sim-vs-real table on the open LLMServingSim runs;
* `calibrate` — fitting a calibration file to a user's measurements (`separate`: which of its
  parameters the measurements tell apart); `holdout` — how well a calibration predicts requests
  it was not fitted on;
* `components` — what the splitwise and Vidur step/operator measurements say of the timing model;
  `profiles` — the roofline efficiencies vLLM's own per-layer profiles of a GPU measure; `decode`
  — whether decode at large batch × context is under-costed (three checks);
* `steps` — the open runs' pure-decode step times against the timing model's;
* `commands` — the `servesim validate` and `servesim calibrate` subcommands.
"""
