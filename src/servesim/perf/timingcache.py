"""A persistent memo of AIConfigurator's answers, shared by every servesim process.

A compiled AIC engine gives the same answer to the same question every time, and a replay asks
the same questions every time it runs (P3 asks ~210,000 distinct decode questions). So the raw
float64 results of ``predict_decode_latency(batch, ctx, 2)`` and
``predict_prefill_latency(batch, isl, prefix)`` are kept on disk, one file per engine identity,
and read back on the next run, search candidate or worker process: no value is recomputed,
interpolated or rounded, so reports stay byte-identical.

An engine's identity (`engine_identity`) is everything its answers depend on: the compile
arguments (`servesim.perf.aic.AicKey`), the aiconfigurator-core build, the database (the pinned
release digest for servesim's managed copy, else the path, size and mtime of each file of the
GPU's data and of the top-level files) and the model config's bytes. Its SHA-256 names the file.

File layout (native byte order, recorded in the header)::

    MAGIC | uint64 header length | header JSON (identity, counts, CRC-32), padded to 8 bytes
    | int64 decode keys [2n] | float64 decode values [n] | int64 prefill keys [3m] | float64 values [m]

A memo is read when its engine is first set up in a process and written back by `save` (at the
end of each run) when it has new entries: under a lock, merged with what other processes wrote
meanwhile, into a temporary file renamed over the old one. Clean memos pick up entries other
processes added since. A file that cannot be read is ignored with a warning (and rewritten);
failing I/O never fails or changes a run. ``SERVESIM_TIMING_CACHE=off`` turns the cache off (or
names its directory; default ``<cache>/timing``, see `servesim.perf.aicdata.cache_dir`);
``SERVESIM_TIMING_CACHE_MB`` bounds its size (default 512): the least recently used files go.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import json
import logging
import os
import struct
import sys
import zlib
from array import array
from collections.abc import Iterator
from itertools import chain
from pathlib import Path
from typing import Any

log = logging.getLogger("servesim")

ENV = "SERVESIM_TIMING_CACHE"
ENV_MB = "SERVESIM_TIMING_CACHE_MB"
DEFAULT_MB = 512
OFF = ("off", "0", "false", "no", "none")
MAGIC = b"SSIMTC01"
SUFFIX = ".aictc"
_LENGTH = struct.Struct("<Q")

Decode = dict[tuple[int, int], float]
Prefill = dict[tuple[int, int, int], float]


def cache_root() -> Path | None:
    """The cache's directory, or None when ``SERVESIM_TIMING_CACHE`` turns it off."""
    configured = os.environ.get(ENV, "").strip()
    if configured.lower() in OFF:
        return None
    if configured and configured.lower() != "on":
        return Path(configured).expanduser()
    from servesim.perf.aicdata import cache_dir

    return cache_dir() / "timing"


class EngineMemo:
    """The raw answers of one engine identity: loaded from its file, added to by the run."""

    def __init__(self, identity: dict[str, Any] | None = None, path: Path | None = None) -> None:
        self.identity = identity
        self.path = path
        self.decode: Decode = {}
        self.prefill: Prefill = {}
        self.fresh_decode: list[tuple[int, int]] = []
        """Decode keys computed by this process and not yet written."""
        self.fresh_prefill: list[tuple[int, int, int]] = []
        self._seen: tuple[int, int, int] | None = None
        """The file's (inode, size, mtime) when last read or written."""

    @property
    def dirty(self) -> bool:
        return bool(self.fresh_decode or self.fresh_prefill)

    def load(self) -> None:
        """Read the file into the memo, and mark it used (eviction goes by last use)."""
        if self.path is not None and _guarded(f"reading {self.path}", self._merge_file):
            with contextlib.suppress(OSError):  # a read-only cache is still a cache
                os.utime(self.path)
                self._seen = _signature(self.path)

    def sync(self) -> None:
        """Write new entries (merged with the file), or read what others wrote since."""
        if self.path is None:
            return
        if self.dirty:
            _guarded(f"writing {self.path}", self._write)
        elif self._changed():
            _guarded(f"reading {self.path}", self._merge_file)

    def _changed(self) -> bool:
        try:
            return _signature(self.path) != self._seen  # type: ignore[arg-type]
        except OSError:
            return False

    def _merge_file(self) -> bool:
        """Add the file's entries (an engine's answers do not vary: any already here are equal);
        False when there is no file."""
        assert self.path is not None
        try:
            blob = self.path.read_bytes()
            seen = _signature(self.path)
        except FileNotFoundError:
            return False
        decode, prefill = parse(blob, self.identity)
        self._seen = seen
        self.decode.update(decode)
        self.prefill.update(prefill)
        return True

    def _write(self) -> None:
        assert self.path is not None
        folder = self.path.parent
        folder.mkdir(parents=True, exist_ok=True)
        with _locked(folder):
            try:
                self._merge_file()
            except (OSError, ValueError) as exc:
                _warn_once(f"{self.path}: {exc}; rewriting it")
            temp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
            try:
                temp.write_bytes(serialize(self.identity or {}, self.decode, self.prefill))
                os.replace(temp, self.path)
            finally:
                temp.unlink(missing_ok=True)
            self._seen = _signature(self.path)
        self.fresh_decode.clear()
        self.fresh_prefill.clear()
        evict(folder, limit_bytes(), keep=self.path)


