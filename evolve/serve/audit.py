"""The service's access audit: one hash-chained line per capture, close, recall, answer, erasure, retention purge
and denial, per data directory (``<data>/audit.jsonl``) or per database (table ``mem_audit``).

The chain is the decision journal's (:class:`evolve.state.journal.HashChain`): editing, deleting, inserting or
reordering a line breaks it at that line (``memevolve audit verify`` names it); ``MEMEVOLVE_AUDIT_KEY`` adds a MAC
to every line; a witness of the head, kept elsewhere (``memevolve audit witness``, or ``serve --audit-witness``),
catches a log rewritten whole (:mod:`evolve.ops.witness`). A line holds no content: the caller's key id, the user's
name (the sha256 of the id, keyed under ``MEMEVOLVE_USER_KEY``: :mod:`evolve.serve.pseudonym`; as the tombstone
names the user), the turn ids touched, counts and the time, so the audit outlives the erasure of the user it speaks
of.
"""
from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from pydantic import BaseModel, ConfigDict, Field

from evolve.canonical import canonical_json
from evolve.files import StoreError, append_lines, ensure_dir
from evolve.ops.witness import anchor_problems, append_head, head_anchors
from evolve.serve.backend import AUDIT_FILE
from evolve.serve.pseudonym import Pseudonyms
from evolve.state.journal import HashChain, VerifyResult, chain_key

if TYPE_CHECKING:
    from evolve.serve.backend import Backend
    from evolve.serve.pgstore import PostgresBackend

#: Operations the audit records: the memory operations, a retention purge, a refused request, a service start, an
#: admitted request that failed, the keying of the users' names.
AUDIT_TYPES = ("CAPTURE", "CLOSE", "RECALL", "ANSWER", "ERASE", "PURGE", "DENY", "START", "FAIL", "REKEY")
AUDIT_KEY_ENV = "MEMEVOLVE_AUDIT_KEY"


class AuditEvent(BaseModel):
    """One line's payload: who did what to whom, never what was said."""

    model_config = ConfigDict(extra="forbid")
    key: str | None = Field(None, description="the caller's key id (null: the service runs without --auth, or no "
                                              "valid key was presented)")
    user: str | None = Field(None, description="the user's name: the sha256 of the id, keyed under "
                                               "MEMEVOLVE_USER_KEY")
    ids: list[str] = Field(default_factory=list, description="turn ids captured, packed or purged")
    counts: dict[str, int] = Field(default_factory=dict)
    purpose: str | None = None
    operation: str | None = Field(None, description="the scope a denied or failed request asked for")
    status: int | None = Field(None, description="the HTTP status of a denial or of an admitted request that failed")
    reason: str | None = Field(None, description="why a request was denied or failed, or a start's settings")


@dataclass(frozen=True)
class AuditLine:
    """One audit line as read: its place, time and type, its payload as stored (the chain hashes it) and as an
    :class:`AuditEvent`."""

    index: int
    ts: str
    type: str
    payload: dict
    hash: str
    event: AuditEvent

    @classmethod
    def of(cls, raw: dict) -> "AuditLine":
        return cls(raw["index"], raw["ts"], raw["type"], raw["payload"], raw["hash"],
                   AuditEvent.model_validate(raw["payload"]))


class AuditChain(HashChain):
    """The audit's chain rules (the file log; :class:`PgAudit` keeps the same lines in a table)."""

    NAME = "audit log"
    TYPES = AUDIT_TYPES
    KEY_ENV = AUDIT_KEY_ENV
    VERIFY_COMMAND = "memevolve audit verify"
    #: How the lines name users.
    names: Pseudonyms

    def read(self) -> list[AuditLine]:
        """Every line as read, its payload checked against :class:`AuditEvent`."""
        return [AuditLine.of(raw) for raw in self.entries()]

    def rechained(self, lines: list[AuditLine], rename: Callable[[str], str], note: str) -> list[dict]:
        """``lines`` with each user's name renamed and chained again (times kept), then a REKEY line saying
        ``note``."""
        out: list[dict] = []
        for line in lines:
            user = line.event.user
            payload = {**line.payload, "user": rename(user) if user else user}
            out.append(self.link(line.type, payload, out[-1] if out else None, ts=line.ts))
        return [*out, self.link("REKEY", AuditEvent(reason=note).model_dump(), out[-1] if out else None)]


