"""Writing a run's result files so that nothing is ever half-written or lost.

The output folder is checked before the run (so an unusable location fails at once, exit 2).
Each file is written to a hidden temporary sibling and flushed to disk; only when every file of
the new set is complete are they moved into place together — with SIGINT/SIGTERM held back for
those few renames, and rolled back if one fails. With ``--overwrite`` the previous results are
therefore replaced only by a complete new set: a failed or interrupted run leaves them as they
were, and a run that completes never leaves a mix of old and new files.
"""

from __future__ import annotations

import errno
import os
import re
import signal
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from servesim.errors import ConfigError, RunError

KNOWN_OUTPUTS = ("prediction.json", "requests.jsonl", "requests.parquet", "workers.json", "unreleased.json",
                 "report.html", "recommendation.json", "recommendation.csv", "pareto.csv")
"""Files servesim owns in an output folder (replaced or removed by ``--overwrite``)."""
_RECOMMENDATION = re.compile(r"^\d{4}\.yaml$")
_TEMP_PREFIX = ".servesim-"


class OutputError(RunError):
    """A result file could not be written (disk full, I/O error); the message names the file."""


def os_reason(exc: OSError) -> str:
    """The operating system's words for an error ('No space left on device')."""
    if exc.strerror:
        return exc.strerror
    return os.strerror(exc.errno) if exc.errno else str(exc)


def prepare_folder(path: Path, overwrite: bool, subfolders: Iterable[str] = ()) -> None:
    """Create the output folder if needed and check that results can be written there.

    Raises ConfigError (exit 2) naming the folder and the reason when it is not a usable
    location, when it already holds files and `overwrite` is off, or when one of the
    `subfolders` the run writes into is a symbolic link or not a directory (results are written
    inside the output folder only).
    """
    where = f"--output-dir {path}"
    try:
        if path.exists() and not path.is_dir():
            raise ConfigError(f"{where}: not a directory")
        for name in subfolders:
            problem = _subfolder_problem(path, name)
            if problem is not None:
                raise ConfigError(f"{where}: {problem}")
        if path.is_dir() and any(path.iterdir()) and not overwrite:
            raise ConfigError(f"{where} is not empty; use --overwrite to replace its outputs")
        path.mkdir(parents=True, exist_ok=True)
        handle, probe = create_hidden(path, ".probe")
        os.close(handle)
        os.unlink(probe)
    except OSError as exc:
        raise ConfigError(f"{where}: {os_reason(exc)}") from None


def _subfolder_problem(folder: Path, name: str) -> str | None:
    """Why results cannot go into `folder/name` (None: they can — it is absent or a directory of
    the folder's own, not a symbolic link out of it)."""
    sub = folder / name
    if sub.is_symlink():
        return f"{name} is a symbolic link; servesim writes only inside the output folder"
    if sub.exists() and not sub.is_dir():
        return f"{name} is not a directory"
    return None


def clear_outputs(path: Path) -> None:
    """Remove servesim's own files (its outputs, numbered recommendations) from the folder."""
    try:
        for name in owned_files(path):
            (path / name).unlink(missing_ok=True)
    except OSError as exc:
        raise ConfigError(f"--output-dir {path}: {os_reason(exc)}") from None


def owned_files(folder: Path, owned: Iterable[str] = KNOWN_OUTPUTS, numbered: bool = True) -> list[str]:
    """servesim's files in the folder: its outputs and (`numbered`) numbered recommendations."""
    names = [name for name in owned if (folder / name).is_file() or (folder / name).is_symlink()]
    recommendations = folder / "recommendations"
    if numbered and recommendations.is_dir() and not recommendations.is_symlink():  # never a link out of the folder
        names += [f"recommendations/{item.name}" for item in sorted(recommendations.iterdir())
                  if _RECOMMENDATION.match(item.name)]
    return names


