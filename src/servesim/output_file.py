"""One result file named by an option (`calibrate -o`, `validate -o`, `compare -o`): checked
before the work, written atomically after it.

`OutputFile.check` runs before a command starts its work: the file's folder is created if
needed and probed with a hidden temporary file, the file itself must not be a directory and,
when it exists, must be writable (and, for a file whose section is replaced, readable UTF-8
text) — else a `ConfigError` (exit 2) naming the option and the reason, and nothing is lost.
`OutputFile.write` writes the new text to a hidden temporary sibling (created new, never
through a symbolic link), flushes it to disk and renames it over the target with SIGINT and
SIGTERM held back: the previous file stays whole until the new one is complete, and a target
that is a symbolic link is replaced by the file, never written through. A failure there (a full
disk) is an `OutputError` (exit 1) and the previous file stays.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from servesim.errors import ConfigError
from servesim.outputs import OutputError, _fsync, _remove, _signals_held, create_hidden, os_reason


class OutputFile:
    """The file `path` that command-line option `option` names."""

    def __init__(self, option: str, path: str | Path) -> None:
        self.option = option
        self.path = Path(os.path.abspath(path))

    def check(self, *, read_existing: bool = False) -> str | None:
        """Fail now (`ConfigError`) if the file could not be written later; with
        `read_existing`, the file's current text (None when there is none)."""
        where = f"{self.option} {self.path}"
        try:
            if self.path.is_dir() and not self.path.is_symlink():
                raise ConfigError(f"{where}: is a directory")
            _refuse_special(self.path, where)
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with _signals_held():  # an interrupt here must not leave the probe behind
                handle, probe = create_hidden(self.path.parent, ".probe")
                os.close(handle)
                os.unlink(probe)
            exists = self.path.exists() and not self.path.is_symlink()
            if exists and not os.access(self.path, os.W_OK):
                raise ConfigError(f"{where}: the file is not writable")
            if read_existing and exists:
                return self.path.read_text(encoding="utf-8")
        except UnicodeDecodeError as exc:
            raise ConfigError(f"{where}: the existing file is not UTF-8 text ({exc.reason})") from None
        except OSError as exc:
            raise ConfigError(f"{where}: {os_reason(exc)}") from None
        return None

    def write(self, text: str) -> None:
        """Replace the file by `text`, atomically (see the module docstring)."""
        folder = self.path.parent
        temp: Path | None = None
        try:
            with _signals_held():
                handle, temp = create_hidden(folder, ".tmp", mode=0o666)  # the umask applies
            with os.fdopen(handle, "w", encoding="utf-8") as file:
                file.write(text)
            self._keep_mode(temp)
            _fsync(temp)
            with _signals_held():
                os.replace(temp, self.path)
                temp = None
        except OSError as exc:
            raise OutputError(f"cannot write {self.path}: {os_reason(exc)}") from None
        finally:
            if temp is not None:
                _remove(temp)

    def _keep_mode(self, temp: Path) -> None:
        """Give the new file the permissions of the one it replaces."""
        try:
            previous = os.lstat(self.path)
        except OSError:
            return
        if stat.S_ISREG(previous.st_mode):
            os.chmod(temp, stat.S_IMODE(previous.st_mode))


_SYSTEM = ("/dev", "/proc", "/sys")


def _refuse_special(path: Path, where: str) -> None:
    """A target that is (or links to) a device, a pipe or a socket, or that names one of the
    system's device paths (`/dev/stdout` links to a file of `/proc`), is refused: the result
    would replace it, and `/dev/full` or `/dev/stdout` are not files to overwrite."""
    if any(_system_path(hop) for hop in _link_chain(str(path))):
        raise ConfigError(f"{where}: a system device path, not a file to replace; name a file to write")
    for status in (os.lstat, os.stat):
        try:
            mode = status(path).st_mode
        except FileNotFoundError:
            return
        if not (stat.S_ISREG(mode) or stat.S_ISLNK(mode) or stat.S_ISDIR(mode)):
            raise ConfigError(f"{where}: not a regular file (a device, pipe or socket); name a file to write")


def _system_path(path: str) -> bool:
    return any(path == root or path.startswith(root + os.sep) for root in _SYSTEM)


def _link_chain(path: str) -> list[str]:
    """`path` and every path its chain of symbolic links goes through (at most 40 hops)."""
    chain = [path]
    for _ in range(40):
        try:
            target = os.readlink(path)
        except OSError:
            break
        path = os.path.normpath(os.path.join(os.path.dirname(path), target))
        chain.append(path)
    return chain

