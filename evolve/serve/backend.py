"""Where served memory lives: the protocol every store implements (the embedded file store, a shared database).

A store keeps, per user, the capture log (the source of truth: every acknowledged capture, in order), the
organised records written at session boundaries, the recall log and, after erasure, a tombstone without content.
Derived state (the memory store a question reads, its indexes, embeddings) is rebuilt from the capture log.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Protocol

from evolve.errors import EvolveError
from evolve.benchmarks.types import Turn
from evolve.runtime.store import MemoryStore
from evolve.serve.records import CaptureEvent, RecallRecord, Tombstone

#: A user id: letters, digits, ``_``, ``-`` and ``.``, starting with a letter or digit, at most 128 characters
#: (no path separators, no ``..``: a user id names a folder).
USER_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")


class StoreUnavailable(EvolveError, ConnectionError):
    """The store cannot be reached now (a database down); the service answers 503 until it is back."""


def valid_user(user: str) -> bool:
    return USER_ID.fullmatch(user) is not None and ".." not in user


class Backend(Protocol):
    """Per-user durable memory. Every method is called with the user's lock held (one writer per user);
    ``tests/serve/test_backend_conformance.py`` runs one suite against every implementation."""

    #: Whether other processes (service replicas) write the same users: the service then applies the events appended
    #: since it last looked (:meth:`events` ``since``) before using its copy of a user's memory.
    shared: bool

    def users(self) -> list[str]:
        """Every user with memory."""
        ...

    def exists(self, user: str) -> bool:
        """Whether memory is stored for ``user``."""
        ...

    def append(self, user: str, event: CaptureEvent) -> None:
        """Append one capture-log event, stamped with its time (``at``), durable on return."""
        ...

    def events(self, user: str, since: int = 0) -> list[CaptureEvent]:
        """The user's capture-log events after the first ``since``, in order (a torn tail left by a crash is
        dropped)."""
        ...

    def event_count(self, user: str) -> int:
        """How many events the user's capture log holds (fewer than seen before: the user was erased meanwhile)."""
        ...

    def organise(self, user: str, session: str, turns: list[Turn], store: MemoryStore, strategy_hash: str) -> None:
        """Write the organised records of a closed ``session`` and record the step (provenance)."""
        ...

    def organised(self, user: str) -> set[str]:
        """Sessions whose organisation step completed."""
        ...

    def embeddings_dir(self, user: str) -> Path | None:
        """Where the user's embedding cache may persist (derived; erased with the user), if anywhere."""
        ...

    def log_recall(self, user: str, record: RecallRecord) -> None:
        """Append one recall record to the user's size-bounded recall log."""
        ...

    def recalls(self, user: str) -> list[RecallRecord]:
        """The user's logged recalls still held, oldest first."""
        ...

    def erase(self, user: str) -> Tombstone:
        """Remove everything held for ``user``; return the tombstone (no content) left in its place."""
        ...

    def tombstone(self, user: str) -> Tombstone | None:
        """The tombstone an erasure of ``user`` left, if any."""
        ...

    def verify(self, user: str) -> list[str]:
        """Problems with the user's stored state, in words (empty: it checks out)."""
        ...

    def close(self) -> None:
        """Release what the store holds open (connections)."""
        ...
