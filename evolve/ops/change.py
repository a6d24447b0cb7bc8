"""Crash-atomic serving changes: the intent record that makes a promote or rollback all-or-nothing.

A change to a serving file takes four writes: the new bytes replace the serving file, the ``PROMOTE`` /
``ROLLBACK`` entry is journaled, the witness line is appended, the intent is removed. Before the first of them the
whole change (entry type, payload, journal length) is written atomically to ``<stores>/serving/intent.json``. A
crash anywhere leaves the intent behind, and :func:`recover_change` (run under the stores' lock by the next
``promote``, ``rollback`` or ``journal verify``) finishes it from what the serving file holds:

* the new bytes: the swap happened, so the entry (unless already journaled) and the witness are written;
* the old bytes (or no file when there was none): the swap never happened, so the change is abandoned;
* anything else: the file was changed by hand meanwhile, so nothing is served and drift detection reports it.

Either way a ``RECOVER`` entry journals the intent and its outcome, so the restore point is never lost.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ValidationError

from evolve.canonical import canonical_hash, sha256_hex
from evolve.ops.drift import read_optional
from evolve.ops.witness import witness_anchors, write_witness
from evolve.files import (
    StoreError, atomic_write_bytes, atomic_write_json, crash_point, fsync_dir, now_iso, os_error, read_json,
)
from evolve.state.entries import JournalEntry, ServedFile, read_entry, validate_payload
from evolve.state.layout import StoreLayout
from evolve.state.stores import StoreSet

#: The steps of a change, in order (the names :data:`~evolve.files.CRASH_ENV` accepts).
STEPS = ("intent", "swap", "journal", "witness")


@dataclass(frozen=True)
class Recovered:
    """What :func:`recover_change` did with an interrupted change: ``completed``, ``abandoned`` or ``unresolved``."""

    type: str
    target: str
    outcome: str
    entry: JournalEntry | None

    def describe(self) -> str:
        index = self.entry.index if self.entry else None
        what = {"completed": f"finished: the serving file was replaced, and entry {index} {self.type} records it",
                "abandoned": "abandoned: the serving file was never replaced",
                "unresolved": "not finished: the serving file holds neither the old nor the new file (changed by "
                              "hand?)"}[self.outcome]
        return f"recovered an interrupted {self.type} of {self.target}: {what}"


def intent_path(layout: StoreLayout) -> Path:
    return layout.serving / "intent.json"


class ChangeIntent(BaseModel):
    """What a serving change is about to do, written before it starts: the entry it will journal and the journal's
    length then."""

    type: str
    payload: dict
    journal_length: int
    written_at: str | None = None


def pending_change(layout: StoreLayout) -> ChangeIntent | None:
    """The intent of a change that was started but not finished (``None`` if there is none)."""
    raw = read_json(intent_path(layout), None)
    if raw is None:
        return None
    try:
        return ChangeIntent.model_validate(raw)
    except ValidationError:
        raise StoreError(intent_path(layout), "malformed intent of an interrupted serving change (edited?); nothing "
                                              "was recovered") from None


def apply_change(store_set: StoreSet, kind: str, target: Path, data: bytes, payload: dict) -> JournalEntry:
    """Serve ``data`` at ``target`` and journal ``kind`` with ``payload``, crash-atomically; the journal entry."""
    intent, last = intent_path(store_set.layout), store_set.journal.last()
    atomic_write_json(intent, ChangeIntent(type=kind, payload=payload, journal_length=0 if last is None else
                                           last["index"] + 1, written_at=now_iso()).model_dump())
    crash_point("intent")
    atomic_write_bytes(target, data)
    crash_point("swap")
    entry = read_entry(store_set.append_journal(kind, payload))
    crash_point("journal")
    write_witness(target, entry, store_set.root)
    crash_point("witness")
    _remove(intent)
    return entry


def recover_change(store_set: StoreSet) -> Recovered | None:
    """Finish or abandon a change a crash interrupted (see the module docstring); ``None`` if there was none."""
    intent = pending_change(store_set.layout)
    if intent is None:
        return None
    kind, payload, length = intent.type, intent.payload, intent.journal_length
    try:
        served = validate_payload(kind, payload, "intent")
        if not isinstance(served, ServedFile):
            raise ValueError(f"intent of a {kind} entry")
    except (TypeError, ValueError):
        raise StoreError(intent_path(store_set.layout), "malformed intent of an interrupted serving change "
                                                        "(edited?); nothing was recovered") from None
    target, new, old = Path(served.target), served.file_sha256, served.previous_file_sha256
    journaled = next((e for e in store_set.journal.typed_entries()[length:]
                      if e.type == kind and e.payload_hash == canonical_hash(payload)), None)
    current = read_optional(target)
    held = sha256_hex(current) if current is not None else None
    entry = None
    if journaled is not None or held == new:
        outcome = "completed"
        entry = journaled or read_entry(store_set.append_journal(kind, payload))
        if not any(a.index == entry.index for a in witness_anchors(target, store_set.root)):
            write_witness(target, entry, store_set.root)
    else:
        outcome = "abandoned" if held == old else "unresolved"
    store_set.append_journal("RECOVER", {"serving_change": intent.model_dump(), "outcome": outcome,
                                         "entry": entry.index if entry else None})
    _remove(intent_path(store_set.layout))
    return Recovered(kind, str(target), outcome, entry)


def _remove(path: Path) -> None:
    try:
        path.unlink(missing_ok=True)
        fsync_dir(path.parent)
    except OSError as exc:
        raise os_error(path, exc, "remove") from None
