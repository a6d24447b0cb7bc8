"""Query-time memory lifecycle: per-category recency scoring, the event-time kernel, numeric rescue, category
routing, and the standing of a fact for one question (active, superseded, expired or retracted), as the strategy's
``lifecycle`` section dictates."""
from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache

import numpy as np

from evolve.runtime.facts import categories, expired
from evolve.runtime.lexical import DEFAULT, Analyzer
from evolve.runtime.store import MemoryItem, MemoryStore
from evolve.runtime.text import normalise
from evolve.strategy.policy import FACT_CATEGORIES, Lifecycle, PerCategory

#: Questions about how things were or changed: superseded facts stay visible to them (``bypass_cues``).
CHANGE_CUES = re.compile(r"(?<![a-z])(?:used to|before|previous|previously|originally|formerly|at first|earlier|"
                         r"old|former|change|changed|switch|switched|switching|no longer|anymore|any more|"
                         r"first)(?![a-z])")
#: Questions about what was withdrawn ("what did I cancel?", "what did I change my mind about?"): retracted and
#: superseded facts stay visible to them (``bypass_cues``); otherwise the retraction mask hides them.
RETRACTION_QUESTION_CUES = re.compile(
    r"(?<![a-z])(?:cancel\w*|call(?:ed|ing)? (?:\w+ )?off|scrap\w*|drop(?:ped|ping)?|retract\w*|withdr[ae]w\w*|"
    r"forg[eo]t(?:ten)? about|chang\w* (?:my|his|her|their|your|our) minds?|decid\w* against|g[ai]ve up|"
    r"back\w* out|take back|took back|no longer|abandon\w*)(?![a-z])")
#: Questions about the past: expired events stay visible to them (expiry applies to current-state questions).
PAST_CUES = re.compile(r"(?<![a-z])(?:did|was|were|had|ago|last|used to|before|previous|previously|went|"
                       r"happened)(?![a-z])")


def looks_back(question: str) -> bool:
    """Whether ``question`` asks about an earlier state or a change (bypass cues)."""
    return bool(CHANGE_CUES.search(normalise(question).lower()))


def asks_past(question: str) -> bool:
    return bool(PAST_CUES.search(normalise(question).lower()))


def asks_retracted(question: str) -> bool:
    """Whether ``question`` asks what was cancelled, dropped, retracted or changed one's mind about."""
    return bool(RETRACTION_QUESTION_CUES.search(normalise(question).lower()))


@dataclass(frozen=True)
class Cues:
    """What a question's wording says about time, read once per question."""

    back: bool  # asks about an earlier state or a change (:func:`looks_back`)
    current: bool  # asks how things are now, neither back nor about the past: only such questions see expiry and
    #                per-category decay
    retracted: bool = False  # asks what was withdrawn (:func:`asks_retracted`)

    @classmethod
    @lru_cache(maxsize=100_000)  # a night asks every candidate the same questions
    def of(cls, question: str) -> "Cues":
        lowered = normalise(question).lower()  # what looks_back, asks_past and asks_retracted read
        retracted = bool(RETRACTION_QUESTION_CUES.search(lowered))
        back = retracted or bool(CHANGE_CUES.search(lowered))
        return cls(back, not back and not PAST_CUES.search(lowered), retracted)


@dataclass(frozen=True)
class Standing:
    """A fact's lifecycle state for one question, and the later fact that superseded it, if any."""

    state: str = "active"  # active | superseded | expired | retracted
    by: str | None = None
    slot: bool = False  # superseded by a later statement of its slot (not by an ingestion-time correction)
    #: Why an active fact is visible although it was retracted or superseded: ``"retraction_question"`` or
    #: ``"change_question"`` (the question's cues lifted the mask, ``bypass_cues``).
    shown_because: str | None = None

    @property
    def reason(self) -> str:
        """Why the filter removes the fact; slot supersession is told apart, as its moves differ."""
        return "slot_superseded" if self.slot else self.state

    def to_dict(self) -> dict:
        out = {"state": self.state, "by": self.by}
        return {**out, "shown_because": self.shown_because} if self.shown_because else out


