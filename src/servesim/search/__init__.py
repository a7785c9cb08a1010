"""The search behind `servesim recommend`: which deployment meets a target within a GPU budget.

    from servesim.search.cli import load_recommend_config
    from servesim.search.run import Search

    result = Search(load_recommend_config("recommend.yaml", [])).run()
    best = result.ranked()[0]          # a ledger entry: knobs, metrics, score ...
    config = result.configs[best["trial"]]   # its complete `predict` config

See docs/recommend.md.
"""
