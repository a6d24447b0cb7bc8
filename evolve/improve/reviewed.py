"""Reviewer-confirmed root causes in the planner's input.

Confirmed labels (``LABELS`` journal entries, :mod:`evolve.observe.labels`) speak about one question's failure as
the ladder diagnosed it. A round's failure view takes a reviewer's root cause for a failing question whose ladder
cause is the labelled ``ladder`` cause (the same diagnosis the reviewer confirmed or corrected); a question the
ladder now diagnoses otherwise, or that no longer fails, keeps the ladder's cause. The latest label of a question
wins. What was taken is recorded with the round (:class:`Reviewed`), so the symptom counts that came from
reviewers are known.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import replace
from typing import Iterable, Mapping

from pydantic import BaseModel, ConfigDict, computed_field

from evolve.observe.labels import Label, LabelsImport
from evolve.observe.trace import Trace
from evolve.state.entries import JournalEntry


class ReviewedFailure(BaseModel):
    """One failure whose root cause a reviewer's label gave."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    question_id: str
    category: str
    ladder: str
    label: str
    #: The journal index of the ``LABELS`` entry.
    entry: int


class Reviewed(BaseModel):
    """The reviewer labels a round's planning input took, and the labels known but not taken."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    applied: list[ReviewedFailure] = []
    #: Confirmed labels whose question the round's ladder diagnoses otherwise, or that no longer fails.
    not_applied: int = 0

    @computed_field
    @property
    def counts(self) -> dict[str, int]:
        """Failures per root cause that a reviewer's label gave (confirmed or corrected)."""
        return dict(Counter(f.label for f in self.applied))

    @computed_field
    @property
    def corrected(self) -> int:
        """Failures whose ladder cause a reviewer corrected."""
        return sum(f.label != f.ladder for f in self.applied)


def confirmed_labels(entries: Iterable[JournalEntry]) -> dict[str, tuple[int, Label]]:
    """The latest confirmed label of each question in journal ``entries``, with its entry's index."""
    out: dict[str, tuple[int, Label]] = {}
    for entry in entries:
        if isinstance(entry.payload, LabelsImport):
            for label in entry.payload.labels:
                if label.confirmed:
                    out[label.question_id] = (entry.index, label)
    return out


def relabel(traces: list[Trace], labels: Mapping[str, tuple[int, Label]]) -> tuple[list[Trace], Reviewed]:
    """``traces`` (a failure view) with each labelled failure's root cause replaced by its reviewer's, and what was
    taken."""
    out, applied, used = [], [], set()
    for t in traces:
        found = labels.get(t.question_id)
        if found is not None and t.failed and t.root_cause == found[1].ladder:
            entry, label = found
            used.add(t.question_id)
            applied.append(ReviewedFailure(question_id=t.question_id, category=t.category, ladder=label.ladder,
                                           label=label.label, entry=entry))
            t = replace(t, root_cause=label.label)
        out.append(t)
    return out, Reviewed(applied=applied, not_applied=len(labels) - len(used))
