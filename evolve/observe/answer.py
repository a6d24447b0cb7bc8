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

from typing import Iterable

from evolve.observe.ladder import derives_from
from evolve.words import content_words

__all__ = ["answer_check", "carried", "content_words"]


def _union(texts: Iterable[str]) -> set[str]:
    words: set[str] = set()
    for text in texts:
        words |= content_words(text)
    return words


def carried(answer: str, texts: Iterable[str]) -> bool:
    """Whether every content word of ``answer`` is among the content words of ``texts`` taken together."""
    return content_words(answer) <= _union(texts)


def answer_check(answer: str, evidence: Iterable[str],
                 packed: Iterable[dict]) -> tuple[bool | None, bool | None]:
    """``(answer in evidence, answer anywhere)`` of one question: ``answer`` is the gold answer, ``evidence`` its
    gold evidence turn ids, ``packed`` the packed items (``{"text", "source_ids"}``). ``(None, None)`` when the
    question is left out (no content word in the answer, or no gold evidence)."""
    gold, packed = set(evidence), list(packed)
    if not gold or not content_words(answer):
        return None, None
    from_evidence = [p.get("text", "") for p in packed if derives_from(p, gold)]
    return carried(answer, from_evidence), carried(answer, (p.get("text", "") for p in packed))
