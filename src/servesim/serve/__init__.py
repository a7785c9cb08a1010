"""`servesim serve`: the engine section of a config as a live OpenAI-compatible endpoint that
answers at the simulated engine's speed (docs/serve.md).

`tokens` turns prompts into token ids, `protocol` validates requests, `session` follows each
request through the simulation, `driver` paces the simulated clock to wall time, `metrics`
renders vLLM's Prometheus metrics, `app` is the HTTP layer and `cli` the command.
"""
