"""Where candidates are replayed: warm local worker processes, or Ray tasks.

Both executors take a list of jobs ``(key, config mapping)`` and yield ``(key, Outcome)`` as
they finish. An evaluation is `servesim.simulate` of the mapping; nothing about it depends on
which executor or how many workers ran it, so the search's results do not either.

The local executor forks its workers from the search process after the simulator's modules are
imported, and each worker keeps its memoised timing (the AIConfigurator engines and their
lookups) across the candidates it replays. A candidate that runs past its time limit has its
worker killed and replaced.

**Memory bound.** A replay returns its memory when it ends (`servesim.simulate` breaks its
reference cycles), so a worker holds the forked search process, its timing caches and one
replay at a time. A worker whose resident memory after a candidate exceeds
`optimizer.worker_memory_mb` (servesim: 4096) is retired and a fresh one forked in its place:
whatever the number of candidates, a search's workers hold at most
`min(parallelism, CPUs) × (worker_memory_mb + one replay's peak)`. Ray workers are recycled
after `RAY_TASKS_PER_WORKER` candidates for the same reason.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Any


@dataclass
class Outcome:
    """How one replay ended: 'ok' with the report summary, 'failed' or 'timed_out' with a reason."""

    status: str
    summary: dict[str, Any] | None = None
    reason: str | None = None
    seconds: float = 0.0
    warnings: list[str] = field(default_factory=list)
    worker_rss_mb: float | None = None
    """Resident memory of the process that replayed it, just after the replay."""
    node: str | None = None
    """The Ray node that replayed it (None for the local executor)."""


class _Captured(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage().removeprefix("servesim: warning: "))


def evaluate(config: dict[str, Any]) -> Outcome:
    """Replay one candidate config; warnings are captured into the outcome, not printed."""
    from servesim.api import simulate
    from servesim.config import parse_config

    log = logging.getLogger("servesim")
    handler, propagate = _Captured(), log.propagate
    log.addHandler(handler)
    log.propagate = False
    started = time.perf_counter()
    try:
        summary = simulate(parse_config(config)).summary
        return Outcome("ok", summary, seconds=time.perf_counter() - started, warnings=handler.lines)
    except Exception as exc:  # noqa: BLE001 - one failing candidate must not stop the search
        reason = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        return Outcome("failed", reason=reason, seconds=time.perf_counter() - started, warnings=handler.lines)
    finally:
        log.removeHandler(handler)
        log.propagate = propagate


Job = tuple[int, dict[str, Any]]
RAY_TASKS_PER_WORKER = 16
"""Candidates a Ray worker process replays before Ray replaces it (bounds its memory)."""


def resident_mb() -> float | None:
    """This process's resident memory in MB (None where /proc is not there)."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        return None


class LocalExecutor:
    """A pool of long-lived worker processes, one candidate at a time each."""

    def __init__(self, workers: int, timeout_s: float, memory_mb: float | None = None) -> None:
        self.size = max(1, workers)
        self.timeout_s = timeout_s
        self.memory_mb = memory_mb
        self.retired = 0
        """Workers replaced because they outgrew memory_mb."""
        self.peak_rss_mb = 0.0
        """The largest resident memory a worker reported after a candidate."""
        methods = multiprocessing.get_all_start_methods()
        self._context = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
        self._workers: list[_Worker] = []

    def run(self, jobs: Iterable[Job]) -> Iterator[tuple[int, Outcome]]:
        pending = list(jobs)
        pending.reverse()
        while len(self._workers) < min(self.size, len(pending)):
            self._workers.append(_Worker(self._context))
        busy: dict[Connection, _Worker] = {}
        while pending or busy:
            for worker in self._workers:
                if pending and worker.job is None:
                    worker.start(pending.pop())
                    busy[worker.conn] = worker
            deadline = min(w.deadline(self.timeout_s) for w in busy.values())
            ready = wait(list(busy), timeout=_wait_s(deadline))
            for conn in ready:
                worker = busy.pop(conn)  # type: ignore[call-overload]
                key, outcome = worker.finish()
                rss = outcome.worker_rss_mb or 0.0
                self.peak_rss_mb = max(self.peak_rss_mb, rss)
                if self.memory_mb is not None and rss > self.memory_mb and worker.alive:
                    worker.stop()
                    self.retired += 1
                if not worker.alive:
                    self._replace(worker)
                yield key, outcome
            now = time.monotonic()
            for conn, worker in list(busy.items()):
                if worker.deadline(self.timeout_s) <= now:
                    del busy[conn]
                    key = worker.job
                    assert key is not None
                    worker.kill()
                    self._replace(worker)
                    yield key, Outcome("timed_out", reason=f"replay ran longer than {self.timeout_s:g} s "
                                                           "(optimizer.candidate_timeout_seconds)",
                                       seconds=self.timeout_s)

    def _replace(self, worker: _Worker) -> None:
        self._workers[self._workers.index(worker)] = _Worker(self._context)

    def close(self) -> None:
        """Stop every worker (killing one still replaying)."""
        for worker in self._workers:
            worker.kill() if worker.job is not None else worker.stop()
        self._workers = []


