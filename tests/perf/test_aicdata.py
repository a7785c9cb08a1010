"""servesim's copy of the reference's AIC database: fetch, verification, cache, concurrency.

A small wheel built here is served by a real HTTP server on 127.0.0.1 (with and without range
support); servesim's fetcher reads it exactly as it reads the published wheel. The last tests
use the real pinned release (the package index is reachable wherever the suite runs).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import subprocess
import sys
import tarfile
import threading
import zipfile
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from conftest import canonical
from servesim.api import simulate
from servesim.config.load import load_config
from servesim.errors import ConfigError
from servesim.perf import aicdata

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

PREFIX = aicdata.PREFIX
FILES = {
    "gpu_a.yaml": b"data_dir: data/gpu_a\ngpu: {mem_capacity: 1}\n",
    "gpu_b.yaml": b"data_dir: data/gpu_b\n",
    "notes.yaml": b"not a gpu\n",
    "support_matrix/matrix.csv": b"a,b\n1,2\n",
    "data/gpu_a/gemm/vllm/1.0/gemm_perf.parquet": os.urandom(300_000),
    "data/gpu_a/attention/vllm/1.0/context_attention_perf.parquet": os.urandom(200_000),
    "data/gpu_b/gemm/vllm/1.0/gemm_perf.parquet": os.urandom(4_000_000),
}


def _b64sha(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def build_wheel(path: Path, files: dict[str, bytes] = FILES, tamper: str | None = None) -> aicdata.Release:
    """A wheel holding `files` under the systems prefix; `tamper` names a member whose bytes are
    changed after RECORD was written. Returns a release pinning its RECORD digest."""
    record = [f"{PREFIX}{name},sha256={_b64sha(data)},{len(data)}" for name, data in files.items()]
    record += ["other/module.py,sha256=x,1", "pkg-1.dist-info/RECORD,,"]
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("other/module.py", b"print()\n" * 50_000)
        for name, data in files.items():
            archive.writestr(PREFIX + name, data + b"!" if name == tamper else data)
        archive.writestr("pkg-1.dist-info/RECORD", "\n".join(record) + "\n")
    lines = sorted(line for line in record if line.startswith(PREFIX))
    digest = hashlib.sha256("\n".join(lines).encode()).hexdigest()
    return aicdata.Release(label="test-1", url="", systems_digest=digest)


class WheelServer(ThreadingHTTPServer):
    """Serves one file at /pkg.whl; answers Range requests unless `ranges` is False; logs them."""

    def __init__(self, payload: bytes, ranges: bool = True) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.payload, self.ranges = payload, ranges
        self.log: list[tuple[str, int]] = []  # (Range header, bytes sent)
        self.url = f"http://127.0.0.1:{self.server_address[1]}/pkg.whl"


class _Handler(BaseHTTPRequestHandler):
    server: WheelServer

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        data, size = self.server.payload, len(self.server.payload)
        if self.path != "/pkg.whl":
            self.send_error(404)
            return
        ranged = self.headers.get("Range") if self.server.ranges else None
        start, end = 0, size - 1
        if ranged:
            first, last = re.fullmatch(r"bytes=(\d*)-(\d*)", ranged).groups()  # type: ignore[union-attr]
            start, end = (max(0, size - int(last)), size - 1) if not first else (int(first), min(size - 1, int(last)))
        self.send_response(206 if ranged else 200)
        if ranged:
            self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        self.send_header("Content-Length", str(end - start + 1))
        self.end_headers()
        self.wfile.write(data[start:end + 1])
        self.server.log.append((ranged or "", end - start + 1))

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def serve() -> Iterator:
    servers: list[WheelServer] = []

    def start(payload: bytes, ranges: bool = True) -> WheelServer:
        server = WheelServer(payload, ranges)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SERVESIM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("SERVESIM_AIC_DATA_URL", raising=False)
    return tmp_path / "cache"


def tree_files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_fetches_only_the_parts_a_run_needs_by_range(tmp_path: Path, cache: Path, serve) -> None:
    release = build_wheel(tmp_path / "pkg.whl")
    payload = (tmp_path / "pkg.whl").read_bytes()
    server = serve(payload)
    release = aicdata.Release(release.label, server.url, release.systems_digest)

    root = aicdata.ensure(["gpu_a"], release=release)
    assert root == cache / "aic-systems" / "test-1" / "systems"
    want = {k: v for k, v in FILES.items() if not k.startswith("data/gpu_b/")}
    assert tree_files(root) == want  # byte for byte, and nothing of gpu_b
    assert all(r.startswith("bytes=") for r, _ in server.log)
    assert sum(n for _, n in server.log) < len(payload) - 2_500_000  # most of gpu_b's 4 MB never sent
    assert not list(root.parent.glob(".staging-*"))

    requests = len(server.log)
    assert aicdata.ensure(["gpu_a", "rtx_4090"], release=release) == root  # cached; unknown GPU ignored
    assert len(server.log) == requests
    aicdata.ensure(["gpu_b"], release=release)
    assert tree_files(root) == FILES


def test_server_without_ranges_gets_the_whole_tree_once(tmp_path: Path, cache: Path, serve) -> None:
    release = build_wheel(tmp_path / "pkg.whl")
    server = serve((tmp_path / "pkg.whl").read_bytes(), ranges=False)
    release = aicdata.Release(release.label, server.url, release.systems_digest)
    root = aicdata.ensure(["gpu_a"], release=release)
    assert tree_files(root) == FILES
    assert [n for r, n in server.log if not r] == [len(server.payload)]  # one full download
    assert not list(root.parent.glob(".download-*"))
    requests = len(server.log)
    aicdata.ensure(["gpu_b"], release=release)
    assert len(server.log) == requests


@pytest.mark.parametrize("tamper", ["digest", "member"])
def test_a_wheel_that_is_not_the_pinned_one_is_refused(tmp_path: Path, cache: Path, serve, tamper: str) -> None:
    if tamper == "digest":  # other systems files than the pin vouches for
        pinned = build_wheel(tmp_path / "pinned.whl")
        build_wheel(tmp_path / "pkg.whl", {**FILES, "gpu_a.yaml": b"data_dir: data/gpu_a\n"})
        match = "RECORD digest differs"
    else:  # RECORD as pinned, one member's bytes changed
        pinned = build_wheel(tmp_path / "pkg.whl", tamper="data/gpu_a/gemm/vllm/1.0/gemm_perf.parquet")
        match = "does not match its RECORD hash"
    server = serve((tmp_path / "pkg.whl").read_bytes())
    release = aicdata.Release(pinned.label, server.url, pinned.systems_digest)
    with pytest.raises(aicdata.DataUnavailable, match=match):
        aicdata.ensure(["gpu_a"], release=release)
    root = aicdata.systems_root(release)
    assert not (root / "data" / "gpu_a").exists()
    assert not list(root.parent.glob(".staging-*"))


def test_offline_without_cache_is_a_clear_error(tmp_path: Path, cache: Path, serve) -> None:
    release = build_wheel(tmp_path / "pkg.whl")
    server = serve(b"")
    url = server.url
    server.shutdown()
    server.server_close()  # nothing listens there any more
    with pytest.raises(aicdata.DataUnavailable, match=r"not in servesim's cache.*Connection refused.*"
                                                      r"servesim data fetch"):
        aicdata.ensure(["gpu_a"], release=aicdata.Release(release.label, url, release.systems_digest))


def test_fetch_from_a_local_wheel_unpacks_everything(tmp_path: Path, cache: Path) -> None:
    release = build_wheel(tmp_path / "pkg.whl")
    root, parts = aicdata.fetch(source=str(tmp_path / "pkg.whl"), release=release)
    assert parts == ["", "data/gpu_a", "data/gpu_b"] and tree_files(root) == FILES
    assert aicdata.fetch(["gpu_a"], source=str(tmp_path / "pkg.whl"), release=release) == (root, [])
    with pytest.raises(ConfigError, match="GPU 'gpu_c' is not in test-1's database; it has: gpu_a, gpu_b"):
        aicdata.fetch(["gpu_c"], source=str(tmp_path / "pkg.whl"), release=release)


def test_a_partial_gpu_folder_is_replaced_by_the_whole_part(tmp_path: Path, cache: Path, serve) -> None:
    """A GPU folder holding only the shipped slice counts as missing: the whole part replaces it."""
    release = build_wheel(tmp_path / "pkg.whl")
    server = serve((tmp_path / "pkg.whl").read_bytes())
    release = aicdata.Release(release.label, server.url, release.systems_digest)
    root = aicdata.ensure([], release=release)
    slice_ = root / "data" / "gpu_a" / "gemm" / "vllm" / "1.0"
    slice_.mkdir(parents=True)
    (slice_ / "gemm_perf.parquet").write_bytes(FILES["data/gpu_a/gemm/vllm/1.0/gemm_perf.parquet"])
    (root / "data" / "gpu_a" / aicdata.PARTIAL).touch()
    assert aicdata.missing_parts(root, ["gpu_a"]) == ["data/gpu_a"]
    aicdata.ensure(["gpu_a"], release=release)
    assert tree_files(root) == {k: v for k, v in FILES.items() if not k.startswith("data/gpu_b/")}
    assert aicdata.missing_parts(root, ["gpu_a"]) == [] and not list((root / "data").glob(".staging-*"))


CONCURRENT = """
import sys
from servesim.perf import aicdata
release = aicdata.Release("test-1", sys.argv[1], sys.argv[2])
print(sorted(p.name for p in (aicdata.ensure(["gpu_a", "gpu_b"], release=release) / "data").iterdir()))
"""


def test_concurrent_runs_download_once_and_see_whole_parts(tmp_path: Path, cache: Path, serve) -> None:
    release = build_wheel(tmp_path / "pkg.whl")
    server = serve((tmp_path / "pkg.whl").read_bytes())
    env = dict(os.environ, SERVESIM_CACHE_DIR=str(cache))
    runs = [subprocess.Popen([sys.executable, "-c", CONCURRENT, server.url, release.systems_digest], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(3)]
    outputs = [run.communicate(timeout=120) for run in runs]
    assert [run.returncode for run in runs] == [0, 0, 0], outputs
    assert all(out.strip() == "['gpu_a', 'gpu_b']" for out, _ in outputs)
    assert sum(1 for r, _ in server.log if r.startswith("bytes=-")) == 1  # one run opened the wheel
    assert sum("fetching" in err for _, err in outputs) == 1
    assert tree_files(aicdata.systems_root(release)) == FILES


# -- the real release -----------------------------------------------------------------------------

def test_reference_release_tree_is_the_reference_database(reference_systems: Path) -> None:
    """The pinned digest vouches for the reference's tree: its GPU files, its versions."""
    assert reference_systems == aicdata.systems_root()
    assert {"h100_sxm.yaml", "h200_sxm.yaml", "b200_sxm.yaml"} <= {p.name for p in reference_systems.iterdir()}
    assert (reference_systems / "data" / "h200_sxm" / "gemm" / "vllm" / "0.19.0").is_dir()
    assert not (reference_systems / "query_versions.yaml").exists()  # the package's tree has one


