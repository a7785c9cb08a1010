"""The engine's KV caches and the token content they key.

`blocks`: chained block keys of token runs (and the process's key memo); `token_seq`: a
sequence's tokens as runs with their page keys; `kv`: vLLM's and TensorRT-LLM's block pool with
prefix caching; `radix`: SGLang's radix cache of token runs. Nothing here knows a request or a
scheduler.
"""
