"""Whose words a piece of derived state holds: the conversation being ingested or asked about, as a context variable.

The harness opens :func:`subject` around each conversation (its ingestion and its questions), so the caches that
keep derived copies of user content (embedding shards, ingested stores, LLM replies) file them under the
conversation's :func:`subject_key`, and an erasure request naming the conversation finds every one of them.
"""
from __future__ import annotations

import contextvars
import hashlib
from contextlib import contextmanager
from typing import Iterator

_SUBJECT: contextvars.ContextVar[str | None] = contextvars.ContextVar("memevolve_subject", default=None)
#: Hex digits of a subject key.
KEY_LENGTH = 16


def subject_key(conversation_id: str) -> str:
    """The key derived state of ``conversation_id`` is filed under (a hash prefix: no id appears in a file name)."""
    return hashlib.sha256(f"subject\0{conversation_id}".encode("utf-8")).hexdigest()[:KEY_LENGTH]


@contextmanager
def subject(conversation_id: str) -> Iterator[str]:
    """Mark the work done in this context (and in contexts copied from it) as holding ``conversation_id``'s words."""
    token = _SUBJECT.set(subject_key(conversation_id))
    try:
        yield _SUBJECT.get()
    finally:
        _SUBJECT.reset(token)


def current_subject() -> str | None:
    """The subject key of the conversation this context works on, if any."""
    return _SUBJECT.get()