def _signature(path: Path) -> tuple[int, int, int]:
    st = path.stat()
    return st.st_ino, st.st_size, st.st_mtime_ns


# -- the file format ------------------------------------------------------------------------------

def serialize(identity: dict[str, Any], decode: Decode, prefill: Prefill) -> bytes:
    """A memo file's bytes."""
    payload = b"".join((array("q", chain.from_iterable(decode)).tobytes(), array("d", decode.values()).tobytes(),
                        array("q", chain.from_iterable(prefill)).tobytes(), array("d", prefill.values()).tobytes()))
    header = json.dumps({"identity": identity, "byteorder": sys.byteorder, "decode": len(decode),
                         "prefill": len(prefill), "crc32": zlib.crc32(payload)}, sort_keys=True).encode()
    header += b" " * (-len(header) % 8)
    return MAGIC + _LENGTH.pack(len(header)) + header + payload


def read_header(blob: bytes) -> tuple[dict[str, Any], int]:
    """A memo file's header and where its payload starts; ValueError when it is not one."""
    if blob[:len(MAGIC)] != MAGIC or len(blob) < len(MAGIC) + _LENGTH.size:
        raise ValueError("not a servesim timing cache file")
    start = len(MAGIC) + _LENGTH.size
    (length,) = _LENGTH.unpack_from(blob, len(MAGIC))
    header = json.loads(blob[start:start + length])
    if not isinstance(header, dict):
        raise ValueError("malformed header")
    return header, start + length


def file_header(path: Path) -> dict[str, Any]:
    """The header of the memo file at `path` (without reading its entries)."""
    with open(path, "rb") as handle:
        head = handle.read(len(MAGIC) + _LENGTH.size)
        if len(head) < len(MAGIC) + _LENGTH.size:
            raise ValueError("not a servesim timing cache file")
        (length,) = _LENGTH.unpack_from(head, len(MAGIC))
        return read_header(head + handle.read(length))[0]


def parse(blob: bytes, identity: dict[str, Any] | None) -> tuple[Decode, Prefill]:
    """The entries of a memo file of `identity`; ValueError for a damaged or foreign file."""
    header, start = read_header(blob)
    if header.get("identity") != identity or header.get("byteorder") != sys.byteorder:
        raise ValueError("written for another engine or machine")
    try:
        n, m, crc = int(header["decode"]), int(header["prefill"]), int(header["crc32"])
    except (KeyError, TypeError, ValueError):
        raise ValueError("malformed header") from None
    payload = memoryview(blob)[start:]
    if len(payload) != 8 * (3 * n + 4 * m):
        raise ValueError(f"{len(payload)} payload bytes where {8 * (3 * n + 4 * m)} belong (truncated?)")
    if zlib.crc32(payload) != crc:
        raise ValueError("checksum mismatch")
    rest = payload[24 * n:]
    return _entries(payload[:16 * n], 2, payload[16 * n:24 * n]), _entries(rest[:24 * m], 3, rest[24 * m:])


def _entries(keys: memoryview, width: int, values: memoryview) -> dict[Any, float]:
    """{key tuple: value} from int64 keys of `width` and float64 values."""
    ints = keys.cast("q").tolist()
    columns = [ints[i::width] for i in range(width)]
    return dict(zip(zip(*columns, strict=True), values.cast("d").tolist(), strict=True))


# -- memos of this process ------------------------------------------------------------------------

_MEMOS: dict[str, EngineMemo] = {}


def engine_memo(identity: dict[str, Any]) -> EngineMemo:
    """The memo of an engine identity in this process (read from the cache on first use; an
    in-memory one when the cache is off)."""
    text = json.dumps(identity, sort_keys=True)
    digest = hashlib.sha256(text.encode()).hexdigest()
    memo = _MEMOS.get(digest)
    if memo is None:
        identity = json.loads(text)  # as a file's header reads back
        root = cache_root()
        memo = _MEMOS[digest] = EngineMemo(identity, root / f"{digest[:40]}{SUFFIX}" if root else None)
        memo.load()
    return memo


