"""Scaling: policies that change the number of workers while a replay runs (a side package)."""
