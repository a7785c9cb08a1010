"""The reference's AIConfigurator database: fetched on first use, verified, cached.

The reference (AISimulate 0.1.0.dev2) times its engines from the AIConfigurator ("AIC")
systems tree its wheel bundles, ``aiconfigurator_core/systems`` (per GPU a ``<gpu>.yaml`` of
constants and ``data/<gpu>/`` of measured kernel tables; Apache-2.0). That tree holds backend
versions the ``aiconfigurator-core`` package lacks (vLLM 0.19.0, the reference's default, among
them), so it is servesim's default database. servesim neither installs nor imports the wheel:

* the wheel is read where it is published (`REFERENCE.url`; ``SERVESIM_AIC_DATA_URL`` names a
  mirror or a local copy) with HTTP range requests: its zip directory and ``RECORD`` first, then
  only the parts a run needs — the top-level files, and ``data/<gpu>/`` for each GPU timed;
* ``RECORD``'s lines for the tree must hash to the pinned digest and every member to its
  ``RECORD`` hash, so what lands on disk is byte for byte what the reference ships;
* each part is unpacked into a staging folder and renamed into place under
  ``<cache>/aic-systems/<release>/systems`` (`cache_dir`), with a file lock held: concurrent
  runs neither download twice nor see half a part.

A server that ignores range requests gets the wheel downloaded whole, once, and every part
unpacked. ``servesim data fetch`` fills the cache ahead of time (``--from`` a wheel file on a
machine without network).

One slice of the tree ships inside servesim (`SEED`, ~2 MB): the top-level files and the data
a vLLM run at the reference's default version on H200 reads (the quick start's). A run that
slice covers needs no network; its GPU folder is marked partial (`PARTIAL`) and is replaced by
the whole part as soon as a run needs more of that GPU.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import io
import logging
import os
import re
import shutil
import tempfile
import zipfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servesim.errors import ConfigError, RunError

log = logging.getLogger("servesim")

ENV_CACHE_DIR = "SERVESIM_CACHE_DIR"
ENV_DATA_URL = "SERVESIM_AIC_DATA_URL"
PREFIX = "aiconfigurator_core/systems/"
TOP = ""
"""The part holding every file outside ``data/`` (GPU constants, support matrix)."""
TIMEOUT_S = 60
_TAIL = 1 << 20  # the first request: the archive's last MiB (its directory and RECORD)
_MIN_READ = 1 << 18
_MERGE_GAP = 1 << 20
DEFAULT_BACKEND_VERSIONS = {"vllm": "0.19.0", "sglang": "0.5.10", "trtllm": "1.3.0rc10"}
"""The reference's backend versions when a config omits ``engine.backend_version``."""
SEED = Path(__file__).with_name("aic_seed.tar.xz")
SEED_SLICES = frozenset({("h200_sxm", "vllm", "0.19.0")})
"""(GPU, backend, version) whose data `SEED` carries (with the GPU's NCCL tables)."""
PARTIAL = ".servesim-partial"
"""Marks a GPU folder that holds only the seed's slice of the GPU's data."""


@dataclass(frozen=True)
class Release:
    """A published wheel that carries an AIC systems tree, and the digest that vouches for it."""

    label: str
    url: str
    systems_digest: str
    """sha256 of the wheel's RECORD lines under `PREFIX`, sorted and joined with newlines (the same
    for every platform's wheel of a release)."""


REFERENCE = Release(
    label="aisimulate-0.1.0.dev2",
    url="https://files.pythonhosted.org/packages/5e/4e/3c9c675f239407175aee7b96bc38bc9884baf7081fa064f0bd"
        "096b1b2e5a/aisimulate-0.1.0.dev2-cp311-abi3-manylinux_2_28_x86_64.whl",
    systems_digest="3be64cfb57b99f504dc6745f847c6fbb932caf14825f193016cd42436d9e1714",
)


class DataUnavailable(RunError):
    """The database is neither cached nor obtainable from its source."""


def cache_dir() -> Path:
    """servesim's cache: ``$SERVESIM_CACHE_DIR``, else ``$XDG_CACHE_HOME/servesim``, else ``~/.cache/servesim``."""
    configured = os.environ.get(ENV_CACHE_DIR)
    if configured:
        return Path(configured).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "servesim"


def systems_root(release: Release = REFERENCE) -> Path:
    """Where the release's systems tree is (or will be) unpacked."""
    return cache_dir() / "aic-systems" / release.label / "systems"


def _gpu_part(gpu: str) -> str | None:
    return None if not gpu or "/" in gpu or "\\" in gpu or gpu.startswith(".") else f"data/{gpu}"