def save() -> None:
    """Write every memo's new entries (and read what other processes added); never raises."""
    for memo in list(_MEMOS.values()):
        memo.sync()


atexit.register(save)  # the `servesim` command ends with os._exit: it saves before


# -- identity -------------------------------------------------------------------------------------

def engine_identity(key: dict[str, Any], systems: Path, data: Path) -> dict[str, Any]:
    """The identity of an engine compiled from `key` (`servesim.perf.aic.AicKey` as a dict) on
    the database `systems` whose data for the GPU is in `data`. Raises `ModelNotFound` for a
    model without a config."""
    from servesim.perf import aicdata
    from servesim.perf.models import find_model_files

    _, config, quant = find_model_files(key["model"])
    model_files = files_digest([config] + ([quant] if quant else []))
    if systems == aicdata.systems_root():
        release = aicdata.REFERENCE
        database = f"{release.label}:{release.systems_digest}" + (
            ":partial" if (data / aicdata.PARTIAL).exists() else "")
    else:
        database = f"{systems.resolve()}:{stat_digest(systems, [data])}"
    return {"key": dict(key, systems_path=None), "model_files": model_files, "database": database,
            "aiconfigurator_core": package_identity(),
            "strict_provenance": os.environ.get("AIC_STRICT_PROVENANCE", "")}


def files_digest(paths: list[Path]) -> str:
    """SHA-256 of the files' bytes (a missing one counts as empty)."""
    digest = hashlib.sha256()
    for path in paths:
        with contextlib.suppress(OSError):
            digest.update(path.read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()


def stat_digest(root: Path, folders: list[Path]) -> str:
    """SHA-256 of the name, size and mtime of `root`'s own files and of every file under
    `folders` (a cheap fingerprint of a database that no digest vouches for)."""
    entries = []
    with contextlib.suppress(OSError):
        entries = [p for p in root.iterdir() if p.is_file()]
    for folder in folders:
        entries += [p for p in folder.rglob("*") if p.is_file()]
    digest = hashlib.sha256()
    for path in sorted(entries):
        with contextlib.suppress(OSError):
            st = path.stat()
            digest.update(f"{path.relative_to(root)}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def package_identity() -> str:
    """The installed aiconfigurator-core build: its dist-info name and its compiled modules' sizes
    and mtimes (read from the file system: importlib.metadata costs ~0.1 s)."""
    from servesim.perf.models import aic_package_dir

    package = aic_package_dir()
    if package is None:
        return "absent"
    parts = sorted(p.name for p in package.parent.glob("aiconfigurator_core-*.dist-info"))
    for path in sorted(package.glob("*.so")) + sorted(package.glob("*.pyd")):
        st = path.stat()
        parts.append(f"{path.name}:{st.st_size}:{st.st_mtime_ns}")
    return ";".join(parts)


# -- the folder -----------------------------------------------------------------------------------

def limit_bytes() -> int:
    """The cache's size bound (``SERVESIM_TIMING_CACHE_MB``, default `DEFAULT_MB`)."""
    try:
        return int(float(os.environ.get(ENV_MB, DEFAULT_MB)) * 1e6)
    except ValueError:
        return DEFAULT_MB * 10**6


def _listing(folder: Path) -> list[tuple[int, Path, int]]:
    """(last use, path, size) of the memo files in `folder`, least recently used first."""
    found = []
    for path in folder.glob(f"*{SUFFIX}"):
        with contextlib.suppress(OSError):  # removed by another process meanwhile
            st = path.stat()
            found.append((st.st_mtime_ns, path, st.st_size))
    return sorted(found)


def files(folder: Path) -> list[Path]:
    """The memo files in `folder`, least recently used first."""
    return [path for _, path, _ in _listing(folder)]


def evict(folder: Path, limit: int, keep: Path | None = None) -> list[Path]:
    """Remove the least recently used files until the folder is within `limit` bytes."""
    found = _listing(folder)
    total = sum(size for _, _, size in found)
    removed = []
    for _, path, size in found:
        if total <= limit:
            break
        if path != keep:
            path.unlink(missing_ok=True)
            removed.append(path)
            total -= size
    return removed


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX: the rename alone keeps files whole
        yield
        return
    with open(folder / ".lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


_WARNED = False


def _warn_once(message: str) -> None:
    global _WARNED
    if not _WARNED:
        _WARNED = True
        log.warning("servesim: warning: timing cache: %s (results are unaffected)", message)


def _guarded(what: str, action: Any) -> Any:
    """`action()`, or None with a warning (once per process) when it fails."""
    try:
        return action()
    except Exception as exc:  # noqa: BLE001 - the cache must never fail a run
        _warn_once(f"{what}: {type(exc).__name__}: {exc}")
        return None
