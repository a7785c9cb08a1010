"""The vLLM core, with vLLM's or TensorRT-LLM's admission.

`core.VllmRank` is one scheduler rank: it plans a pass in a `plan.PassPlan`, admits by `policy`
(vLLM's rules) or `trtllm` (TensorRT-LLM's), keeps steady decoders in a `cohort`, runs passes
ahead (`ahead`), offers its side of the disaggregated handoff (`handoff`) and stops a FIFO
preemption livelock (`livelock`). `steady.SteadyLane` replays a worker of such ranks as counts
per pass when nothing can bind. Its KV blocks live in `servesim.engine.cache.kv`.
"""
