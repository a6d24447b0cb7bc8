"""A user's memory as the service holds it: its state while loaded, its embedding cache, what outlives it in the
process (the tenant), and the errors a lookup raises."""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, TypeVar

import numpy as np

from evolve.errors import EvolveError
from evolve.files import StoreError
from evolve.runtime.cache import EmbeddingCache
from evolve.runtime.live import LiveConversation

log = logging.getLogger(__name__)


class UnknownUser(EvolveError, LookupError):
    """No memory is held for the user (never captured, or erased)."""


class Stale(EvolveError):
    """The user's capture log was erased or rewritten through another replica since this one loaded it (its
    :meth:`Backend.generation` moved): the memory held here is dropped; look the user up again."""


class Quarantined(EvolveError):
    """The user's stored memory cannot be read (a corrupt, damaged or foreign file); the service answers 503 for
    this user until the file is repaired and the service restarted, and serves the others."""

    def __init__(self, user: str, reason: str):
        super().__init__(f"user {user!r} is quarantined: {reason}")
        self.user, self.reason = user, reason


#: What loading one user's stored memory can fail with (a corrupt line, a missing field, an inconsistent log).
LOAD_ERRORS = (StoreError, ValueError, OSError)


T = TypeVar("T")


@dataclass(eq=False)
class Tenant:
    """What outlives a user's loaded memory in this process: the erasure lock, held by the erasure and by the writes
    that run outside the user's lock (embedding shards, recall-log lines), a leaf lock; and the number of erasures,
    so a memory loaded before one never writes after it (even once the user has captured again)."""

    erasing: threading.Lock = field(default_factory=threading.Lock)
    erasures: int = 0
    #: Turns erased or purged while this process ran: a recall that packed one, logged after, is dropped.
    gone_turns: set[str] = field(default_factory=set)

    def erase(self, change: Callable[[], T] = lambda: None, turns: Iterable[str] = ()) -> T:
        """Run ``change`` (what the store erases; ``turns``: the turns it removes) under the erasure lock and count
        one erasure: every memory loaded before it writes nothing after it."""
        with self.erasing:
            done = change()
            self.erasures += 1
            self.gone_turns.update(turns)
        return done


class UserEmbeddings(EmbeddingCache):
    """A user's embedding cache: its shards are read at the first build, not at load (a user loaded at start and
    never recalled holds no vector); a shard is written only while the memory it belongs to is not erased (checked
    under the tenant's erasure lock), so a build that ran across an erasure never re-creates the user's folder; a
    shard that cannot be written (a full or read-only disk) is logged, the vectors kept in memory."""

    def __init__(self, directory: Path | None, tenant: Tenant, erasures: int):
        super().__init__()
        self.directory, self.tenant, self.erasures = directory, tenant, erasures

    def _write_shard(self, keys: list[str], vectors: np.ndarray) -> None:
        with self.tenant.erasing:
            if self.erasures != self.tenant.erasures:  # erased since the memory was loaded
                return
            try:
                super()._write_shard(keys, vectors)
            except StoreError as exc:
                log.warning("embedding shard not persisted (kept in memory): %s", exc)


@dataclass(eq=False)
class UserState:
    live: LiveConversation
    directory: Path | None  # where the embedding cache persists
    tenant: Tenant
    lock: threading.RLock = field(default_factory=threading.RLock)
    #: Set (under ``lock``) once this is no longer the user's loaded memory (erased or evicted): a writer that
    #: waited for ``lock`` looks the user up again.
    gone: bool = False
    last_capture: float = field(default_factory=time.monotonic)
    capturing: int = 0  # capture requests in progress (some may wait for the lock behind organisation)
    seen: int = 0  # capture-log events applied (with a shared store other replicas append too)
    generation: int = 0  # the user id's erasure generation the memory was loaded under
    purpose: str | None = None  # what the memory was captured for (its first capture's purpose); None: any

    def __post_init__(self) -> None:
        self.erasures = self.tenant.erasures
        self.embeddings = UserEmbeddings(self.directory, self.tenant, self.erasures)  # no cycle: freed on unload

    @property
    def erased(self) -> bool:
        return self.erasures != self.tenant.erasures

    def idle(self) -> bool:
        """Nothing in progress on this memory (no capture, no build); a capture may still be on its way."""
        return not self.capturing and not self.live.building()