ACTIVE = Standing()


def _said(store: MemoryStore, item_id: str, now: datetime | None) -> bool:
    """Whether the item ``item_id`` was said by ``now`` (any was, when ``now`` is unknown; an undated one was)."""
    said = store.item(item_id).timestamp
    return now is None or said is None or said <= now


def _successor(store: MemoryStore, item: MemoryItem, lc: Lifecycle, now: datetime | None) -> str | None:
    """The first later statement of ``item``'s slot, said by ``now``, sure enough to replace it."""
    threshold = lc.slots.threshold(item.meta.category)
    rescued = lc.numeric_rescue.enabled and item.meta.numeric
    for later_id in item.versions:
        later = store.item(later_id)
        if not _said(store, later_id, now) or (lc.forget_guard and later.retracted
                                               and _said(store, later.retracted_by, now)):
            continue
        if later.meta.confidence >= threshold and (not rescued or later.meta.numeric):
            return later_id
    return None


def _corrected_by(store: MemoryStore, item: MemoryItem, lc: Lifecycle, now: datetime | None) -> str | None:
    """The later correction, said by ``now``, that supersedes ``item`` (marked at ingestion), if supersession is on;
    under numeric rescue a numeric fact survives a correction without a number, as it survives such a statement of
    its slot."""
    if not lc.supersession or item.superseded_by is None or not _said(store, item.superseded_by, now):
        return None
    if lc.numeric_rescue.enabled and item.meta.numeric and not store.item(item.superseded_by).meta.numeric:
        return None
    return item.superseded_by


def standing(store: MemoryStore, item: MemoryItem, lc: Lifecycle, cues: Cues, now: datetime | None) -> Standing:
    """Whether ``item`` may answer a question with ``cues`` asked at ``now``; pruning is decided separately. With
    ``bypass_cues`` a change question sees superseded facts and a retraction question also retracted ones, and the
    standing says so."""
    if item.settled:
        return ACTIVE  # nothing below applies to it: most facts
    back = lc.bypass_cues and cues.back
    corrected = _corrected_by(store, item, lc, now)
    if corrected is not None and not back:
        return Standing("superseded", corrected)
    if lc.forget_guard and item.retracted and _said(store, item.retracted_by, now):
        return Standing("active", shown_because="retraction_question") if back and cues.retracted \
            else Standing("retracted")
    later = _successor(store, item, lc, now) if lc.slots.enabled and item.versions else None
    if later is not None and not back:
        return Standing("superseded", later, slot=True)
    if (lc.hides_passed and not (lc.numeric_rescue.enabled and item.meta.numeric) and cues.current
            and expired(item.meta, now, lc.expiry.buffer_days, lc.expiry.scope)):
        return Standing("expired")
    replaced_by = corrected or later
    if replaced_by is not None:  # only a bypassing question gets here
        return Standing("active", replaced_by, shown_because="retraction_question" if cues.retracted
                        else "change_question")
    return ACTIVE


def _per_category(values: PerCategory, membership: np.ndarray) -> np.ndarray:
    """Each item's value: the mean over the categories it belongs to (``membership`` rows sum to 1)."""
    return membership @ np.array([values.of(c) for c in FACT_CATEGORIES], dtype=np.float64)


def _activation(store: MemoryStore, lc: Lifecycle, ref_day: float) -> np.ndarray:
    """``0.5 ** (age / half_life)`` by each item's categories; 1 for items of unknown age."""
    age = np.clip(ref_day - store.days, 0.0, None)
    known = np.isfinite(age)
    half_life = _per_category(lc.decay.half_life_days, store.membership)
    return np.where(known, 0.5 ** (np.where(known, age, 0.0) / half_life), 1.0)


