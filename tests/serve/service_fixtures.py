"""The service in this process over a file store, and a full file system, for the service tests."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from fastapi.testclient import TestClient

from evolve.serve.app import create_app
from evolve.serve.filestore import FileBackend
from evolve.serve.memory import MemoryService
from evolve.serve.strategy import RuntimeParts, StrategySlot


@dataclass
class InProcess:
    """The service's app over ``data`` (no background workers: a test runs organisation and builds itself)."""

    data: Path
    slot: StrategySlot
    memory: MemoryService
    client: TestClient

    def restarted(self) -> "InProcess":
        """The same store opened again, as a restart opens it (every stored user loaded)."""
        memory = MemoryService(FileBackend(self.data), lambda: self.slot.current)
        memory.recover()
        return InProcess(self.data, self.slot, memory, TestClient(create_app(self.slot, memory)))


def in_process(data: Path, serving: Path, parts: RuntimeParts) -> InProcess:
    slot = StrategySlot(None, serving, parts, allow_untracked=True)
    memory = MemoryService(FileBackend(data), lambda: slot.current)
    return InProcess(data, slot, memory, TestClient(create_app(slot, memory)))


def fill(fs: Path) -> Path:
    """Fill the file system ``fs`` to the last byte; the filler file (delete it to free the space)."""
    filler = fs / "filler"
    with open(filler, "wb", buffering=0) as fh:
        for size in (2**16, 2**12, 2**8, 1):
            try:
                while True:
                    fh.write(b"\0" * size)
            except OSError:
                continue
    return filler