def complete(root: Path, part: str) -> bool:
    """Whether `part` is unpacked whole under `root` (not just the seed's slice of it)."""
    return (root / part).is_dir() and not (root / part / PARTIAL).exists()


def missing_parts(root: Path, gpus: Iterable[str]) -> list[str]:
    """The parts still to unpack for `gpus`: the top-level files, then the data of each GPU the
    tree knows (a ``<gpu>.yaml``) but has no whole ``data/<gpu>`` folder for."""
    have_top = root.is_dir()
    parts = [] if have_top else [TOP]
    for gpu in gpus:
        part = _gpu_part(gpu)
        if part and part not in parts and not complete(root, part):
            if not have_top or (root / f"{gpu}.yaml").is_file():
                parts.append(part)
    return parts


def seed_covers(gpus: Iterable[str], backend: str | None, version: str | None) -> bool:
    """Whether the shipped slice holds all a run of `backend` at `version` (None: the reference's
    default) on `gpus` reads."""
    if backend is None:
        return not list(gpus)
    version = version or DEFAULT_BACKEND_VERSIONS.get(backend)
    return all((gpu, backend, version) in SEED_SLICES for gpu in gpus)


def _unpack_seed(root: Path) -> None:
    """Unpack the shipped slice where `root` lacks it (the caller holds the lock)."""
    import tarfile

    gpus = sorted({gpu for gpu, _, _ in SEED_SLICES})
    if root.is_dir() and all((root / "data" / gpu).is_dir() for gpu in gpus):
        return
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=root.parent))
    try:
        with tarfile.open(SEED) as archive:
            archive.extractall(staging, filter="data")
        if not root.is_dir():
            _place(staging, root)
            return
        for gpu in gpus:
            if not (root / "data" / gpu).is_dir():
                _place(staging / "data" / gpu, root / "data" / gpu)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def ensure(gpus: Iterable[str] = (), *, backend: str | None = None, version: str | None = None,
           release: Release = REFERENCE) -> Path:
    """The release's systems tree with its top-level files and the data of `gpus` (names the
    tree does not know are ignored) for a run of `backend` at `version` — unpacked from the
    shipped slice when it covers them, else fetched when missing, with a note on stderr."""
    gpus = list(gpus)
    root = systems_root(release)
    if release is REFERENCE and SEED.is_file() and (not root.is_dir() or seed_covers(gpus, backend, version)):
        with _locked(root.parent):
            _unpack_seed(root)
        if seed_covers(gpus, backend, version):
            return root
    if missing_parts(root, gpus):
        with _locked(root.parent):
            parts = missing_parts(root, gpus)
            if parts:
                with _Wheel.open(_origin(release, None), release, root.parent) as wheel:
                    install(wheel, root, wheel.all_parts() if wheel.whole else parts, note=True)
    return root


def fetch(gpus: Iterable[str] | None = None, *, source: str | None = None,
          release: Release = REFERENCE) -> tuple[Path, list[str]]:
    """Unpack the top-level files and the data of `gpus` (None: every GPU) now, from `source` (a
    wheel file or URL) when given; returns the tree and the parts it unpacked."""
    root = systems_root(release)
    wanted = None if gpus is None else list(gpus)
    with _locked(root.parent):
        with _Wheel.open(_origin(release, source), release, root.parent) as wheel:
            known = [part.removeprefix("data/") for part in wheel.all_parts() if part]
            unknown = [gpu for gpu in wanted or () if gpu not in known]
            if unknown:
                raise ConfigError(f"GPU {unknown[0]!r} is not in {release.label}'s database; it has: "
                                  + ", ".join(known))
            parts = wheel.all_parts() if wanted is None or wheel.whole else [f"data/{g}" for g in wanted]
            return root, install(wheel, root, parts)


def _origin(release: Release, source: str | None) -> str:
    return source or os.environ.get(ENV_DATA_URL) or release.url


def install(wheel: _Wheel, root: Path, parts: list[str], *, note: bool = False) -> list[str]:
    """Unpack the wheel's `parts` (the top-level files first, whenever `root` lacks them) into
    `root`, each atomically; parts already there, or not in the wheel, are skipped. Returns the
    parts unpacked."""
    known = wheel.all_parts()
    parts = ([TOP] if not root.is_dir() else []) + [
        p for p in dict.fromkeys(parts) if p != TOP and p in known and not complete(root, p)]
    if note and parts:
        size = sum(wheel.part_size(p) for p in parts)
        host = re.sub(r"^\w+://([^/]+)/.*$", r"\1", wheel.origin)
        log.warning("servesim: note: fetching the reference's AIConfigurator data once (%s: %.0f MB from %s) "
                    "into %s", ", ".join(p.removeprefix("data/") or "top-level files" for p in parts),
                    size / 1e6, host, root)
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=root.parent))
    try:
        for part in parts:
            tree = staging / (part or "top")
            wheel.extract(wheel.names(part), tree)
            if part == TOP:
                (tree / "data").mkdir(exist_ok=True)
                _place(tree, root)
            else:
                _place(tree / part, root / part)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return parts


