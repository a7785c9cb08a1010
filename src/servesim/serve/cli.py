"""`servesim serve`: the config's engine section as a live OpenAI-compatible server (uvicorn),
paced to wall time; on SIGTERM or Ctrl-C it drains, stops and writes the run's outputs as
`servesim predict --capture-per-request` does."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import math
import signal
import socket
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from servesim.cli.common import DEFAULT_OUTPUT_DIR, config_error, start_up
from servesim.cli.outputs import RunOutputs, print_report, write_outputs
from servesim.errors import ConfigError, RunError
from servesim.outputs import OutputSet, prepare_folder


def register(sub: Any) -> None:
    """Add `serve` to the `servesim` command."""
    serve = sub.add_parser("serve", help="serve the config's engine as a live OpenAI-compatible endpoint that "
                                         "answers at the simulated engine's speed (docs/serve.md)")
    serve.add_argument("-c", "--config", required=True, help="YAML config (its engine, router and planner sections)")
    serve.add_argument("--set", dest="overrides", action="append", default=[], metavar="PATH=YAML_VALUE",
                       help="override a config value before validation (repeatable)")
    serve.add_argument("--allow-duplicate-keys", action="store_true",
                       help="accept YAML mappings that repeat a key, the last value winning")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8000, help="port to listen on (default: 8000; 0: any free port)")
    serve.add_argument("--speed", type=float, default=1.0,
                       help="simulated seconds per wall second (default: 1.0; 10 answers ten times faster)")
    serve.add_argument("--served-model-name", action="append", default=None, metavar="NAME",
                       help="model name clients use (repeatable; default: the config's engine.model)")
    serve.add_argument("--default-max-tokens", type=int, default=16,
                       help="output tokens of a request that does not give max_tokens (default: 16)")
    serve.add_argument("--tokenizer", default=None, metavar="TOKENIZER_JSON",
                       help="a tokenizer.json to count text prompts with (needs the tokenizers package); "
                            "default: the model's in the local Hugging Face cache, else an estimate")
    serve.add_argument("--drain-timeout", type=float, default=5.0,
                       help="seconds a stop waits for requests in flight before it hangs them up (default: 5)")
    serve.add_argument("--output-dir", default=DEFAULT_OUTPUT_DIR,
                       help=f"where the recording goes when the server stops (default: ./{DEFAULT_OUTPUT_DIR})")
    serve.add_argument("--overwrite", action="store_true", help="replace servesim outputs already in --output-dir")
    serve.add_argument("--report", action="store_true", help="also write report.html (needs servesim[report])")
    serve.add_argument("--format", choices=("table", "json"), default="table", help="stdout format at the end")
    serve.set_defaults(run_command=_serve)


def _check(args: argparse.Namespace) -> None:
    """Usage errors found before anything starts (ConfigError: exit 2)."""
    for module in ("uvicorn", "starlette"):
        if importlib.util.find_spec(module) is None:
            raise ConfigError(f"servesim serve needs {module}: pip install 'servesim[serve]'")
    if args.report and importlib.util.find_spec("plotly") is None:
        raise ConfigError("--report needs plotly: pip install 'servesim[report]'")
    if not (math.isfinite(args.speed) and args.speed > 0):
        raise ConfigError(f"--speed must be a positive number (got {args.speed})")
    if not 0 <= args.port <= 65535:
        raise ConfigError(f"--port must be between 0 and 65535 (got {args.port})")
    if args.default_max_tokens < 1:
        raise ConfigError(f"--default-max-tokens must be at least 1 (got {args.default_max_tokens})")
    if not (math.isfinite(args.drain_timeout) and args.drain_timeout >= 0):
        raise ConfigError(f"--drain-timeout must be a number of seconds ≥ 0 (got {args.drain_timeout})")


def _serve(args: argparse.Namespace) -> int:
    with start_up():
        from servesim.live import live_replay
        from servesim.config import load_config

        out_dir = Path(args.output_dir)
        try:
            _check(args)
            config = load_config(args.config, args.overrides, allow_duplicate_keys=args.allow_duplicate_keys)
            prepare_folder(out_dir, args.overwrite)
            live = live_replay(config, timeseries=args.report)
            live.warm_up()
        except ConfigError as exc:
            return config_error(args.config, exc)
        except RunError as exc:
            print(f"servesim serve failed: {exc}", file=sys.stderr)
            return exc.exit_code
        try:
            sock = _bind(args.host, args.port)
        except OSError as exc:
            print(f"servesim serve failed: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}",
                  file=sys.stderr)
            return 1
        server = _server(args, config.engine.model, live, sock)
    asyncio.run(server.serve(sockets=[sock]))
    report = live.finish()
    written = RunOutputs(command="serve", config=args.config, capture_per_request=True,
                         report_html=args.report, format=args.format)
    with OutputSet(out_dir) as outputs:
        write_outputs(outputs, report, written)
    print(f"servesim serve: stopped; {report.summary['num_requests']} requests recorded in {out_dir}",
          file=sys.stderr)
    return print_report(report, written, out_dir / "prediction.json")


def _bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket. Its protocol is named (IPPROTO_TCP) so that asyncio turns off
    Nagle's algorithm on each connection, as it does for the sockets it makes itself: with it
    on, a streamed token waits for the client's delayed ACK (up to 40 ms)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def _server(args: argparse.Namespace, model: str, live: Any, sock: socket.socket) -> Any:
    """The uvicorn server of the app over `live` (imported here: the serve extra)."""
    import uvicorn

    from servesim.serve.app import Served, build_app
    from servesim.serve.driver import Pacer
    from servesim.serve.metrics import EngineMetrics
    from servesim.serve.protocol import Limits
    from servesim.serve.session import Sessions
    from servesim.serve.tokens import tokenizer_for

    metrics = EngineMetrics(live.cluster, model)
    sessions = Sessions(metrics.on_tokens)
    live.cluster.request_observers += [sessions, metrics]
    live.cluster.observers += [sessions, metrics]
    names = tuple(args.served_model_name or [model])
    limits = Limits(names, live.run.pools[0].rank_config.max_model_len, args.default_max_tokens)
    tokenizer = tokenizer_for(model, args.tokenizer)
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host

    def started() -> None:
        print(f"servesim serve: serving {names[0]} on http://{shown}:{port} (speed {args.speed:g}; prompts "
              f"counted by {tokenizer.description})", file=sys.stderr, flush=True)

    served = Served(Pacer(live, sessions, args.speed), metrics, limits, tokenizer, on_started=started)
    config = uvicorn.Config(build_app(served), log_level="warning", access_log=False, lifespan="on",
                            timeout_graceful_shutdown=args.drain_timeout)
    return _Server(config)


def _server_class() -> Any:
    import uvicorn

    class Server(uvicorn.Server):
        """uvicorn's server, whose SIGTERM and SIGINT stop it gracefully and end there (uvicorn
        re-raises the signal after its shutdown, which would make the exit code 143)."""

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            if threading.current_thread() is not threading.main_thread():
                yield
                return
            previous = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
            try:
                yield
            finally:
                for sig, handler in previous.items():
                    signal.signal(sig, handler)

    return Server


def _Server(config: Any) -> Any:  # noqa: N802 (a class made on first use)
    return _server_class()(config)
