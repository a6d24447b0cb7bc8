"""What an erasure request reaches: the tests each copy of users' words is put to by :mod:`evolve.ops.erasure`.

A request erases whole conversations (:class:`UserReach`, ``memevolve erase --user``) or single turns
(:class:`evolve.ops.erasure_turn.TurnReach`, ``--turn``); both answer the same questions of a cache entry, a side
file, an inline example row, a line of a tracked artifact and an artifact's remaining text.
"""
from __future__ import annotations

from typing import Any, Protocol

from evolve.runtime.subject import subject_key
from evolve.state.content import conversation_of

#: Erased texts shorter than this (a gold answer such as "7 May") are not looked for anywhere in an artifact, where
#: they would match others' words; they go with the structure holding them (a trace line, an example).
MIN_QUOTE = 16


class Reach(Protocol):
    """The copies one request erases."""

    #: Subject keys of the conversations whose ingested stores and embedding shards are dropped.
    subjects: set[str]
    #: Subject keys whose side files are looked at (``None``: every subject's).
    side_subjects: set[str] | None

    def cache_entry(self, subject: str | None, said: str) -> bool:
        """Whether an LLM cache entry made for ``subject`` whose request and reply say ``said`` is erased."""

    def side_file(self, subject: str, words: dict[str, Any]) -> bool:
        """Whether the side file of ``subject`` holding ``words`` becomes a tombstone."""

    def row(self, row: dict) -> bool:
        """Whether an example row holding its words inline is stripped of them."""

    def line(self, row: object) -> bool:
        """Whether a line (parsed JSON) of a tracked JSON-lines artifact is dropped."""

    def quoted(self, text: str) -> bool:
        """Whether an artifact's text, once redacted by its structure, still quotes erased words (it is deleted)."""


def speaks_of(row: object) -> bool:
    return isinstance(row, dict) and ("conversation_id" in row or "question_id" in row)


class UserReach:
    """Every copy of ``conversations`` (conversation ids): whatever is filed under them, and whatever quotes one of
    ``texts`` (their turns, questions and answers; an artifact only for texts of :data:`MIN_QUOTE` characters or
    more)."""

    def __init__(self, conversations: set[str], texts: set[str]):
        self.conversations = conversations
        self.subjects = {subject_key(c) for c in conversations}
        self.side_subjects = self.subjects
        self.texts = texts
        self.quotes = {t for t in texts if len(t) >= MIN_QUOTE}

    def cache_entry(self, subject: str | None, said: str) -> bool:
        return subject in self.subjects or any(t in said for t in self.texts)

    def side_file(self, subject: str, words: dict[str, Any]) -> bool:
        return subject in self.subjects

    def row(self, row: dict) -> bool:
        return subject_key(conversation_of(row)) in self.subjects

    def line(self, row: object) -> bool:
        return speaks_of(row) and conversation_of(row) in self.conversations

    def quoted(self, text: str) -> bool:
        return any(q in text for q in self.quotes)
