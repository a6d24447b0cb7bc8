"""English term analysis shared by the runtime's BM25 channels and the probe generators' raw-turn BM25 peer: a full
English function-word list and the Snowball stemmer (the tokenization AutoRAG's BM25 uses)."""
from __future__ import annotations

import re
import threading
from functools import lru_cache

import Stemmer

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
_PIECE = re.compile(r"[a-z0-9]+")
_snowball = threading.local()  # a PyStemmer stemmer is not safe to share between threads


@lru_cache(maxsize=200_000)
def snowball(token: str) -> str:
    """The Snowball (Porter 2) English stem of ``token`` (a possessive or contraction tail dropped first)."""
    stemmer = getattr(_snowball, "stemmer", None)
    if stemmer is None:
        stemmer = _snowball.stemmer = Stemmer.Stemmer("english")
    return stemmer.stemWord(token.split("'", 1)[0])


def english_pieces(text: str) -> list[str]:
    """The lower-case alphanumeric pieces of ``text`` (words split at apostrophes), stop words kept."""
    return _PIECE.findall(text.lower())


def english_terms(text: str) -> list[str]:
    """The Snowball stems of ``text``'s pieces that are not English function words, in order."""
    return [snowball(w) for w in english_pieces(text) if w not in ENGLISH_STOPWORDS]
