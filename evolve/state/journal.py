"""Tamper-evident, append-only decision journal (hash-chained JSONL).

Each line is the canonical JSON of one entry::

    {"index", "type", "ts", "round", "seq", "payload", "payload_hash", "prev_hash", "hash"}

``payload_hash`` is the SHA-256 of the payload's canonical JSON; ``hash`` is the SHA-256 of the
entry without ``hash``; ``prev_hash`` is the previous entry's ``hash`` (64 zeros for the first), so
editing, deleting, inserting or reordering any line breaks the chain at that line.
``seq`` is the entry's position within a round commit (``None`` for entries appended directly).

The chain alone proves nothing against someone who rewrites the whole file and recomputes it. Two things do:
the head recorded outside the file (``state.json``, the round's MLflow run, a witness beside each serving file;
see :mod:`evolve.ops.witness`), and, when ``MEMEVOLVE_JOURNAL_KEY`` is set, a ``mac`` on every entry (HMAC-SHA256
of its ``hash`` under that key), which nobody without the key can recompute.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evolve.canonical import canonical_hash, canonical_json
from evolve.state.entries import EntryType, JournalEntry, PayloadError, read_entry
from evolve.files import (
    open_regular,
    StoreError, append_lines, ensure_dir, iter_jsonl, now_iso, os_error, repair_torn_tail,
)

#: Every entry type the journal accepts (see :class:`~evolve.state.entries.EntryType`).
ENTRY_TYPES = tuple(t.value for t in EntryType)
GENESIS_HASH = "0" * 64
#: Tags of an MLflow round run that record the journal head at the round's commit (``INDEX:HASH``) and the stores.
HEAD_TAG, STORES_TAG = "memevolve.journal_head", "memevolve.stores"
#: Environment variable holding the journal key; when set, entries carry and are checked for a ``mac``.
KEY_ENV = "MEMEVOLVE_JOURNAL_KEY"


@dataclass(frozen=True)
class VerifyResult:
    """Outcome of :meth:`Journal.verify`; ``first_bad_index`` is the 0-based line of the first broken entry."""

    ok: bool
    n: int
    first_bad_index: int | None = None
    reason: str | None = None
    #: Whether entries carry MACs that were not checked (no key set).
    unchecked_macs: bool = False
    #: The chain's entries, oldest first (only when ``ok``).
    hashes: tuple[str, ...] = ()


def entry_hash(entry: dict) -> str:
    return canonical_hash({k: v for k, v in entry.items() if k not in ("hash", "mac")})


def chain_key(env: str) -> bytes | None:
    """The key the environment variable ``env`` holds, as bytes (any bytes, UTF-8 or not), or ``None``."""
    return os.environb.get(env.encode()) or None


def journal_key() -> bytes | None:
    """The journal key from :data:`KEY_ENV`, or ``None``."""
    return chain_key(KEY_ENV)


def entry_mac(key: bytes, digest: str) -> str:
    return hmac.new(key, digest.encode("ascii"), hashlib.sha256).hexdigest()


def _complete_lines(path: Path) -> int:
    """How many newline-terminated lines ``path`` holds."""
    try:
        with open_regular(path) as fh:
            return sum(chunk.count(b"\n") for chunk in iter(lambda: fh.read(1 << 20), b""))
    except FileNotFoundError:
        return 0
    except OSError as exc:
        raise os_error(path, exc, "read") from None


def _byte(fh, at: int) -> bytes:
    fh.seek(at)
    return fh.read(1)


def _line_start(fh, before: int) -> int:
    """Where the line holding the byte before offset ``before`` starts (0, or just after the newline before it)."""
    start = before
    while start > 0:
        step = min(4096, start)
        fh.seek(start - step)
        pos = fh.read(step).rfind(b"\n")
        if pos >= 0:
            return start - step + pos + 1
        start -= step
    return 0


class HashChain:
    """An append-only hash-chained JSONL log at ``path``: entries ``{"index", "type", "ts", <EXTRA>, "payload",
    "payload_hash", "prev_hash", "hash"}`` (plus ``mac`` when :attr:`KEY_ENV` holds a key). A subclass names its
    entry :attr:`TYPES`, its :attr:`EXTRA` fields, its key variable and the command that verifies it.

    A torn last line (a crash mid-append) is truncated on open, but only when it lies past ``anchor``, the head
    recorded at the last commit: a torn or missing *committed* entry is damage, not an interrupted append, and
    opening refuses with :class:`StoreError`.
    """

    TYPES: tuple[str, ...] = ()
    EXTRA: tuple[str, ...] = ()
    NAME = "log"
    KEY_ENV = ""
    VERIFY_COMMAND = ""

    def __init__(self, path: str | Path, anchor: dict | None = None):
        self.path = Path(path)
        self.key = chain_key(self.KEY_ENV)
        ensure_dir(self.path.parent)
        complete = _complete_lines(self.path)
        if anchor is not None and complete <= anchor["index"]:
            raise StoreError(self.path, f"committed history is damaged: entry {anchor['index']} was recorded as "
                                        f"committed but the {self.NAME} holds only {complete} complete line(s) "
                                        f"(truncated or lines removed); see `{self.VERIFY_COMMAND}`")
        #: Bytes of an unterminated last line dropped on open (empty if the file was clean).
        self.repaired_tail: bytes = repair_torn_tail(self.path)
        self._last_entry()  # fail now, naming the line, if the head is unreadable

    @classmethod
    def fields(cls) -> frozenset[str]:
        return frozenset({"index", "type", "ts", *cls.EXTRA, "payload", "payload_hash", "prev_hash", "hash"})

    def link(self, type: str, payload: dict, last: dict | None, ts: str | None = None, **extra: Any) -> dict:
        """The entry that follows ``last`` (``None``: the first), hashed (and MACed under the key); written at ``ts``
        (``None``: now)."""
        if type not in self.TYPES:
            raise ValueError(f"unknown {self.NAME} entry type {type!r}; expected one of {', '.join(self.TYPES)}")
        if not isinstance(payload, dict):
            raise ValueError(f"{self.NAME} payload must be a dict, got {payload.__class__.__name__}")
        entry: dict[str, Any] = {
            "index": 0 if last is None else last["index"] + 1,
            "type": type,
            "ts": ts or now_iso(),
            **{name: extra.get(name) for name in self.EXTRA},
            "payload": payload,
            "payload_hash": self._payload_hash(payload),
            "prev_hash": GENESIS_HASH if last is None else last["hash"],
        }
        entry["hash"] = entry_hash(entry)
        if self.key is not None:
            entry["mac"] = entry_mac(self.key, entry["hash"])
        return entry

    def _append(self, type: str, payload: dict, **extra: Any) -> dict:
        """Append one entry after the file's last (fsynced) and return it."""
        entry = self.link(type, payload, self._last_entry(), **extra)
        append_lines(self.path, [canonical_json(entry)])
        return entry

    def entries(self) -> list[dict]:
        return [entry for _, entry in iter_jsonl(self.path)]

    def last(self) -> dict | None:
        return self._last_entry()

    def verify(self, anchor: dict | None = None) -> VerifyResult:
        """Check every line and the chain; ``anchor`` ``{"index", "hash"}`` (a recorded head) must still be present."""
        try:
            with open_regular(self.path) as fh:
                lines = fh.read().split(b"\n")
        except FileNotFoundError:
            lines = [b""]
        except OSError as exc:
            raise os_error(self.path, exc, "read") from None
        if lines[-1] != b"":
            return VerifyResult(False, len(lines), len(lines) - 1,
                                f"line {len(lines)}: torn (no trailing newline): an append a crash cut short; the "
                                f"{self.NAME}'s writer drops it when it next opens the {self.NAME} (the lines before "
                                "it are checked by running this again once it is gone)")
        return self.check_lines(lines[:-1], anchor)

    def check_lines(self, lines: list[bytes], anchor: dict | None = None) -> VerifyResult:
        """Check ``lines`` (each entry's canonical JSON, oldest first) as a chain; see :meth:`verify`."""
        prev, n = GENESIS_HASH, 0
        hashes: list[str] = []
        unchecked = False
        for i, raw in enumerate(lines):
            reason = self._check_line(raw, i, prev)
            if reason:
                return VerifyResult(False, len(lines), i, f"entry {i} (line {i + 1}): {reason}")
            entry = json.loads(raw)
            reason = self._check_mac(entry)
            if reason:
                return VerifyResult(False, len(lines), i, f"entry {i} (line {i + 1}): {reason}")
            unchecked |= self.key is None and "mac" in entry
            prev = entry["hash"]
            hashes.append(prev)
            n += 1
        if anchor is not None:
            at = anchor["index"]
            if at >= n:
                return VerifyResult(False, n, n, f"the {self.NAME} ends at entry {n - 1} but entry {at} was recorded "
                                                 "as committed (entries removed from the end)")
            if hashes[at] != anchor["hash"]:
                return VerifyResult(False, n, at, f"entry {at}: hash differs from the recorded committed head")
        return VerifyResult(True, n, unchecked_macs=unchecked, hashes=tuple(hashes))

    # ------------------------------------------------------------ internals

    def _payload_hash(self, payload: dict) -> str:
        try:
            return canonical_hash(payload)
        except (TypeError, ValueError) as exc:
            raise StoreError(self.path, f"{self.NAME} payload is not JSON-serialisable: {exc}") from None

    def _check_mac(self, entry: dict) -> str | None:
        if self.key is None:
            return None
        if "mac" not in entry:
            return f"no MAC although {self.KEY_ENV} is set (written without the key, or forged)"
        if not hmac.compare_digest(str(entry["mac"]), entry_mac(self.key, entry["hash"])):
            return "MAC does not match under the key (forged, or a different key)"
        return None

    @classmethod
    def _check_line(cls, raw: bytes, i: int, prev: str) -> str | None:
        try:
            entry = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError):
            return "not valid JSON (edited or corrupted)"
        if not isinstance(entry, dict) or set(entry) - {"mac"} != cls.fields():
            return "wrong set of fields (edited)"
        if canonical_json(entry).encode("utf-8") != raw:
            return "line is not in canonical form (edited)"
        if entry["index"] != i:
            return f"index is {entry['index']}, expected {i} (a line was deleted, inserted or reordered)"
        if entry["prev_hash"] != prev:
            return "prev_hash does not match the previous entry's hash (chain broken)"
        if entry["type"] not in cls.TYPES:
            return f"unknown entry type {entry['type']!r}"
        if entry["payload_hash"] != canonical_hash(entry["payload"]):
            return "payload does not match payload_hash (payload edited)"
        if entry["hash"] != entry_hash(entry):
            return "hash does not match the entry's content (entry edited)"
        return None

    def _last_entry(self) -> dict | None:
        """Parse the last complete line without reading the whole file (a torn tail, an append a crash cut short, is
        no entry: :meth:`verify` reports it, and a writer drops it on open)."""
        try:
            with open_regular(self.path) as fh:
                size = fh.seek(0, os.SEEK_END)
                end = _line_start(fh, size) if size and _byte(fh, size - 1) != b"\n" else size
                if end == 0:
                    return None
                fh.seek(_line_start(fh, end - 1))
                raw = fh.read(end - fh.tell())
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise os_error(self.path, exc, "read") from None
        try:
            entry = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise StoreError(self.path, f"last entry is corrupt ({exc}); run `{self.VERIFY_COMMAND}` to locate "
                                        "tampering") from None
        if not isinstance(entry, dict) or not {"index", "hash"} <= set(entry):
            raise StoreError(self.path, f"last entry lacks index/hash; run `{self.VERIFY_COMMAND}` to locate "
                                        "tampering")
        return entry


class Journal(HashChain):
    """The decision journal: :data:`ENTRY_TYPES`, each entry with its ``round`` and ``seq``."""

    NAME = "journal"
    TYPES = ENTRY_TYPES
    EXTRA = ("round", "seq")
    KEY_ENV = KEY_ENV
    VERIFY_COMMAND = "memevolve journal verify"

    def append(self, type: str, payload: dict, round: int | None = None, seq: int | None = None) -> dict:
        """Append one entry (fsynced) and return it."""
        return self._append(type, payload, round=round, seq=seq)

    def typed_entries(self) -> list[JournalEntry]:
        """The entries with their payloads checked against their types' models (:class:`StoreError` naming the
        entry and the field of the first that does not fit)."""
        try:
            return [read_entry(entry) for entry in self.entries()]
        except PayloadError as exc:
            raise StoreError(self.path, str(exc)) from None

    def find(self, type: str | None = None, **payload_match: Any) -> list[dict]:
        """Entries of ``type`` (any if ``None``) whose payload has every given key/value."""
        return [e for e in self.entries()
                if (type is None or e["type"] == type)
                and all(k in e["payload"] and e["payload"][k] == v for k, v in payload_match.items())]
