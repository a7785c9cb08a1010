"""What the subcommands share: the options `predict` and `recommend` take alike, the output
folder and how a configuration error is reported."""

from __future__ import annotations

import argparse
import sys
from contextlib import AbstractContextManager
from typing import Any

from servesim.errors import ConfigError
from servesim.runtime.collection import collection_paused

DEFAULT_OUTPUT_DIR = "servesim-output"


def add_common_arguments(command: argparse.ArgumentParser, schema: str, outputs: str) -> None:
    """The options `predict` and `recommend` share, as in the reference's CLI."""
    command.add_argument("-c", "--config", required=True, help=f"YAML config (the reference's {schema} schema)")
    command.add_argument("--set", dest="overrides", action="append", default=[], metavar="PATH=YAML_VALUE",
                         help="override a config value before validation (repeatable)")
    command.add_argument("--allow-duplicate-keys", action="store_true",
                         help="accept YAML mappings that repeat a key, the last value winning (as the "
                              "reference does); by default a repeated key is an error")
    command.add_argument("--output-dir", default=DEFAULT_OUTPUT_DIR,
                         help=f"where {outputs} go (default: ./{DEFAULT_OUTPUT_DIR})")
    command.add_argument("--overwrite", action="store_true", help="replace servesim outputs already in --output-dir")
    command.add_argument("--format", choices=("table", "json"), default="table", help="stdout format")
    add_compat_argument(command)
    command.add_argument("--stack", default=None, metavar="{engine,dynamo}",
                         help="execution stack, as in the reference: 'engine' (no router/planner "
                              "sections) or 'dynamo'; default: every section is accepted")


COMPAT_CHOICES = ("reference", "upstream-0.13")
"""The values of `--compat` (the config key `compat`, `servesim.config.schema.SimConfig`)."""
COMPAT_HELP = ("'reference': reproduce AISimulate 0.1.0.dev2 exactly (its timing model, backend version, "
               "report fields, unservable requests and exit codes); 'upstream-0.13': the pass convention of "
               "the upstream 0.13 build (first tokens when a prompt completes; docs/timing.md); the same as "
               "the config key compat (default: servesim's best estimate)")


def add_compat_argument(command: argparse.ArgumentParser) -> None:
    """`--compat reference` (also accepted before the subcommand: `servesim --compat reference predict`)."""
    command.add_argument("--compat", choices=COMPAT_CHOICES, default=None, help=COMPAT_HELP)


def compat_overrides(args: argparse.Namespace) -> list[str]:
    """`--set` overrides with `--compat` applied last (it is validated with the config)."""
    overrides = list(getattr(args, "overrides", None) or ())
    if getattr(args, "compat", None) is not None:
        overrides.append(f"compat={args.compat}")
    return overrides


def start_up() -> AbstractContextManager[None]:
    """A command's start-up (its imports, reading and validating the config) without the cyclic
    garbage collector: it makes many long-lived objects and next to no garbage cycles, so
    collections would only walk them again and again (~2% of a short run)."""
    return collection_paused(stay_frozen=True)


def config_error(config: str, exc: ConfigError) -> int:
    """Print a configuration error naming the config file once; its exit code."""
    message = str(exc)
    if not message.startswith(f"{config}:"):  # errors read from the file name it already
        message = f"{config}: {message}"
    print(f"servesim: error: {message}", file=sys.stderr)
    return exc.exit_code




def write_stdout(command: str, text: str) -> int:
    """Print a command's result on stdout: 0, or 1 when stdout cannot take it (a reader that
    stopped early, `| head`, says nothing; a full device is named). Characters the stream's
    encoding cannot show (``PYTHONIOENCODING=ascii``) are written as backslash escapes."""
    from servesim.outputs import os_reason

    try:
        try:
            sys.stdout.write(text)
        except UnicodeEncodeError:
            _escape_unencodable(sys.stdout)
            sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        return 1
    except OSError as exc:
        print(f"servesim {command} failed: cannot write to stdout: {os_reason(exc)}", file=sys.stderr)
        return 1
    return 0


def _escape_unencodable(stream: object) -> None:
    """Make `stream` write what its encoding lacks as backslash escapes (`\\xb7`) from now on."""
    reconfigure = getattr(stream, "reconfigure", None)
    if reconfigure is not None:
        reconfigure(errors="backslashreplace")
    else:  # a stream that cannot change: its writes go through an escaping wrapper
        sys.stdout = _Escaping(stream)


class _Escaping:
    """A text stream that escapes what the wrapped stream's encoding cannot show."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self._encoding = getattr(stream, "encoding", None) or "ascii"

    def write(self, text: str) -> int:
        return self._stream.write(text.encode(self._encoding, "backslashreplace").decode(self._encoding))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)
