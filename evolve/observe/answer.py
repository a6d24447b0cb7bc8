"""Answer-bearing context: whether the packed context carries the gold answer, and through the gold evidence.

The check needs nothing of this runtime but each packed item's text and source turn ids, so any memory system's
context can be measured the same way.

Texts are compared by their content words (:func:`evolve.words.content_words`).

Per question, with ``A`` the content words of the gold answer:

* **answer in evidence** — ``A`` is contained in the union of the content words of the packed items whose source
  turn ids intersect the gold evidence turn ids;
* **answer anywhere** — ``A`` is contained in the content words of the whole packed text.

A question whose gold answer has no content word, or that has no gold evidence, is left out (both ``None``).
"""
from __future__ import annotations

from typing import Callable, Iterable

from evolve.observe.ladder import derives_from
from evolve.words import content_words

__all__ = ["answer_check", "carried", "content_words"]


#: :func:`content_words` without its cache: for texts read once (a streamed trace file), which the cache would keep.
content_words_once: Callable[[str], frozenset[str]] = content_words.__wrapped__


def _union(texts: Iterable[str], words: Callable[[str], frozenset[str]] = content_words) -> set[str]:
    out: set[str] = set()
    for text in texts:
        out |= words(text)
    return out


def carried(answer: str, texts: Iterable[str], words: Callable[[str], frozenset[str]] = content_words) -> bool:
    """Whether every content word of ``answer`` is among the content words of ``texts`` taken together (``words``:
    :func:`content_words`, or :data:`content_words_once`)."""
    return content_words(answer) <= _union(texts, words)


def answer_check(answer: str, evidence: Iterable[str], packed: Iterable[dict],
                 words: Callable[[str], frozenset[str]] = content_words) -> tuple[bool | None, bool | None]:
    """``(answer in evidence, answer anywhere)`` of one question: ``answer`` is the gold answer, ``evidence`` its
    gold evidence turn ids, ``packed`` the packed items (``{"text", "source_ids"}``), ``words`` how their texts'
    content words are found. ``(None, None)`` when the question is left out (no content word in the answer, or no
    gold evidence)."""
    gold, packed = set(evidence), list(packed)
    if not gold or not content_words(answer):
        return None, None
    from_evidence = [p.get("text", "") for p in packed if derives_from(p, gold)]
    return carried(answer, from_evidence, words), carried(answer, (p.get("text", "") for p in packed), words)
