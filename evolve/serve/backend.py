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
from evolve.serve.pseudonym import Naming, Pseudonyms
from evolve.serve.records import CaptureEvent, RecallRecord, Tombstone, TurnErased

#: A user id: letters, digits, ``_``, ``-`` and ``.``, starting with a letter or digit, at most 128 characters
#: (no path separators, no ``..``: a user id names a folder).
#: The file store's audit, beside the users' folders (:mod:`evolve.serve.audit`).
AUDIT_FILE = "audit.jsonl"
USER_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")


class StoreUnavailable(EvolveError, ConnectionError):
    """The store cannot be reached now (a database down); the service answers 503 until it is back."""


class UnknownTurn(EvolveError, LookupError):
    """The user's capture log holds no turn of that id (never captured, or erased)."""

    def __init__(self, user: str, turn: str):
        super().__init__(f"user {user!r} has no turn {turn!r} (never captured, or erased)")


def valid_user(user: str) -> bool:
    return USER_ID.fullmatch(user) is not None and ".." not in user


class Backend(Protocol):
    """Per-user durable memory. Every method is called with the user's lock held (one writer per user);
    ``tests/serve/test_backend_conformance.py`` runs one suite against every implementation."""

    #: Whether other processes (service replicas) write the same users: the service then applies the events appended
    #: since it last looked (:meth:`events` ``since``) before using its copy of a user's memory, and loads the memory
    #: again when the user's :meth:`generation` changed meanwhile.
    shared: bool
    #: How tombstones, generations and the audit name users (the environment's key by default).
    names: Pseudonyms
    #: The store in words (a folder, or a database without credentials), for messages.
    where: str

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

    def generation(self, user: str) -> int:
        """The user id's erasure generation: how many times its capture log was erased or rewritten (the whole user,
        or one turn), 0 for an id never erased. Kept by the hash of the user id, so it outlives the user's erasure
        and grows with every one: a replica that loaded the user under another generation holds words erased since,
        and loads the user again (a re-used id never revives erased turns). Read after :meth:`events` for the
        comparison to cover the events read."""
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
        """Remove everything held for ``user`` and advance its :meth:`generation`; return the tombstone (no content)
        left in its place."""
        ...

    def erase_turn(self, user: str, turn: str) -> TurnErased:
        """Remove turn ``turn`` of ``user`` from the capture log and every organised record holding its words, history
        included: its session's records and rollup (organised again from the log), the facts whose sources hold it;
        drop the user's persisted embeddings; advance the user's :meth:`generation`. :class:`UnknownTurn` (nothing
        changed) when the log holds no such turn."""
        ...

    def tombstone(self, user: str) -> Tombstone | None:
        """The tombstone an erasure of ``user`` left, if any."""
        ...

    def rewrite(self, user: str, events: list[CaptureEvent], purged: set[str], through: int, generation: int) -> bool:
        """A retention purge of the turns ``purged``: the first ``through`` events of the user's capture log, read under
        :meth:`generation` ``generation``, are replaced by ``events`` (events appended after them, by another replica
        meanwhile, follow unchanged); what was derived from the old log is dropped (organised records and their
        history, organised marks, embeddings, the recall-log lines that packed a purged turn; organisation runs again
        on what is kept) and the generation advanced. A log left with no turn is erased instead (:meth:`erase`, a
        tombstone). ``False``, nothing changed, if the generation moved since (the log was erased or rewritten
        meanwhile: read it again)."""
        ...

    def naming(self) -> Naming | None:
        """How the store names users: as recorded, else unkeyed sha256 when it holds any name (a store written before
        names were recorded), else ``None`` (a new store)."""
        ...

    def set_naming(self, naming: Naming) -> None:
        """Record how the store names users."""
        ...

    def rekey(self, names: Pseudonyms, audit_lines: list[str]) -> int:
        """Rename the users of an unkeyed store under ``names``: tombstones and generations renamed, the audit
        replaced by ``audit_lines`` (chained again under the new names) and the naming recorded, all or nothing
        (a crash leaves the store as it was, or re-keyed once it is next opened). How many names were renamed."""
        ...

    def verify(self, user: str) -> list[str]:
        """Problems with the user's stored state, in words (empty: it checks out)."""
        ...

    def close(self) -> None:
        """Release what the store holds open (connections)."""
        ...
