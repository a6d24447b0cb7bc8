"""Outcomes of the verification stages that have no type of their own elsewhere: the probe screen, the context cost
and the holdout comparison. Each is plain data; :mod:`evolve.state.records` stores and reads it."""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from evolve.verify.statistics import PairedBrief


@dataclass(frozen=True)
class ProbeOutcome:
    """Candidate vs. parent on the probe questions. Exactly one of the ``*_changed`` counts is set: answers under
    the accuracy objective, packed contexts under the evidence objectives."""

    n: int
    acc_baseline: float
    acc_candidate: float
    delta: float
    answers_changed: int | None = None
    packed_contexts_changed: int | None = None
    #: Exact McNemar p of candidate vs. parent on the probe questions: a probe-stopped candidate's place in the round's
    #: multiple-testing family (``None`` in records written before it was kept).
    mcnemar_p: float | None = None

    def to_dict(self) -> dict[str, Any]:
        optional = ("answers_changed", "packed_contexts_changed", "mcnemar_p")
        return {k: v for k, v in asdict(self).items() if v is not None or k not in optional}


@dataclass(frozen=True)
class ContextCost:
    """Mean packed context words per question of parent and candidate."""

    words_parent: float
    words_candidate: float

    @property
    def growth(self) -> float | None:
        """Relative change, candidate over parent (``None`` for an empty parent context)."""
        return self.words_candidate / self.words_parent - 1 if self.words_parent else None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class HoldoutComparison(PairedBrief):
    """Candidate vs. parent on the held-out questions: the paired headline, per-category rows, both scores and the
    numbers of improved and regressed questions."""

    per_category: dict[str, dict[str, float | int]]
    score_parent: float | None
    score_candidate: float | None
    improved: int
    regressed: int
