"""The run lock: one process at a time writes a stores directory."""
from __future__ import annotations

import os
import socket
from pathlib import Path

import filelock

from evolve.files import StoreError, atomic_write_json, ensure_dir, now_iso, os_error, read_json


class RunLock:
    """Exclusive, non-blocking lock on a store root so two runs cannot write the same stores.

    The holder's pid, host and start time are recorded beside the lock file so a refused run
    can say who holds it. The OS releases the lock if the holder dies, so no stale-lock cleanup is needed.
    """

    LOCK_NAME = "run.lock"
    OWNER_NAME = "run.lock.owner"
    #: What a refusal says holds the lock, and what to do.
    HELD = "store is locked by another run ({holder}); wait for it to finish or use a different store root"

    def __init__(self, root: str | Path, timeout: float = 0.0):
        self.root = Path(root)
        self.path = self.root / self.LOCK_NAME
        self.owner_path = self.root / self.OWNER_NAME
        self.timeout = timeout
        self._lock: filelock.BaseFileLock | None = None

    @property
    def held(self) -> bool:
        return self._lock is not None

    def acquire(self) -> "RunLock":
        if self._lock is not None:
            return self
        ensure_dir(self.root)
        lock = filelock.FileLock(str(self.path), timeout=self.timeout, thread_local=False)
        try:
            lock.acquire()
        except filelock.Timeout:
            raise StoreError(self.path, self.HELD.format(holder=self._holder())) from None
        except OSError as exc:
            raise os_error(self.path, exc, "take the run lock") from None
        self._lock = lock
        try:
            atomic_write_json(self.owner_path, {"pid": os.getpid(), "host": socket.gethostname(),
                                                "acquired_at": now_iso()})
        except StoreError:
            self.release()
            raise
        return self

    def release(self) -> None:
        if self._lock is None:
            return
        try:
            self.owner_path.unlink(missing_ok=True)
        finally:
            self._lock.release()
            self._lock = None

    def _holder(self) -> str:
        try:
            owner = read_json(self.owner_path, None)
        except StoreError:
            owner = None
        if not isinstance(owner, dict) or "pid" not in owner:
            return "holder pid unknown"
        return f"holder pid {owner['pid']} on {owner.get('host', '?')} since {owner.get('acquired_at', '?')}"

    def __enter__(self) -> "RunLock":
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


class ServiceLock(RunLock):
    """One service at a time on a data directory: its audit chain, recall logs and Git histories have one writer
    (two services would fork the audit chain). Held for the service's life; the OS releases it if the process dies."""

    LOCK_NAME = "serve.lock"
    OWNER_NAME = "serve.lock.owner"
    HELD = ("another service serves this data directory ({holder}); stop it first (a rolling restart starts the new "
            "service after the old one exits), or give each service its own --data, or share a PostgreSQL --store")
