"""Fixtures of the service tests: the service in this process over a file store, and a real small file system."""
from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Iterator

import pytest

from evolve.serve.strategy import RuntimeParts
from service_fixtures import InProcess, in_process


@pytest.fixture
def service(tmp_path, serving, embedder) -> InProcess:
    return in_process(tmp_path / "data", serving, RuntimeParts(embedder))


@pytest.fixture
def small_fs(tmp_path) -> Iterator[Path]:
    """A real 4 MiB file system (tmpfs) to fill up or remount read-only; skipped where mounting is not allowed."""
    mount = tmp_path / "fs"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)], capture_output=True,
                          text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small file system here: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)