def test_data_fetch_command(reference_systems: Path, tmp_path: Path) -> None:
    run = [sys.executable, "-m", "servesim", "data", "fetch"]
    ok = subprocess.run([*run, "--gpu", "h200_sxm"], capture_output=True, text=True)
    assert ok.returncode == 0 and ok.stdout.splitlines() == [str(reference_systems), "  unpacked: nothing new"]
    bad = subprocess.run([*run, "--gpu", "h300"], capture_output=True, text=True)
    assert bad.returncode == 2 and "GPU 'h300' is not in aisimulate-0.1.0.dev2's database" in bad.stderr
    missing = subprocess.run([*run, "--from", str(tmp_path / "none.whl")], capture_output=True, text=True,
                             env=dict(os.environ, SERVESIM_CACHE_DIR=str(tmp_path / "c")))
    assert missing.returncode == 1 and "none.whl" in missing.stderr and "FileNotFoundError" in missing.stderr


# -- the slice that ships inside servesim -----------------------------------------------------------

def test_the_shipped_slice_is_the_reference_data(reference_systems: Path) -> None:
    """Every file of the seed is byte for byte the verified release's (the partial marker aside),
    and the slice holds the data of each (GPU, backend, version) it claims."""
    with tarfile.open(aicdata.SEED) as archive:
        files = {m.name: archive.extractfile(m).read() for m in archive.getmembers() if m.isfile()}  # type: ignore[union-attr]
    markers = {name for name in files if name.endswith("/" + aicdata.PARTIAL)}
    assert markers == {f"data/{gpu}/{aicdata.PARTIAL}" for gpu, _, _ in aicdata.SEED_SLICES}
    assert {name: data for name, data in files.items() if name not in markers} == {
        name: (reference_systems / name).read_bytes() for name in files if name not in markers}
    top = {str(p.relative_to(reference_systems)) for p in reference_systems.rglob("*")
           if p.is_file() and p.relative_to(reference_systems).parts[0] != "data"}
    assert top <= set(files)
    for gpu, backend, version in aicdata.SEED_SLICES:
        assert f"data/{gpu}/gemm/{backend}/{version}/gemm_perf.parquet" in files


