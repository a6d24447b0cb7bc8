"""Query-time memory lifecycle: per-category recency scoring, and the standing of a fact for one question
(active, superseded, expired or retracted), as the strategy's ``lifecycle`` section dictates."""
from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

import numpy as np

from evolve.runtime.facts import expired
from evolve.runtime.store import MemoryItem, MemoryStore
from evolve.runtime.text import normalise
from evolve.strategy.policy import FACT_CATEGORIES, Lifecycle, PerCategory

#: Questions about how things were or changed: superseded facts stay visible to them (``bypass_cues``).
CHANGE_CUES = re.compile(r"(?<![a-z])(?:used to|before|previous|previously|originally|formerly|at first|earlier|"
                         r"old|former|change|changed|switch|switched|switching|no longer|anymore|any more|"
                         r"first)(?![a-z])")
#: Questions about the past: expired events stay visible to them (expiry applies to current-state questions).
PAST_CUES = re.compile(r"(?<![a-z])(?:did|was|were|had|ago|last|used to|before|previous|previously|went|"
                       r"happened)(?![a-z])")


def looks_back(question: str) -> bool:
    """Whether ``question`` asks about an earlier state or a change (bypass cues)."""
    return bool(CHANGE_CUES.search(normalise(question).lower()))


def asks_past(question: str) -> bool:
    return bool(PAST_CUES.search(normalise(question).lower()))


@dataclass(frozen=True)
class Cues:
    """What a question's wording says about time, read once per question."""

    back: bool  # asks about an earlier state or a change (:func:`looks_back`)
    current: bool  # asks how things are now, neither back nor about the past: only such questions see expiry and
    #                per-category decay

    @classmethod
    def of(cls, question: str) -> "Cues":
        back = looks_back(question)
        return cls(back, not back and not asks_past(question))


@dataclass(frozen=True)
class Standing:
    """A fact's lifecycle state for one question, and the later fact that superseded it, if any."""

    state: str = "active"  # active | superseded | expired | retracted
    by: str | None = None
    slot: bool = False  # superseded by a later statement of its slot (not by an ingestion-time correction)

    @property
    def reason(self) -> str:
        """Why the filter removes the fact; slot supersession is told apart, as its moves differ."""
        return "slot_superseded" if self.slot else self.state


ACTIVE = Standing()


def _successor(store: MemoryStore, item: MemoryItem, lc: Lifecycle) -> str | None:
    """The first later statement of ``item``'s slot sure enough to replace it."""
    threshold = lc.slots.threshold(item.meta.category)
    rescued = lc.numeric_rescue.enabled and item.meta.numeric
    for later_id in item.versions:
        later = store.item(later_id)
        if lc.forget_guard and later.retracted:
            continue
        if later.meta.confidence >= threshold and (not rescued or later.meta.numeric):
            return later_id
    return None


def standing(store: MemoryStore, item: MemoryItem, lc: Lifecycle, cues: Cues, now: datetime | None) -> Standing:
    """Whether ``item`` may answer a question with ``cues`` asked at ``now``; pruning is decided separately."""
    back = lc.bypass_cues and cues.back
    if lc.supersession and item.superseded_by is not None and not back:
        return Standing("superseded", item.superseded_by)
    if lc.forget_guard and item.retracted:
        return Standing("retracted")
    if lc.slots.enabled and item.versions and not back:
        later = _successor(store, item, lc)
        if later is not None:
            return Standing("superseded", later, slot=True)
    if (lc.expiry.enabled and not (lc.numeric_rescue.enabled and item.meta.numeric) and cues.current
            and expired(item.meta, now, lc.expiry.buffer_days)):
        return Standing("expired")
    return ACTIVE


def _per_category(values: PerCategory, categories: np.ndarray) -> np.ndarray:
    return np.array([values.of(c) for c in FACT_CATEGORIES], dtype=np.float64)[categories]


def decay_multipliers(store: MemoryStore, lc: Lifecycle, ref_day: float | None) -> np.ndarray:
    """Per item, the share of its relevance ``s`` kept: ``max(1 - alpha * (1 - 0.5 ** (age / half_life)), floor)``
    by the item's category (numeric facts keep at least the rescue floor); 1 for items of unknown age."""
    out = np.ones(len(store))
    decay = lc.decay
    if not decay.enabled or ref_day is None or not np.isfinite(ref_day):
        return out
    categories = store.category_index
    half_life = _per_category(decay.half_life_days, categories)
    alpha = _per_category(decay.alpha, categories)
    floor = _per_category(decay.floor, categories)
    age = np.clip(ref_day - store.days, 0.0, None)
    known = np.isfinite(age)
    activation = np.where(known, 0.5 ** (np.where(known, age, 0.0) / half_life), 1.0)
    out = np.maximum(1.0 - alpha * (1.0 - activation), floor)
    if lc.numeric_rescue.enabled:
        out = np.where(store.numeric, np.maximum(out, lc.numeric_rescue.floor), out)
    return out
