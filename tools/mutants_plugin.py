"""pytest plugin loaded by `tools/mutants.py` in its test runs: Hypothesis derandomised (the same
examples on every run, so a mutant's verdict is reproducible) and without health checks or
deadlines (a loaded machine must not turn a slow example into a "caught" mutant)."""

from __future__ import annotations

from hypothesis import HealthCheck, settings

settings.register_profile("mutants", derandomize=True, deadline=None, suppress_health_check=list(HealthCheck),
                          print_blob=False, database=None)
settings.load_profile("mutants")
