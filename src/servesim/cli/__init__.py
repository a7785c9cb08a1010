"""The `servesim` command: `predict`, `recommend`, `validate`, `calibrate`, `compare`,
`data fetch`, `serve`. Each subcommand registers itself (`register(sub)`) and names the function that
runs it (`run_command`).

Exit codes follow the reference: 0 success, 2 configuration or usage errors, 1 when the
simulation itself fails (or its results cannot be written), 130 on interrupt (143 on SIGTERM).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from collections.abc import Sequence

from servesim.cli import pydantic_plugins, yaml_regex
from servesim.perf import save_timing_cache


#: Each subcommand and the module that registers it, in the order `servesim --help` lists them.
_COMMANDS = {"predict": "servesim.cli.predict", "recommend": "servesim.search.cli",
             "validate": "servesim.studies.commands", "calibrate": "servesim.studies.commands",
             "data": "servesim.cli.tools", "compare": "servesim.cli.tools", "serve": "servesim.serve.cli"}


def _parser(argv: Sequence[str]) -> argparse.ArgumentParser:
    """The command's parser for `argv`: with only the named subcommand's parsers when `argv`
    starts with one (each `add_argument` costs a help formatter, and a run uses one command),
    with every subcommand's otherwise (`--help`, usage errors naming the subcommand). Usage
    lines list every subcommand either way."""
    import importlib

    from servesim.cli.common import COMPAT_CHOICES, COMPAT_HELP

    parser = argparse.ArgumentParser(prog="servesim", description="Simulate LLM inference serving.")
    parser.add_argument("--compat", dest="global_compat", choices=COMPAT_CHOICES, default=None,
                        help=COMPAT_HELP + "; for predict, recommend and calibrate")
    command = _command(argv)
    if command is not None:
        modules = [_COMMANDS[command]]
        sub = parser.add_subparsers(dest="command", required=True, metavar="{" + ",".join(_COMMANDS) + "}")
    else:
        modules = list(dict.fromkeys(_COMMANDS.values()))
        sub = parser.add_subparsers(dest="command", required=True)
    for module in modules:
        importlib.import_module(module).register(sub)
    return parser


def _command(argv: Sequence[str]) -> str | None:
    """The subcommand `argv` names, after the top-level options (`--compat reference`)."""
    rest = list(argv)
    while rest and rest[0].startswith("--compat"):
        rest = rest[1:] if "=" in rest[0] else rest[2:]
    return rest[0] if rest and rest[0] in _COMMANDS else None


def _apply_global_compat(args: argparse.Namespace) -> str | None:
    """Carry `servesim --compat X <command>` into the command's own `--compat`; an error message
    when the command has none (or names another)."""
    wanted = args.global_compat
    if wanted is None:
        return None
    if not hasattr(args, "compat"):
        return f"--compat applies to predict, recommend and calibrate, not {args.command}"
    if args.compat not in (None, wanted):
        return f"--compat {wanted} before the command and --compat {args.compat} after it disagree"
    args.compat = wanted
    return None


class _Terminated(KeyboardInterrupt):
    """SIGTERM, handled like Ctrl-C."""

    signum = signal.SIGTERM


def _on_sigterm(signum: int, frame: object) -> None:
    raise _Terminated()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `servesim` command.

    SIGINT and SIGTERM stop a run cleanly (exit 130 / 143): the output folder keeps either its
    previous results or the complete new ones.
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    args = _parser(argv).parse_args(argv)
    problem = _apply_global_compat(args)
    if problem is not None:
        print(f"servesim: error: {problem}", file=sys.stderr)
        return 2
    in_main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _on_sigterm) if in_main_thread else None
    try:
        return int(args.run_command(args))
    except KeyboardInterrupt as exc:
        print("servesim: interrupted", file=sys.stderr)
        return 128 + (signal.SIGTERM if isinstance(exc, _Terminated) else signal.SIGINT)
    except MemoryError:
        print("servesim: out of memory", file=sys.stderr)
        return 1
    except BrokenPipeError:  # stdout's reader left (`| head`): nothing to say
        return 1
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def run() -> None:
    """The `servesim` executable: `main`, then exit at once.

    Every output is written and closed by then; skipping the interpreter's teardown (freeing
    every module and object one by one) saves ~0.1 s per run, which adds up in sweeps. The
    command multiplies no matrices, so numpy's BLAS runs one thread unless the user chose
    otherwise: starting its thread pool costs ~40 ms of CPU per process on this kind of
    machine, and search workers would only oversubscribe the cores with it. Pydantic plugins
    (found by scanning every installed distribution's entry points, ~3 ms here and more in
    larger environments) are not loaded for the command's own config models unless the user
    set PYDANTIC_DISABLE_PLUGINS (an empty value loads them all); nor is pydantic's plugin
    loader then (`servesim.cli.pydantic_plugins`). PyYAML's import skips its slowest regex
    compilation (`servesim.cli.yaml_regex`).
    """
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    pydantic_plugins.skip_loader()
    yaml_regex.prime()
    code = main()
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGINT, signal.SIGTERM):  # the run is over: its results stand
            signal.signal(signum, signal.SIG_IGN)
    save_timing_cache()  # os._exit skips the atexit hook that would
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except OSError:  # a closed pipe or a full device, already reported
        code = code or 1
    os._exit(code)
