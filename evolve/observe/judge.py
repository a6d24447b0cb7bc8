"""Deterministic judging: token F1 / exact match and the four-way verdict for answers, the confabulation flag
(support of an answer by the packed context), evidence recall@k for retrieval.

**Verdict** (:class:`TokenF1Judge`): ``correct`` when token F1 against the gold answer reaches the judge's
threshold (or the answer matches exactly); otherwise ``abstain`` when the answer declines
(:func:`evolve.observe.abstention.abstains`); otherwise ``partial`` when token F1 reaches :data:`PARTIAL_F1`;
otherwise ``wrong``.

**Confabulation flag** (:func:`confabulated`): a ``wrong`` or ``partial`` answer whose *asserted* content words
(:func:`evolve.observe.answer.content_words` of the answer less those of the question, compared with light suffix
stemming) are mostly absent from the packed context: :func:`support`, the share of them the packed text holds, is
below :data:`SUPPORT_FLOOR`. A partial answer counts because padding a right item with invented ones is the same
failure; a correct answer or an abstention is never flagged, nor an answer asserting no content word of its own.
"""
from __future__ import annotations

import re
import string
from collections import Counter
from typing import Callable, Iterable, Sequence

from evolve.observe.abstention import abstains
from evolve.observe.answer import content_words
from evolve.runtime.roles import Judgment

_ARTICLES = re.compile(r"\b(a|an|the|and)\b")
_PUNCT = str.maketrans("", "", string.punctuation)
_SUFFIXES = ("ing", "ed", "s")

#: Token F1 from which a wrong answer is ``partial``.
PARTIAL_F1 = 0.2
#: Share of an answer's asserted content words the packed context must hold for a wrong answer not to be flagged.
SUPPORT_FLOOR = 0.5


def _stem(word: str) -> str:
    """``word`` without its first matching suffix of :data:`_SUFFIXES` when longer than four letters."""
    if len(word) > 4:
        for suffix in _SUFFIXES:
            if word.endswith(suffix):
                return word[: -len(suffix)]
    return word


def _stems(words: Iterable[str]) -> set[str]:
    return {_stem(w) for w in words}


def support(answer: str, question: str, packed: Iterable[str]) -> float | None:
    """Share of the answer's content words not in the question that the ``packed`` texts hold (``None`` when the
    answer asserts no such word)."""
    asserted = _stems(content_words(answer)) - _stems(content_words(question))
    if not asserted:
        return None
    held: set[str] = set()
    for text in packed:
        held |= _stems(content_words(text))
    return round(len(asserted & held) / len(asserted), 4)


def confabulated(verdict: str | None, supported: float | None) -> bool:
    """Whether an answer with ``verdict`` and :func:`support` ``supported`` is flagged as confabulated."""
    return verdict in ("wrong", "partial") and supported is not None and supported < SUPPORT_FLOOR


def normalize(text: str) -> list[str]:
    """LoCoMo/SQuAD-style normalisation: lower case, no punctuation, no articles."""
    text = _ARTICLES.sub(" ", str(text).lower().replace(",", " ").translate(_PUNCT))
    return text.split()


def token_f1(prediction: str, gold: str) -> float:
    pred, ref = normalize(prediction), normalize(gold)
    if not pred or not ref:
        return float(pred == ref)
    common = sum((Counter(pred) & Counter(ref)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred), common / len(ref)
    return 2 * precision * recall / (precision + recall)


def exact_match(prediction: str, gold: str) -> bool:
    return normalize(prediction) == normalize(gold)


def evidence_recall(gold: Iterable[str], retrieved_sources: Sequence[Iterable[str]], k: int) -> float:
    """Share of gold turn ids covered by the source ids of the top-``k`` retrieved items."""
    gold = set(gold)
    if not gold:
        return 0.0
    covered = set().union(*map(set, retrieved_sources[:k])) if retrieved_sources[:k] else set()
    return len(gold & covered) / len(gold)


def first_seen(retrieved_sources: Sequence[Iterable[str]], unit: Callable[[str], str] = str) -> list[str]:
    """The distinct ``unit`` of every source turn (the turn itself, or its session) in the order retrieval first
    reached it: the ranked corpus that LongMemEval's turn- and session-level recall@k read."""
    return list(dict.fromkeys(unit(tid) for sources in retrieved_sources for tid in sources))


def recall_any_all(gold: Iterable[str], ranked: Sequence[str], k: int) -> tuple[float, float]:
    """``(recall_any@k, recall_all@k)``: 1.0 when any / all of ``gold`` is among the first ``k`` of ``ranked``."""
    gold, top = set(gold), set(ranked[:k])
    return float(bool(gold & top)), float(bool(gold) and gold <= top)


class TokenF1Judge:
    """Correct when token F1 against the gold answer reaches ``threshold`` (exact match always counts); the verdict
    as the module docstring says. Category and abstention play no part (the evaluator counts a declining answer to
    an abstention question as correct, whatever the judge)."""

    def __init__(self, threshold: float = 0.5):
        if not 0 < threshold <= 1:
            raise ValueError(f"judge threshold must be in (0, 1], got {threshold}")
        self.threshold = threshold
        self.name = f"token-f1@{threshold:g}"

    def judge(self, question: str, gold: str, answer: str, *, category: str = "",
              abstention: bool = False) -> Judgment:
        f1 = token_f1(answer, gold)
        correct = f1 >= self.threshold or exact_match(answer, gold)
        verdict = ("correct" if correct else "abstain" if abstains(answer) else
                   "partial" if f1 >= PARTIAL_F1 else "wrong")
        return Judgment(correct=correct, score=f1, judge=self.name, verdict=verdict)
