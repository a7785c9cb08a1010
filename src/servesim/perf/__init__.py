"""The performance model: how long a pass takes and how much KV fits.

Timing models (`aic`: AIConfigurator's measured kernel database, `roofline`: servesim's analytic
model, `timing`: fixed and polynomial), the hardware and model descriptions they need
(`hardware`, `models`) and the default KV capacity of a rank (`capacity`). Nothing here knows the
schedulers or the user's config; `servesim.build` picks and parameterises these models.
"""

import sys


def save_timing_cache() -> None:
    """Write the AIConfigurator answers this process added to the timing cache
    (`servesim.perf.timingcache`); a no-op unless it used AIC timing, which loads that module."""
    cache = sys.modules.get("servesim.perf.timingcache")
    if cache is not None:
        cache.save()
