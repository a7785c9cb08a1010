"""servesim — a GPU-free, deterministic simulator of LLM inference serving.

Public API::

    import servesim
    report = servesim.simulate("config.yaml")          # or a dict in the same schema
    report["mean_ttft_ms"], report.summary, report.per_request
"""

from typing import TYPE_CHECKING

from servesim.errors import ConfigError, RunError, ServesimError, SimulationError, TraceError
from servesim.version import __version__ as __version__

if TYPE_CHECKING:  # what the lazy exports below are, for type checkers
    from servesim.api import Report, simulate
    from servesim.config import SimConfig, load_config

__all__ = [
    "ConfigError",
    "Report",
    "RunError",
    "ServesimError",
    "SimConfig",
    "SimulationError",
    "TraceError",
    "load_config",
    "simulate",
]




def __getattr__(name: str) -> object:
    # Imported lazily so `import servesim` (and the CLI's startup) stays fast.
    if name in ("simulate", "Report"):
        from servesim import api

        return getattr(api, name)
    if name in ("SimConfig", "load_config"):
        from servesim import config

        return getattr(config, name)
    raise AttributeError(f"module 'servesim' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The module's names, the lazily imported exports included."""
    return sorted(set(globals()) | set(__all__))
