"""Fixtures shared across the test folders."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

REFERENCE = Path(__file__).resolve().parents[1].parent / "shared" / "reference"


@pytest.fixture(scope="session")
def reference_systems() -> Path:
    """The reference's bundled AIC systems directory (`../shared/reference`); skips the test when
    it is not installed (never installs anything)."""
    try:
        check = subprocess.run([str(REFERENCE / "install.sh"), "--check"], capture_output=True, timeout=60)
        out = subprocess.run([str(REFERENCE / "aic-systems-path.sh")], capture_output=True, text=True,
                             timeout=60) if check.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        out = None
    path = Path(out.stdout.strip()) if out is not None and out.returncode == 0 and out.stdout.strip() else None
    if path is None or not (path / "data").is_dir():
        pytest.skip("the reference's AIC systems directory is not installed (../shared/reference)")
    return path
