"""Deterministic judging: token F1 / exact match for answers, evidence recall@k for retrieval."""
from __future__ import annotations

import re
import string
from collections import Counter
from typing import Callable, Iterable, Sequence

from evolve.runtime.roles import Judgment

_ARTICLES = re.compile(r"\b(a|an|the|and)\b")
_PUNCT = str.maketrans("", "", string.punctuation)


#: Answers that decline instead of asserting something (compared after :func:`normalize`).
ABSTENTIONS = ("not mentioned in conversation", "not mentioned", "unknown", "i dont know", "i do not know",
               "no information", "cannot be determined", "not enough information", "none")


def answer_kind(answer: str, correct: bool) -> str:
    """``correct``, ``abstain`` (an empty or declining answer) or ``confabulated`` (a wrong assertion)."""
    if correct:
        return "correct"
    text = " ".join(normalize(answer))
    return "abstain" if not text or text in ABSTENTIONS else "confabulated"


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
    """Correct when token F1 against the gold answer reaches ``threshold`` (exact match always counts)."""

    def __init__(self, threshold: float = 0.5):
        if not 0 < threshold <= 1:
            raise ValueError(f"judge threshold must be in (0, 1], got {threshold}")
        self.threshold = threshold
        self.name = f"token-f1@{threshold:g}"

    def judge(self, question: str, gold: str, answer: str) -> Judgment:
        f1 = token_f1(answer, gold)
        return Judgment(correct=f1 >= self.threshold or exact_match(answer, gold), score=f1, judge=self.name)