class FileAudit(AuditChain):
    """``<data>/audit.jsonl``; appends serialised by a lock, the head kept in memory (one writer per data
    directory: the service). ``read_only``: opened to verify or show while the service may be appending (a torn
    last line is reported, not truncated)."""

    def __init__(self, data: str | Path, read_only: bool = False, names: Pseudonyms | None = None):
        self.names = names or Pseudonyms.from_env()
        if read_only:
            self.path, self.key = Path(data) / AUDIT_FILE, chain_key(self.KEY_ENV)
        else:
            super().__init__(Path(data) / AUDIT_FILE)
        self.read_only = read_only
        self._lock = threading.Lock()
        self._head = self._last_entry()

    @property
    def where(self) -> str:
        return str(self.path.parent.resolve())

    def record(self, type: str, event: AuditEvent) -> dict:
        """Append one line (fsynced) and return it."""
        if self.read_only:
            raise StoreError(self.path, "audit opened read-only")
        with self._lock:
            entry = self.link(type, event.model_dump(), self._head)
            append_lines(self.path, [canonical_json(entry)])
            self._head = entry
            return entry


class PgAudit(AuditChain):
    """The audit as table ``mem_audit`` of the shared store: one row per line (its index and canonical JSON),
    appended under an advisory lock, so every replica extends one chain."""

    def __init__(self, backend: "PostgresBackend"):  # no file: HashChain.__init__ would open one
        self.backend, self.key, self.names = backend, chain_key(self.KEY_ENV), backend.names
        self.path = Path(f"mem_audit of {backend.where}")
        backend.run(lambda c: c.execute(backend.AUDIT_TABLE))

    @property
    def where(self) -> str:
        return self.backend.where

    def record(self, type: str, event: AuditEvent) -> dict:
        def work(c):
            c.execute("SELECT pg_advisory_xact_lock(%s)", (self.backend.AUDIT_LOCK,))
            row = c.execute("SELECT line FROM mem_audit ORDER BY index DESC LIMIT 1").fetchone()
            entry = self.link(type, event.model_dump(), _parse(row[0]) if row else None)
            c.execute("INSERT INTO mem_audit VALUES (%s, %s)", (entry["index"], canonical_json(entry)))
            return entry
        return self.backend.run(work)

    def lines(self) -> list[bytes]:
        return self.backend.run(lambda c: [r[0].encode("utf-8") for r in c.execute(
            "SELECT line FROM mem_audit ORDER BY index")])

    def entries(self) -> list[dict]:
        return [_parse(line) for line in self.lines()]

    def last(self) -> dict | None:
        row = self.backend.run(lambda c: c.execute("SELECT line FROM mem_audit ORDER BY index DESC LIMIT 1"
                                                   ).fetchone())
        return _parse(row[0]) if row else None

    def verify(self, anchor: dict | None = None) -> VerifyResult:
        return self.check_lines(self.lines(), anchor)


def _parse(line: str | bytes) -> dict[str, Any]:
    return json.loads(line)


Audit = FileAudit | PgAudit


def open_audit(spec: str) -> Audit:
    """The audit of the store ``spec`` names, to read: a data directory's file, or a database's table."""
    from evolve.serve.stores import POSTGRES_SCHEMES

    if spec.startswith(POSTGRES_SCHEMES):
        from evolve.serve.pgstore import PostgresBackend

        return PgAudit(PostgresBackend(spec))
    return FileAudit(spec, read_only=True)


def erased_turns(audit: Audit) -> list[tuple[str, str]]:
    """The turns the audit says the service erased (``ERASE`` naming turns) or purged (``PURGE``): (user's name,
    turn id), in order."""
    return [(line.event.user, turn) for line in audit.read() if line.type in ("ERASE", "PURGE") and line.event.user
            for turn in line.event.ids]


def audit_of(backend: Backend) -> Audit:
    """The audit a service over ``backend`` appends to: the shared store's table (on its connections), or the
    file beside the users' folders."""
    return PgAudit(backend) if backend.shared else FileAudit(backend.root, names=backend.names)


def witness_head(audit: Audit, path: Path) -> dict | None:
    """Append the audit's head to the witness file ``path`` (kept outside the data directory); the head, or ``None``
    for an empty audit."""
    head = audit.last()
    if head is not None:
        ensure_dir(path.parent)
        append_head(path, head, audit.where)
    return head


def verify_audit(audit: Audit, witnesses: list[Path]) -> tuple[VerifyResult, list[str], int]:
    """The chain's verdict, the witnessed heads it lacks (in words), and how many heads were checked."""
    result = audit.verify()
    anchors = [a for path in witnesses for a in head_anchors(path, audit.where)]
    return result, anchor_problems(anchors, result.hashes, "audit") if result.ok else [], len(anchors)
