"""The SGLang core.

`core.SglangRank` is one scheduler rank over a radix cache (`servesim.engine.cache.radix`): its
requests and their page leases (`kv`), its admission (`admission`: the new-token ratio and the
waiting queue's order) and its side of the disaggregated handoff (`handoff`).
"""