class OutputSet:
    """The result files of one run, staged beside their final names and committed together.

    Use as a context manager: files staged but not committed, and scratch files, are removed
    on exit.
    """

    def __init__(self, folder: Path, owned: Iterable[str] = KNOWN_OUTPUTS, numbered: bool = True) -> None:
        self.folder = folder
        self.owned = tuple(owned)
        self.numbered = numbered  # the numbered recommendations are among the files it replaces
        self._staged: dict[str, Path] = {}
        self._scratch: list[Path] = []

    def __enter__(self) -> OutputSet:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.discard()
        for path in self._scratch:
            _remove(path)
        self._scratch.clear()

    def scratch(self) -> Path:
        """A new empty hidden file in the folder for work in progress (never committed; removed
        on exit)."""
        try:
            with _signals_held():  # an interrupt here must not leave an unregistered file
                handle, path = create_hidden(self.folder, ".spool")
                self._scratch.append(path)
            os.close(handle)
        except OSError as exc:
            raise OutputError(f"cannot write in {self.folder}: {os_reason(exc)}") from None
        return path

    def stage(self, name: str, text: str) -> None:
        """Write `text` to a temporary sibling of `name` and flush it to disk."""
        self.stage_file(name, lambda path: path.write_text(text, encoding="utf-8"))

    def stage_file(self, name: str, write: Callable[[Path], object]) -> None:
        """Let `write` fill a temporary sibling of `name` (a path it may overwrite), then flush
        that file to disk."""
        target = self.folder / name
        try:
            if target.parent != self.folder:
                problem = _subfolder_problem(self.folder, target.parent.name)
                if problem is not None:
                    raise OutputError(f"cannot write {target}: {problem}")
            target.parent.mkdir(exist_ok=True)
            with _signals_held():  # an interrupt here must not leave an unregistered temporary file
                handle, temp = create_hidden(target.parent, ".tmp", mode=0o666)  # the umask applies
                self._staged[name] = temp
            os.close(handle)
            write(temp)
            _fsync(temp)
        except OSError as exc:
            raise OutputError(f"cannot write {target}: {os_reason(exc)}") from None

    def commit(self) -> None:
        """Put every staged file in place and remove servesim's other files from the folder.

        Either all of it happens or none of it: a failure restores the previous files.
        """
        stale = [name for name in owned_files(self.folder, self.owned, self.numbered) if name not in self._staged]
        with _signals_held():
            backups = self._move_aside(list(self._staged) + stale)
            placed: list[Path] = []
            try:
                for name, temp in self._staged.items():
                    os.replace(temp, self.folder / name)
                    placed.append(self.folder / name)
            except OSError as exc:
                _restore(placed, backups)
                raise OutputError(f"cannot write {self.folder / name}: {os_reason(exc)}") from None
            self._staged.clear()
            for backup in backups.values():
                _remove(backup)
        _sync_folder(self.folder)

    def discard(self) -> None:
        """Remove the staged files (the folder keeps what it had)."""
        for temp in self._staged.values():
            _remove(temp)
        self._staged.clear()

    def _move_aside(self, names: list[str]) -> dict[Path, Path]:
        """Rename the existing files among `names` to hidden backups: {target: backup}."""
        backups: dict[Path, Path] = {}
        try:
            for name in names:
                target = self.folder / name
                if target.exists() or target.is_symlink():  # a link itself is moved, never its target
                    backup = target.with_name(f"{_TEMP_PREFIX}{target.name}.{os.getpid()}.previous")
                    os.replace(target, backup)
                    backups[target] = backup
        except OSError as exc:
            _restore([], backups)
            raise OutputError(f"cannot replace {target}: {os_reason(exc)}") from None
        return backups


_CREATE_FLAGS = os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
_CREATE_ATTEMPTS = 100


def create_hidden(folder: Path, suffix: str, mode: int = 0o600) -> tuple[int, Path]:
    """Create a new hidden file with a random name in `folder` — never an existing one (as
    `tempfile.mkstemp`, without importing it: start-up time); return its open descriptor and path."""
    for _ in range(_CREATE_ATTEMPTS):
        path = folder / f"{_TEMP_PREFIX}{os.urandom(6).hex()}{suffix}"
        try:
            return os.open(path, _CREATE_FLAGS, mode), path
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, f"no free name for a hidden file in {folder}")


def _fsync(path: Path) -> None:
    """Flush a written file to disk (where a full disk shows up on some file systems)."""
    handle = os.open(path, os.O_RDONLY)
    try:
        os.fsync(handle)
    finally:
        os.close(handle)


def _restore(placed: list[Path], backups: dict[Path, Path]) -> None:
    """Undo a partial commit: remove the new files, put the previous ones back (a previous file
    that cannot be put back stays in its hidden backup beside its name)."""
    for target in placed:
        _remove(target)
    for target, backup in backups.items():
        try:
            os.replace(backup, target)
        except OSError:
            pass


def _remove(path: Path) -> None:
    """Delete a file if it is there (best effort: a leftover hidden file harms nothing)."""
    try:
        path.unlink()
    except OSError:
        pass


def _sync_folder(folder: Path) -> None:
    """Make the renames durable (best effort: not every system can sync a directory)."""
    try:
        handle = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(handle)
    except OSError:
        pass
    finally:
        os.close(handle)


_HELD = (signal.SIGINT, signal.SIGTERM)


@contextmanager
def _signals_held() -> Iterator[None]:
    """Hold SIGINT and SIGTERM back until the block ends, then deliver the first one that came.

    Python runs signal handlers in the main thread only, so the handlers are swapped there (in
    another thread, no handler can interrupt the block anyway).
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    previous = {}
    for signum in _HELD:
        if signal.getsignal(signum) is not None:  # None: installed outside Python, left alone
            previous[signum] = signal.signal(signum, lambda number, frame: caught.append(number))
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if caught:
            signal.raise_signal(caught[0])
