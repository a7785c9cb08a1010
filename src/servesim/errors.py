"""The servesim exception tree.

    ServesimError                 base of everything servesim raises on purpose
    ├── ConfigError               bad config file, --set override or option   (CLI exit code 2)
    └── RunError                  the simulation itself failed                 (CLI exit code 1)
        ├── TraceError            a malformed trace row (names file and line)
        └── SimulationError       the replay cannot make progress (dead end, invariant)
"""

from __future__ import annotations


class ServesimError(Exception):
    """Base class of every error servesim raises deliberately."""

    exit_code = 1


class ConfigError(ServesimError):
    """The configuration (file, overrides or command-line options) is invalid."""

    exit_code = 2


class RunError(ServesimError):
    """The simulation failed while running."""

    exit_code = 1


class TraceError(RunError):
    """A trace file could not be read; the message names the file and line."""

    def __init__(self, path: str, line: int | None, message: str) -> None:
        where = f"{path}:{line}" if line is not None else path
        super().__init__(f"{where}: {message}")
        self.path = path
        self.line = line


class SimulationError(RunError):
    """The replay reached a state it cannot continue from."""