def _place(staged: Path, dest: Path) -> None:
    """Rename a staged folder into place (over the seed's slice of it); one placed whole by a
    concurrent run first is kept."""
    if (dest / PARTIAL).exists():
        slice_ = dest.with_name(f".staging-partial-{dest.name}")
        os.rename(dest, slice_)
        shutil.rmtree(slice_, ignore_errors=True)
    try:
        os.rename(staged, dest)
    except OSError:
        if not dest.is_dir():
            raise


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    """Hold the cache folder's lock; clears what a killed run left behind (staging, downloads)."""
    folder.mkdir(parents=True, exist_ok=True)
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX: renames alone keep parts whole
        yield
        return
    with open(folder / ".lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            for stale in folder.glob(".staging-*"):
                shutil.rmtree(stale, ignore_errors=True)
            for stale in folder.glob(".download-*"):
                stale.unlink(missing_ok=True)
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


# -- the wheel -----------------------------------------------------------------------------------

class _NoRanges(Exception):
    """The server answers range requests with the whole file."""


class _RemoteFile(io.RawIOBase):
    """A remote file as a seekable stream; bytes come from HTTP range requests and are kept."""

    def __init__(self, url: str) -> None:
        super().__init__()
        self.url = url
        self._spans: list[tuple[int, bytes]] = []
        self._pos = 0
        self.size = self._get(f"bytes=-{_TAIL}")

    def _get(self, ranges: str) -> int:
        import urllib.request  # only when fetching (it costs ~0.1 s to import)

        request = urllib.request.Request(self.url, headers={"Range": ranges})
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            found = re.fullmatch(r"bytes (\d+)-(\d+)/(\d+)", response.headers.get("Content-Range", ""))
            if response.status != 206 or found is None:
                raise _NoRanges()
            self._spans.append((int(found[1]), response.read()))
        return int(found[3])

    def forget(self) -> None:
        """Drop the bytes held so far (after a part is unpacked)."""
        self._spans.clear()

    def prefetch(self, start: int, end: int) -> None:
        """Fetch bytes [start, end) in one request unless already held."""
        end = min(end, self.size)
        if start < end and self._span(start, end - start) is None:
            self._get(f"bytes={start}-{end - 1}")

    def _span(self, pos: int, n: int) -> tuple[int, bytes] | None:
        for start, data in self._spans:
            if start <= pos and pos + n <= start + len(data):
                return start, data
        return None

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self.size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def readinto(self, buffer: Any) -> int:
        n = min(len(buffer), self.size - self._pos)
        if n <= 0:
            return 0
        if self._span(self._pos, n) is None:
            self.prefetch(self._pos, self._pos + max(n, _MIN_READ))
        start, data = self._span(self._pos, n)  # type: ignore[misc]
        buffer[:n] = data[self._pos - start:self._pos - start + n]
        self._pos += n
        return n


class _Wheel:
    """The systems members of a wheel (a local file, or a remote one read by ranges), checked
    against the release's digest."""

    def __init__(self, archive: zipfile.ZipFile, origin: str, release: Release, remote: _RemoteFile | None,
                 whole: bool) -> None:
        self.archive, self.origin, self.remote, self.whole = archive, origin, remote, whole
        self.hashes = _systems_record(archive, release, origin)
        infos = {info.filename: info for info in archive.infolist()}
        absent = [name for name in self.hashes if PREFIX + name not in infos]
        if absent:
            raise DataUnavailable(f"{origin}: RECORD lists {len(absent)} systems files the archive lacks "
                                  f"(first: {absent[0]})")
        self.infos = {name: infos[PREFIX + name] for name in self.hashes}

    @classmethod
    @contextlib.contextmanager
    def open(cls, origin: str, release: Release, workdir: Path) -> Iterator[_Wheel]:
        """The wheel at `origin` (a path or an http(s) URL); a server without range support has
        the whole file downloaded into `workdir` (and removed after)."""
        downloaded: Path | None = None
        try:
            if re.match(r"https?://", origin):
                try:
                    remote = _RemoteFile(origin)
                except _NoRanges:
                    downloaded = _download(origin, workdir)
                    with zipfile.ZipFile(downloaded) as archive:
                        yield cls(archive, origin, release, None, whole=True)
                else:
                    with zipfile.ZipFile(remote) as archive:
                        yield cls(archive, origin, release, remote, whole=False)
            else:
                with zipfile.ZipFile(Path(origin).expanduser()) as archive:
                    yield cls(archive, origin, release, None, whole=False)
        except (OSError, zipfile.BadZipFile, ValueError) as exc:  # URLError is an OSError
            raise DataUnavailable(_unavailable(origin, exc)) from None
        finally:
            if downloaded is not None:
                downloaded.unlink(missing_ok=True)

    def all_parts(self) -> list[str]:
        """Every part of the tree: the top-level files and each ``data/<gpu>``."""
        gpus = {name.split("/")[1] for name in self.hashes if name.startswith("data/") and name.count("/") > 1}
        return [TOP] + [f"data/{gpu}" for gpu in sorted(gpus)]

    def names(self, part: str) -> list[str]:
        """The files of one part, relative to the tree."""
        if part == TOP:
            return [name for name in self.hashes if not name.startswith("data/")]
        return [name for name in self.hashes if name.startswith(part + "/")]

    def part_size(self, part: str) -> int:
        return sum(self.infos[name].compress_size for name in self.names(part))

    def extract(self, names: list[str], dest: Path) -> None:
        """Unpack `names` under `dest`, each checked against its RECORD hash."""
        if self.remote is not None:
            for start, end in _runs(self.infos[name] for name in names):
                self.remote.prefetch(start, end)
        for name in names:
            data = self.archive.read(self.infos[name])
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            if digest != self.hashes[name]:
                raise DataUnavailable(f"{self.origin}: {PREFIX}{name} does not match its RECORD hash")
            target = dest / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        if self.remote is not None:
            self.remote.forget()


def _systems_record(archive: zipfile.ZipFile, release: Release, origin: str) -> dict[str, str]:
    """{tree-relative name: urlsafe-base64 sha256} from RECORD, whose systems lines must hash to
    the release's digest."""
    records = [n for n in archive.namelist() if n.endswith(".dist-info/RECORD")]
    if len(records) != 1:
        raise DataUnavailable(f"{origin}: not a wheel (no single .dist-info/RECORD)")
    lines = sorted(line for line in archive.read(records[0]).decode().splitlines() if line.startswith(PREFIX))
    if hashlib.sha256("\n".join(lines).encode()).hexdigest() != release.systems_digest:
        raise DataUnavailable(f"{origin}: its AIConfigurator systems files are not those of {release.label} "
                              "(the RECORD digest differs from the one servesim pins)")
    hashes = {}
    for line in lines:
        name, digest, _size = line.rsplit(",", 2)
        if not digest.startswith("sha256="):
            raise DataUnavailable(f"{origin}: RECORD line without a sha256: {line}")
        hashes[name.removeprefix(PREFIX)] = digest.removeprefix("sha256=")
    return hashes


def _runs(infos: Iterable[zipfile.ZipInfo]) -> list[tuple[int, int]]:
    """Byte ranges covering the members' local headers and data, neighbours merged."""
    spans = sorted((i.header_offset, i.header_offset + 30 + len(i.filename.encode()) + 1024 + i.compress_size)
                   for i in infos)
    runs: list[tuple[int, int]] = []
    for start, end in spans:
        if runs and start - runs[-1][1] <= _MERGE_GAP:
            runs[-1] = (runs[-1][0], max(runs[-1][1], end))
        else:
            runs.append((start, end))
    return runs


def _download(url: str, workdir: Path) -> Path:
    """The whole file at `url`, in `workdir`."""
    import urllib.request

    workdir.mkdir(parents=True, exist_ok=True)
    handle, name = tempfile.mkstemp(prefix=".download-", suffix=".whl", dir=workdir)
    with os.fdopen(handle, "wb") as out, urllib.request.urlopen(url, timeout=TIMEOUT_S) as response:
        shutil.copyfileobj(response, out, 1 << 20)
    return Path(name)


def _unavailable(origin: str, exc: BaseException) -> str:
    reason = getattr(exc, "reason", None) or exc
    return (f"the reference's AIConfigurator database is not in servesim's cache ({cache_dir()}) and could "
            f"not be fetched from {origin} ({type(exc).__name__}: {reason}). Fetch it where the network is "
            "reachable with `servesim data fetch` (or `servesim data fetch --from aisimulate-0.1.0.dev2-...whl` "
            f"for a downloaded wheel; {ENV_DATA_URL} names a mirror), or point SERVESIM_AIC_SYSTEMS_PATH at "
            "an AIConfigurator systems directory")
