"""The deterministic rule-based fact extractor (``roles.Extractor``)."""
from __future__ import annotations

from collections import Counter
from typing import Sequence

from evolve.benchmarks.types import Turn
from evolve.strategy.policy import Extraction
from evolve.runtime.roles import ExtractedFact
from evolve.runtime.text import (attribute, classify_kind, content_tokens, resolve_relative_dates, salience,
                                 sentences, specific_count)

#: Kinds kept even when short: they drive supersession and retraction.
LIFECYCLE_KINDS = ("correction", "retraction")


def resolved(text: str, turn: Turn, policy: Extraction) -> str:
    """``text`` of ``turn`` as memory keeps it: relative dates resolved (in the policy's style) when the policy says."""
    return resolve_relative_dates(text, turn.timestamp, policy.date_style) if policy.resolve_relative_dates else text


def turn_fact(turn: Turn, policy: Extraction) -> ExtractedFact:
    """The whole turn as one fact (used to supplement turns that yielded none, and for session memory)."""
    body = resolved(turn.text, turn, policy)
    body = " ".join(body.split())
    return ExtractedFact(attribute(turn.speaker, turn.timestamp, body), (turn.id,), turn.speaker, turn.timestamp,
                         classify_kind(body), salience(content_tokens(body), None, specific_count(body)))


class RuleExtractor:
    """Every sentence of the window is a candidate L0 fact, attributed to its speaker and session date.

    Sentences with fewer than ``min_fact_tokens`` content tokens are dropped unless they are corrections or
    retractions; salience weighs content tokens by their rarity within the window.
    """

    name = "rule-extractor/v1"

    def extract(self, window: Sequence[Turn], policy: Extraction) -> list[ExtractedFact]:
        candidates: list[tuple[Turn, str, list[str]]] = []
        for turn in window:
            for sentence in sentences(turn.text):
                body = resolved(sentence, turn, policy)
                candidates.append((turn, body, content_tokens(body)))
        doc_freq = Counter(t for _, _, toks in candidates for t in set(toks))
        facts = []
        for turn, body, toks in candidates:
            kind = classify_kind(body)
            if len(toks) < policy.min_fact_tokens and kind not in LIFECYCLE_KINDS:
                continue
            facts.append(ExtractedFact(attribute(turn.speaker, turn.timestamp, body), (turn.id,), turn.speaker,
                                       turn.timestamp, kind, salience(toks, doc_freq, specific_count(body))))
        return facts
