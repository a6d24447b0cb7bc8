"""The deterministic extractive answerer (``roles.Answerer``)."""
from __future__ import annotations

import re
from typing import Sequence

from evolve.strategy.policy import Answering
from evolve.runtime.roles import AnswerResult, ContextItem
from evolve.runtime.render import plain_parts
from evolve.runtime.text import (STOPWORDS, classify_kind, clauses, content_set, content_tokens, find_date,
                                 format_date, normalise, sentences, tokens)

_EDGE_PUNCT = ".,;:!?\"'()[]{}-"
#: Yes/no questions about a fact (not the speculative "would/could ..."), and what denies one.
_POLAR = re.compile(r"^(?:is|are|does|do|did|has|have|was|were)\s", re.I)
_DENIAL = re.compile(r"(?<![a-z])(?:not|no longer|never|n't|nor)(?![a-z])")


def _polar(question: str, unit: str, body: str) -> str | None:
    """``Yes`` or ``No`` for a yes/no question, by whether the supporting sentence (or its whole item) retracts
    or denies what it mentions."""
    if not _POLAR.match(normalise(question).strip()):
        return None
    denied = classify_kind(body) == "retraction" or _DENIAL.search(" " + normalise(unit).lower() + " ")
    return "No" if denied else "Yes"


def _asked(word: str, wanted: frozenset[str]) -> bool:
    stems = content_tokens(word)
    return bool(stems) and all(s in wanted for s in stems)


def _keywords(span: str, wanted: frozenset[str]) -> str:
    """The content words of ``span`` the question does not already contain, in order."""
    return " ".join(w for w in span.split() if not _asked(w, wanted) and not all(t in STOPWORDS for t in tokens(w)))


def _without_question_words(span: str, wanted: frozenset[str]) -> str:
    """``span`` minus words the question already contains, trimmed of stopwords at both ends."""
    kept = [w for w in span.split() if not _asked(w, wanted)]
    while kept and all(t in STOPWORDS for t in tokens(kept[0])):
        kept.pop(0)
    while kept and all(t in STOPWORDS for t in tokens(kept[-1])):
        kept.pop()
    return " ".join(kept).strip(_EDGE_PUNCT + " ")


class ExtractiveAnswerer:
    """Picks the sentence or clause (``answering.span``) of the packed context sharing most content words
    with the question (a speaker named in the question adds half a word; ties go to the better-scored item)
    and answers with it minus the question's own words (``keywords``: the best clause's remaining
    content words only). Time questions are answered with the supporting
    item's date when ``temporal_dates`` is on: a date written in it, else the date it was said. Yes/no questions
    ("Is/Does/Did ...?") are answered ``No`` when the supporting sentence denies or its item retracts, else ``Yes``."""

    name = "extractive/v2"

    def answer(self, question: str, context: Sequence[ContextItem], policy: Answering, intent: str) -> AnswerResult:
        if not context:
            return AnswerResult("", ())
        wanted = content_set(question)
        candidates = []  # (overlap, item score, -item order, -unit order), item index, unit
        for i, item in enumerate(context):
            speaker, body = plain_parts(item.text)
            bonus = 0.5 if speaker and content_set(speaker) <= wanted else 0.0
            units = sentences(body) or [body]
            if policy.span in ("clause", "keywords"):
                units = [c for unit in units for c in clauses(unit)] or units
            for j, unit in enumerate(units):
                candidates.append(((len(wanted & content_set(unit)) + bonus, item.score, -i, -j), i, unit))
        ranked = sorted(candidates, key=lambda c: c[0], reverse=True)
        _, best, unit = ranked[0]
        item = context[best]
        if intent == "temporal" and policy.temporal_dates:
            date = find_date(plain_parts(item.text)[1]) or (format_date(item.timestamp) if item.timestamp else None)
            if date:
                return AnswerResult(date, (item.id,))
        polar = _polar(question, unit, plain_parts(item.text)[1])
        if polar is not None:
            return AnswerResult(polar, (item.id,))
        text = _without_question_words(unit, wanted) or unit
        if policy.span == "keywords":
            text = _keywords(text, wanted).strip(_EDGE_PUNCT + " ") or text
        return AnswerResult(" ".join(text.split()[: policy.max_answer_tokens]), (item.id,))
