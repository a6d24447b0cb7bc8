"""Lexical analysers of the BM25 channels: the stop list and the stemmer that turn a text into index and query terms
(the strategy's ``retrieval.lexical``)."""
from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from functools import lru_cache

import Stemmer

from evolve.runtime.text import STOPWORDS, content_tokens, normalise, stem, tokens

#: A full English function-word list (NLTK's, plus a few conversational verbs): the list AutoRAG's BM25 drops.
ENGLISH_STOPWORDS = frozenset("""
i me my myself we our ours ourselves you your yours yourself yourselves he him his himself she her hers herself it its
itself they them their theirs themselves what which who whom this that these those am is are was were be been being
have has had having do does did doing a an the and but if or because as until while of at by for with about against
between into through during before after above below to from up down in out on off over under again further then once
here there when where why how all any both each few more most other some such no nor not only own same so than too
very s t can will just don should now d ll m o re ve y ain aren couldn didn doesn hadn hasn haven isn ma mightn mustn
needn shan shouldn wasn weren won wouldn would could also get got us let
""".split())
#: The stop lists ``retrieval.lexical.stopwords`` names: ``runtime`` (the runtime's own, conversational fillers
#: included), ``english`` (:data:`ENGLISH_STOPWORDS`, words split at apostrophes) or ``none``.
STOP_LISTS = {"runtime": STOPWORDS, "english": ENGLISH_STOPWORDS, "none": frozenset()}
_PIECE = re.compile(r"[a-z0-9]+")
_snowball = threading.local()  # a PyStemmer stemmer is not safe to share between threads


@lru_cache(maxsize=200_000)
def snowball(token: str) -> str:
    """The Snowball (Porter 2) English stem of ``token`` (a possessive or contraction tail dropped first)."""
    stemmer = getattr(_snowball, "stemmer", None)
    if stemmer is None:
        stemmer = _snowball.stemmer = Stemmer.Stemmer("english")
    return stemmer.stemWord(token.split("'", 1)[0])


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
    words = _PIECE.findall(normalise(text).lower()) if stopwords == "english" else tokens(text)
    return tuple(stem_of(w) for w in words if w not in stop)
