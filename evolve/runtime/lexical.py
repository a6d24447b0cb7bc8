"""Lexical analysers of the BM25 channels: the stop list and the stemmer that turn a text into index and query terms
(the strategy's ``retrieval.lexical``)."""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from evolve.english import ENGLISH_STOPWORDS, english_pieces, snowball
from evolve.runtime.text import STOPWORDS, content_tokens, stem, tokens

#: The stop lists ``retrieval.lexical.stopwords`` names: ``runtime`` (the runtime's own, conversational fillers
#: included), ``english`` (:data:`ENGLISH_STOPWORDS`, words split at apostrophes) or ``none``.
STOP_LISTS = {"runtime": STOPWORDS, "english": ENGLISH_STOPWORDS, "none": frozenset()}


@dataclass(frozen=True)
class Analyzer:
    """How a text becomes BM25 terms. The default (``runtime`` stop list, ``suffix`` stemmer) is
    :func:`evolve.runtime.text.content_tokens` exactly."""

    stopwords: str = "runtime"
    stemmer: str = "suffix"

    def __post_init__(self) -> None:
        if self.stopwords not in STOP_LISTS:
            raise ValueError(f"stop list {self.stopwords!r} is not one of {sorted(STOP_LISTS)}")
        if self.stemmer not in ("suffix", "snowball"):
            raise ValueError(f"stemmer {self.stemmer!r} is not one of ['snowball', 'suffix']")

    @property
    def is_default(self) -> bool:
        return self == DEFAULT

    def terms(self, text: str) -> list[str]:
        """The index or query terms of ``text``, in order (duplicates kept)."""
        return list(_terms(text, self.stopwords, self.stemmer))


DEFAULT = Analyzer()


@lru_cache(maxsize=100_000)
def _terms(text: str, stopwords: str, stemmer: str) -> tuple[str, ...]:
    if stopwords == "runtime" and stemmer == "suffix":
        return tuple(content_tokens(text))
    stop, stem_of = STOP_LISTS[stopwords], stem if stemmer == "suffix" else snowball
    words = english_pieces(text) if stopwords == "english" else tokens(text)
    return tuple(stem_of(w) for w in words if w not in stop)