def decay_multipliers(store: MemoryStore, lc: Lifecycle, ref_day: float | None) -> np.ndarray:
    """Per item, the share of its relevance ``s`` the multiplicative kernel keeps:
    ``max(1 - alpha * (1 - activation), floor)`` by the item's categories; 1 for items of unknown age."""
    decay = lc.decay
    if not decay.enabled or ref_day is None or not np.isfinite(ref_day):
        return np.ones(len(store))
    alpha = _per_category(decay.alpha, store.membership)
    floor = _per_category(decay.floor, store.membership)
    return np.maximum(1.0 - alpha * (1.0 - _activation(store, lc, ref_day)), floor)


def event_kernel(store: MemoryStore, lc: Lifecycle, ref_day: float | None) -> np.ndarray:
    """Per item, the share of its relevance the event kernel keeps: for a dated event ``d`` days ahead,
    ``1 - (1 - upcoming_floor) * (1 - 0.5 ** (d / lead_days))`` (rising to 1 on the day), ``d`` days past,
    ``0.5 ** (d / after_half_life_days)``; 1 for facts without a dated event (and numeric ones under numeric rescue)."""
    ex = lc.expiry
    out = np.ones(len(store))
    if not ex.enabled or ex.mode != "kernel" or ref_day is None or not np.isfinite(ref_day):
        return out
    days = store.dated_days if ex.scope == "dated" else store.event_days
    dated = np.isfinite(days)
    if lc.numeric_rescue.enabled:
        dated &= ~store.numeric
    ahead = np.where(dated, days - np.floor(ref_day), 0.0)
    rising = 1.0 - (1.0 - ex.upcoming_floor) * (1.0 - 0.5 ** (np.clip(ahead, 0.0, None) / ex.lead_days))
    falling = 0.5 ** (np.clip(-ahead, 0.0, None) / ex.after_half_life_days)
    return np.where(dated, np.where(ahead >= 0, rising, falling), out)


def rescore(relevance: np.ndarray, store: MemoryStore, lc: Lifecycle, ref_day: float | None) -> np.ndarray:
    """Relevance ``s`` of every item after per-category decay (multiplicative ``s * share``, the blend
    ``alpha * a + (1 - alpha) * s``, or that blend kept at least ``floor * s``) and the event kernel; a numeric fact
    with ``s >= min_relevance`` keeps at least ``floor * s`` (numeric rescue)."""
    out = np.asarray(relevance, dtype=np.float64)
    if lc.decay.enabled and ref_day is not None and np.isfinite(ref_day):
        if lc.decay.kind in ("blend", "blend_floor"):
            alpha = _per_category(lc.decay.alpha, store.membership)
            blended = alpha * _activation(store, lc, ref_day) + (1.0 - alpha) * out
            out = (np.maximum(blended, _per_category(lc.decay.floor, store.membership) * out)
                   if lc.decay.kind == "blend_floor" else blended)
        else:
            out = out * decay_multipliers(store, lc, ref_day)
    out = out * event_kernel(store, lc, ref_day)
    rescue = lc.numeric_rescue
    if rescue.enabled:
        kept = store.numeric & (relevance >= rescue.min_relevance)
        out = np.where(kept, np.maximum(out, rescue.floor * relevance), out)
    return out


def category_channel(store: MemoryStore, question: str, depth: int, eligible: np.ndarray,
                     analyzer: Analyzer = DEFAULT) -> tuple[np.ndarray, np.ndarray]:
    """Category routing: ``(ranked indices, scores)`` of the ``depth`` facts best matching ``question`` by BM25 among
    those belonging to a category the question's wording names (none when it names none)."""
    wanted = [FACT_CATEGORIES.index(c) for c in categories(question)]
    scores = np.zeros(len(store))
    if wanted:
        member = store.membership[:, wanted].sum(axis=1) > 0
        scores = np.where(member & eligible, store.bm25_scores(analyzer.terms(question), analyzer), 0.0)
    idx = np.flatnonzero(scores > 0)
    return idx[np.lexsort((idx, -scores[idx]))][:depth], scores
