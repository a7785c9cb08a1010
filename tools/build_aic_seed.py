"""Build ``src/servesim/perf/aic_seed.tar.xz``: the slice of the reference's AIC database that
ships inside servesim (`servesim.perf.aicdata.SEED_SLICES`), taken from servesim's verified
cache of the pinned release.

    python tools/build_aic_seed.py      # fetches the GPUs first if the cache lacks them

The archive is reproducible (sorted members, zero times and owners): rebuilding it from the
same release gives the same bytes.
"""

from __future__ import annotations

import io
import lzma
import tarfile
from pathlib import Path

from servesim.perf import aicdata

COMM = "comm/nccl"
"""The GPU's NCCL tables: every backend's runs read them for tensor-parallel all-reduce."""


def members(root: Path) -> list[Path]:
    """The seed's files under `root`, relative: the top-level files and each slice's data."""
    top = [p for p in root.rglob("*") if p.is_file() and p.relative_to(root).parts[0] != "data"]
    data = []
    for gpu, backend, version in sorted(aicdata.SEED_SLICES):
        folder = root / "data" / gpu
        data += [p for p in folder.rglob("*") if p.is_file() and
                 (f"/{backend}/{version}/" in f"/{p.relative_to(folder).as_posix()}"
                  or p.relative_to(folder).as_posix().startswith(COMM + "/"))]
    return sorted(p.relative_to(root) for p in top + data)


def _info(name: str, size: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = size, 0, 0o644
    return info


def build(root: Path, out: Path) -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for name in members(root):
            data = (root / name).read_bytes()
            archive.addfile(_info(name.as_posix(), len(data)), io.BytesIO(data))
        for gpu in sorted({gpu for gpu, _, _ in aicdata.SEED_SLICES}):
            archive.addfile(_info(f"data/{gpu}/{aicdata.PARTIAL}", 0), io.BytesIO(b""))
    out.write_bytes(lzma.compress(buffer.getvalue(), preset=9 | lzma.PRESET_EXTREME))


if __name__ == "__main__":
    gpus = sorted({gpu for gpu, _, _ in aicdata.SEED_SLICES})
    root, _ = aicdata.fetch(gpus)
    build(root, aicdata.SEED)
    print(f"{aicdata.SEED}: {aicdata.SEED.stat().st_size / 1e6:.2f} MB")
