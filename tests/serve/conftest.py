"""Fixtures of the service tests: the service in this process over a file store, and a real small file system."""
from __future__ import annotations

import shutil
import subprocess
import tempfile
import uuid
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


@pytest.fixture(scope="module")
def postgres():
    """A started PostgreSQL (pgserver's self-contained server); ``(server handle, data directory)``. Its folder lies
    outside pytest's private temporary directory: run as root, pgserver runs the server as another user, who must
    reach it. Skipped where pgserver is not installed."""
    pgserver = pytest.importorskip("pgserver")
    folder = Path(tempfile.mkdtemp(prefix="memevolve-pg-"))
    server = pgserver.get_server(folder, cleanup_mode="stop")
    yield server, folder
    server.cleanup()
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def pg_url(postgres) -> str:
    """The URL of a new, empty database on the module's PostgreSQL (one per test)."""
    import psycopg

    url = postgres[0].get_uri()
    name = f"t_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    info = psycopg.conninfo.conninfo_to_dict(url)
    return psycopg.conninfo.make_conninfo(**{**info, "dbname": name})