class _Worker:
    """One worker process and the job it is running."""

    def __init__(self, context: Any) -> None:
        self.conn, child = context.Pipe()
        self.process = context.Process(target=_worker_loop, args=(child,), daemon=True)
        self.process.start()
        child.close()
        self.job: int | None = None
        self.started = 0.0

    def start(self, job: Job) -> None:
        self.job, config = job
        self.started = time.monotonic()
        self.conn.send(config)

    def deadline(self, timeout_s: float) -> float:
        return self.started + timeout_s

    def finish(self) -> tuple[int, Outcome]:
        """The finished job's outcome; a worker that died is reported as a failed replay."""
        key = self.job
        assert key is not None
        try:
            outcome = self.conn.recv()
        except EOFError:
            self.process.join()
            outcome = Outcome("failed", reason=f"worker process died (exit code {self.process.exitcode})")
        self.job = None
        return key, outcome

    @property
    def alive(self) -> bool:
        return self.process.is_alive()

    def stop(self) -> None:
        try:
            self.conn.send(None)
        except (BrokenPipeError, OSError):
            pass
        self.process.join(timeout=2)
        if self.process.is_alive():
            self.kill()

    def kill(self) -> None:
        self.process.kill()
        self.process.join()
        self.job = None


def _worker_loop(conn: Connection) -> None:
    """A worker: replay each config received until told to stop or the parent is gone. Ctrl-C
    and SIGTERM are the parent's (a signal to the whole process group would otherwise print
    every worker's traceback): it ends the search and stops its workers."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _die_with_parent()
    while True:
        try:
            config = conn.recv()
        except (EOFError, OSError):
            break
        if config is None:
            break
        outcome = evaluate(config)
        outcome.worker_rss_mb = resident_mb()
        conn.send(outcome)
    conn.close()
    os._exit(0)


def _die_with_parent() -> None:
    """Linux: the worker is killed when the search process ends, however it ends (a worker that
    ignores SIGTERM must not outlive a search killed outright)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    parent = multiprocessing.parent_process()
    if parent is not None and parent.pid != os.getppid():  # the parent ended before the request took effect
        os._exit(0)


MAX_WAIT_S = 3600.0
"""Longest single wait for a result (the loop waits again until the deadline): the OS's poll
takes at most about 2.1·10⁶ s."""


def _wait_s(deadline: float) -> float:
    """Seconds to wait now for a result due by `deadline` (monotonic clock)."""
    return min(MAX_WAIT_S, max(0.0, deadline - time.monotonic()))


class ClusterUnavailable(RuntimeError):
    """The Ray address names no running cluster."""


def _evaluate_on_node(config: dict[str, Any]) -> Outcome:
    """A Ray task: replay one candidate; the outcome names the node that replayed it."""
    import ray

    outcome = evaluate(config)
    outcome.worker_rss_mb = resident_mb()
    outcome.node = ray.get_runtime_context().get_node_id()
    return outcome


def _servesim_environment() -> dict[str, str]:
    """The driver's SERVESIM_* settings (timing data path, cache folder, ...), given to every Ray
    task so that a node replays a candidate as the driver would."""
    return {name: value for name, value in os.environ.items() if name.startswith("SERVESIM_")}


