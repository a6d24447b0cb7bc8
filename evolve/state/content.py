"""Users' words by reference: the redactable side store of a stores directory (``content/``).

A candidate record keeps an example's words (question, gold answer, both answers) not inline but as a reference
``<subject>/<digest>`` (:mod:`evolve.runtime.subject`: the conversation's key), and the words in
``content/<subject>/<digest>.json`` with a random nonce; ``digest`` is the SHA-256 of nonce and words. The record's
hash, which the journal chains, covers the reference, never the words. Redaction replaces the side file with a
tombstone saying when and by which request it was erased: every record and journal hash still holds, the example
reads "erased at ...", and the digest alone reveals nothing of the words (the nonce is gone with them).
"""
from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from pydantic import BaseModel, ConfigDict, ValidationError

from evolve.canonical import canonical_hash
from evolve.files import StoreError, atomic_write_json, ensure_dir, read_json
from evolve.runtime.subject import subject_key

#: Fields of an example row that hold users' words (the rest are ids, categories and root causes).
WORDS = ("question", "gold", "baseline_answer", "candidate_answer")
#: The field of a row by reference that holds its reference.
REF = "content"
#: The field of a row whose words were erased: the tombstone.
ERASED = "erased"


class Held(BaseModel):
    """A side file holding words."""

    model_config = ConfigDict(extra="forbid")
    nonce: str
    words: dict[str, Any]


class Tombstone(BaseModel):
    """A side file whose words were erased."""

    model_config = ConfigDict(extra="forbid")
    erased_at: str
    request: str


def conversation_of(row: Mapping[str, Any]) -> str:
    """The conversation an example row speaks of: its ``conversation_id``, else its question id up to the last ``/``
    (LoCoMo, synthetic, the trace contract's ``conv/qN``), else the question id (LongMemEval: one per question)."""
    return row.get("conversation_id") or str(row["question_id"]).rpartition("/")[0] or str(row["question_id"])


class ContentStore:
    """The side files under ``root`` (created on first write)."""

    def __init__(self, root: str | Path):
        self.root = Path(root)

    def _path(self, ref: str) -> Path:
        subject, sep, digest = ref.partition("/")
        if not (sep and subject.isalnum() and digest.isalnum()):
            raise StoreError(self.root / ref, "not a content reference (<subject>/<digest>)")
        return self.root / subject / f"{digest}.json"

    def put(self, conversation_id: str, words: Mapping[str, Any]) -> str:
        """Keep ``words`` (fsynced) and return their reference."""
        held = Held(nonce=secrets.token_hex(16), words=dict(words))
        ref = f"{subject_key(conversation_id)}/{canonical_hash(held.model_dump())}"
        atomic_write_json(self._path(ref), held.model_dump())
        return ref

    def get(self, ref: str) -> Held | Tombstone:
        """The words of ``ref``, or their tombstone; :class:`StoreError` naming the file when it is missing, malformed
        or does not hash to its reference (edited)."""
        path = self._path(ref)
        data = read_json(path)
        try:
            if isinstance(data, dict) and "erased_at" in data:
                return Tombstone.model_validate(data)
            held = Held.model_validate(data)
        except ValidationError as exc:
            raise StoreError(path, f"not a content file: {exc.errors()[0]['loc']}: {exc.errors()[0]['msg']}") from None
        if canonical_hash(held.model_dump()) != ref.partition("/")[2]:
            raise StoreError(path, "words do not hash to their reference (edited)")
        return held

    def words_of(self, subjects: set[str]) -> set[str]:
        """Every word field held for ``subjects`` (subject keys), as text: what an erasure also looks for in caches."""
        out: set[str] = set()
        for path in self._files(subjects):
            data = read_json(path)
            if isinstance(data, dict) and "words" in data:
                out |= {str(v) for v in data["words"].values() if v not in (None, "")}
        return out

    def redact(self, held: Callable[[str, dict[str, Any]], bool], erased_at: str, request: str,
               subjects: Iterable[str] | None = None) -> int:
        """Replace by a tombstone every side file (of ``subjects``, subject keys; of every subject when ``None``)
        still holding words that ``held(subject, words)`` selects; the number replaced."""
        stone = Tombstone(erased_at=erased_at, request=request).model_dump()
        n = 0
        for path in self._files(subjects):
            data = read_json(path)
            if isinstance(data, dict) and isinstance(data.get("words"), dict) and held(path.parent.name, data["words"]):
                atomic_write_json(path, stone)
                n += 1
        return n

    def _files(self, subjects: Iterable[str] | None) -> list[Path]:
        if subjects is None:
            return sorted(self.root.glob("*/*.json"))
        return [p for s in sorted(subjects) for p in sorted((self.root / s).glob("*.json"))]


def by_reference(examples: dict | None, store: ContentStore) -> dict | None:
    """``examples`` (a record's ``{side: [row]}``) with every row's words moved to ``store``, the row keeping ids,
    category, root causes and the reference; rows already by reference are kept as they are."""
    if examples is None:
        return None

    def row(r: dict) -> dict:
        if REF in r or ERASED in r:
            return r
        kept = {k: v for k, v in r.items() if k not in WORDS}
        return {**kept, REF: store.put(conversation_of(r), {k: r.get(k) for k in WORDS})}

    ensure_dir(store.root)
    return {side: [row(r) for r in rows] for side, rows in examples.items()}


def resolved(examples: dict | None, store: ContentStore) -> dict | None:
    """``examples`` as a reader shows them: each row with its words, or, erased, with ``erased`` set to the time and
    every word field reading ``[erased at <time>]``; inline rows (records written before words were kept by
    reference) as they are."""
    if examples is None:
        return None

    def row(r: dict) -> dict:
        if ERASED in r:
            return {**r, **dict.fromkeys(WORDS, f"[erased at {r[ERASED]}]")}
        if REF not in r:
            return r
        found = store.get(r[REF])
        if isinstance(found, Tombstone):
            return {**r, ERASED: found.erased_at, **dict.fromkeys(WORDS, f"[erased at {found.erased_at}]")}
        return {**r, **found.words}

    return {side: [row(r) for r in rows] for side, rows in examples.items()}


def redact_inline(examples: dict | None, held: Callable[[dict], bool], erased_at: str) -> dict | None:
    """``examples`` with the inline rows (written before words were kept by reference) that ``held`` selects stripped
    of their words and marked ``erased``; ``None`` when no row changed."""
    if examples is None:
        return None
    changed = False

    def row(r: dict) -> dict:
        nonlocal changed
        if REF in r or ERASED in r or not held(r):
            return r
        changed = True
        return {**{k: v for k, v in r.items() if k not in WORDS}, ERASED: erased_at}

    out = {side: [row(r) for r in rows] for side, rows in examples.items()}
    return out if changed else None
