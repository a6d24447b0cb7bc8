"""Question analysis: intent classification and the deterministic sub-query expander (``roles.Expander``)."""
from __future__ import annotations

import re
from functools import lru_cache

from evolve.strategy.policy import Expansion
from evolve.runtime.text import DATE_PATTERN, MONTHS, STOPWORDS, WEEKDAYS, normalise, tokens

_TEMPORAL = re.compile(r"^\s*when\b|\bwhat (?:date|day|year|month|time)\b|\bwhich (?:date|day|year|month)\b"
                       r"|\bhow long (?:ago|has|have|had|did|was|were)\b|\bsince when\b|\bhow many (?:days|weeks|"
                       r"months|years) ago\b", re.I)
_OPEN = re.compile(r"^\s*why\b|\bwould\b|\blikely\b|\bmight\b", re.I)
_QUESTION_WORDS = frozenset("what when where who whom whose why how which did does do is are was were can could "
                            "would should will has have had".split())
_NOT_NAMES = STOPWORDS | _QUESTION_WORDS | frozenset(WEEKDAYS) | frozenset(m.lower() for m in MONTHS)


def entities(question: str) -> list[str]:
    """Capitalised names in the question (possessives stripped), in order, without repeats."""
    return list(_entities(question))


@lru_cache(maxsize=100_000)
def _entities(question: str) -> tuple[str, ...]:
    found: list[str] = []
    for raw in normalise(question).split():
        word = raw.strip(".,!?;:\"()")
        word = word[:-2] if word.endswith("'s") else word
        if not word[:1].isupper() or word.lower() in _NOT_NAMES:
            continue
        if word not in found:
            found.append(word)
    return tuple(found)


@lru_cache(maxsize=100_000)
def classify_intent(question: str) -> str:
    """``temporal`` | ``open_domain`` | ``multi_hop`` | ``single_hop`` from the wording of the question."""
    if _TEMPORAL.search(question):
        return "temporal"
    if _OPEN.search(question):
        return "open_domain"
    lowered = f" {question.lower()} "
    if len(_entities(question)) >= 2 or " both " in lowered or " and " in lowered:
        return "multi_hop"
    return "single_hop"


def _content_words(question: str, exclude: set[str]) -> list[str]:
    bare = (t[:-2] if t.endswith("'s") else t for t in tokens(question))
    return [t for t in bare if t not in STOPWORDS and t not in _QUESTION_WORDS and t not in exclude]


@lru_cache(maxsize=100_000)  # a night asks every candidate the same questions
def _expand(question: str, max_subqueries: int, by_entities: bool, dates: bool, keywords: bool) -> tuple[str, ...]:
    """:meth:`RuleExpander.expand` for the expansion policy's switches."""
    if max_subqueries <= 0:
        return ()
    names = _entities(question)
    lowered_names = {n.lower() for n in names}
    rest = _content_words(question, lowered_names)
    out: list[str] = []
    if by_entities:
        out += [" ".join([name, *rest]) for name in names]
    if dates:
        out += [m.group(0) for m in DATE_PATTERN.finditer(question)]
        out += [w for w in tokens(question) if w in WEEKDAYS]
    if keywords:
        words = _content_words(question, set())
        out += [f"{a} {b}" for a, b in zip(words, words[1:])]
    unique = list(dict.fromkeys(q for q in out if q.strip() and q.strip().lower() != question.strip().lower()))
    return tuple(unique[:max_subqueries])


class RuleExpander:
    """Entity sub-queries (each name with the question's other content words), date phrases, keyword pairs."""

    name = "rule-expander/v1"

    def expand(self, question: str, policy: Expansion) -> list[str]:
        return list(_expand(question, policy.max_subqueries, policy.entities, policy.dates, policy.keywords))