RAY_CONNECT_TIMEOUT_S = 60.0
"""How long reaching a cluster may take (an address that accepts connections but never answers
as Ray would otherwise be waited on for ever)."""


PROBE = """
import sys
import ray
ray.init(address=sys.argv[1], include_dashboard=False, log_to_driver=False, configure_logging=False)
ray.shutdown()
"""
"""Connects to the cluster at argv[1] and leaves (a child process: it can be stopped)."""


def _connect(ray: Any, address: str | None) -> None:
    """`ray.init`; ClusterUnavailable when the cluster refuses, or (an explicit address, tried
    first from a child process) does not answer within `RAY_CONNECT_TIMEOUT_S`."""
    if address is not None:
        try:
            subprocess.run([sys.executable, "-c", PROBE, address], stdin=subprocess.DEVNULL,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=RAY_CONNECT_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise ClusterUnavailable(_unreachable(address, f"no answer within {RAY_CONNECT_TIMEOUT_S:g} s")) from None
    ours = signal.getsignal(signal.SIGTERM)
    try:
        ray.init(address=address, include_dashboard=False, log_to_driver=False, configure_logging=False)
    except ConnectionError as exc:
        raise ClusterUnavailable(_unreachable(address, str(exc).splitlines()[0])) from None
    finally:
        if ours is not None:
            signal.signal(signal.SIGTERM, ours)  # ray.init installs its own (an exit without the ledger)


def _unreachable(address: str | None, why: str) -> str:
    return (f"--ray-address {address}: no Ray cluster is reachable there ({why}); start one with `ray start "
            "--head`, pass its address (host:port), or omit --ray-address to start a local Ray instance")


class RayExecutor:
    """Candidates as Ray tasks on a running cluster (`address`) or a local instance."""

    def __init__(self, parallelism: int, timeout_s: float, address: str | None = None) -> None:
        try:
            import ray
        except ImportError:
            raise ImportError("--executor ray needs Ray: pip install 'servesim[ray]'") from None

        if not ray.is_initialized():
            _connect(ray, address)
        self._ray = ray
        # SPREAD: candidates go to every node of the cluster, not first to fill the driver's node
        options: dict[str, Any] = {"num_cpus": 1, "max_retries": 0, "max_calls": RAY_TASKS_PER_WORKER,
                                   "scheduling_strategy": "SPREAD"}
        if env := _servesim_environment():
            options["runtime_env"] = {"env_vars": env}
        self._task = ray.remote(**options)(_evaluate_on_node)
        self.size = max(1, parallelism)
        self.timeout_s = timeout_s
        self.nodes: dict[str, int] = {}
        """Candidates replayed per Ray node id."""
        self.peak_rss_mb = 0.0

    def run(self, jobs: Iterable[Job]) -> Iterator[tuple[int, Outcome]]:
        ray = self._ray
        pending = list(jobs)
        pending.reverse()
        running: dict[Any, tuple[int, float]] = {}
        while pending or running:
            while pending and len(running) < self.size:
                key, config = pending.pop()
                running[self._task.remote(config)] = (key, time.monotonic())
            deadline = min(started for _, started in running.values()) + self.timeout_s
            done, _ = ray.wait(list(running), num_returns=1, timeout=_wait_s(deadline))
            for ref in done:
                key, _ = running.pop(ref)
                try:
                    outcome = ray.get(ref)
                except Exception as exc:  # noqa: BLE001 - a lost task is a failed candidate
                    yield key, Outcome("failed", reason=f"Ray task failed: {type(exc).__name__}: {exc}")
                else:
                    if outcome.node is not None:
                        self.nodes[outcome.node] = self.nodes.get(outcome.node, 0) + 1
                    self.peak_rss_mb = max(self.peak_rss_mb, outcome.worker_rss_mb or 0.0)
                    yield key, outcome
            now = time.monotonic()
            for ref, (key, started) in list(running.items()):
                if started + self.timeout_s <= now:
                    del running[ref]
                    ray.cancel(ref, force=True)
                    yield key, Outcome("timed_out", reason=f"replay ran longer than {self.timeout_s:g} s "
                                                           "(optimizer.candidate_timeout_seconds)",
                                       seconds=self.timeout_s)

    def close(self) -> None:
        """Leave the cluster running (it may be shared); nothing is held between runs."""