@pytest.mark.parametrize(("gpus", "backend", "version", "covered"), [
    (["h200_sxm"], "vllm", None, True), (["h200_sxm"], "vllm", "0.19.0", True),
    (["h200_sxm"], "vllm", "0.18.0", False), (["h200_sxm"], "sglang", None, False),
    (["h100_sxm"], "vllm", None, False), ([], None, None, True), (["h200_sxm"], None, None, False)])
def test_which_runs_the_shipped_slice_covers(gpus, backend, version, covered) -> None:
    assert aicdata.seed_covers(gpus, backend, version) is covered


def test_the_quick_start_runs_offline_from_the_shipped_slice(tmp_path: Path, reference_systems: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """With an empty cache and no network, the quick start's deployment (vLLM at the reference's
    default version on H200) is timed from the shipped slice — to the same report as from the
    whole database."""
    config = load_config(EXAMPLES / "quickstart.yaml", ["traffic.stop.requests=40"])
    monkeypatch.delenv("SERVESIM_AIC_SYSTEMS_PATH", raising=False)
    whole = canonical(simulate(config).to_dict())
    monkeypatch.setenv("SERVESIM_CACHE_DIR", str(tmp_path / "empty"))
    monkeypatch.setenv("SERVESIM_AIC_DATA_URL", "http://127.0.0.1:9/unreachable.whl")
    assert canonical(simulate(config).to_dict()) == whole
    root = aicdata.systems_root()
    assert sorted(p.name for p in (root / "data").iterdir()) == ["h200_sxm"]
    assert (root / "data" / "h200_sxm" / aicdata.PARTIAL).exists()
    other_gpu = load_config(EXAMPLES / "quickstart.yaml", ["engine.hardware=h100_sxm", "traffic.stop.requests=4"])
    with pytest.raises(aicdata.DataUnavailable, match="not in servesim's cache"):
        simulate(other_gpu)


def test_predict_offline_with_an_empty_cache_exits_1(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(json.dumps({
        "engine": {"model": "Qwen/Qwen3-8B", "hardware": "h100_sxm", "workers": {"aggregated": {}}},
        "traffic": {"source": {"type": "synthetic"}, "load": {"type": "concurrency", "concurrency": 1},
                    "stop": {"requests": 2}}}))
    env = dict(os.environ, SERVESIM_CACHE_DIR=str(tmp_path / "empty"), SERVESIM_AIC_DATA_URL="http://127.0.0.1:9/x.whl")
    env.pop("SERVESIM_AIC_SYSTEMS_PATH", None)
    out = subprocess.run([sys.executable, "-m", "servesim", "predict", "-c", str(config), "--output-dir",
                          str(tmp_path / "out")], capture_output=True, text=True, env=env)
    assert out.returncode == 1
    assert "reference's AIConfigurator database is not in servesim's cache" in out.stderr
    assert "servesim data fetch" in out.stderr and out.stdout == ""
