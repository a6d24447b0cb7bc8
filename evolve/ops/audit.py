"""The discordance audit of one recorded comparison: its discordant questions with both sides' traces and root
causes, their labels (pre-filled from the ladder, or as reviewers last confirmed them), the import of confirmed
labels into the journal (where the next round's planning reads them, :mod:`evolve.improve.reviewed`), and the
agreement of two reviewers (Cohen's kappa)."""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from pathlib import Path

from evolve.errors import UserError
from evolve.observe.diagnosis import root_cause
from evolve.observe.labels import LABELS_ENTRY, Label, LabelsImport
from evolve.observe.ladder import ROOT_CAUSES, RootCause
from evolve.observe.objective import Objective, failure_view, success
from evolve.observe.trace import Trace
from evolve.ops.history import History
from evolve.ops.review import objective_of
from evolve.ops.review_traces import Side
from evolve.state.record import CandidateRecord
from evolve.state.stores import StoreSet


def side_cause(trace: Trace, objective: Objective) -> RootCause | None:
    """The root cause of ``trace``'s failure under ``objective`` as the planner sees it (``None``: it succeeds);
    ``unresolved`` where the trace does not record what the ladder needs (an answer-objective failure without
    ``answer_loss``, e.g. another system's trace file)."""
    if success(trace, objective) is not False:
        return None
    if objective == "answer" and trace.answer_loss is None:
        return RootCause.UNRESOLVED
    cause = failure_view([trace], objective)[0].root_cause
    if cause is None and objective == "accuracy":  # a trace file read through the contract carries none
        cause = root_cause(trace)
    return RootCause(cause or RootCause.UNRESOLVED)


@dataclass(frozen=True)
class Discordance:
    """One question one side gets right and the other wrong, with both sides' traces and root causes."""

    question_id: str
    direction: str  # improved | regressed
    parent: Trace
    candidate: Trace
    parent_cause: RootCause | None
    candidate_cause: RootCause | None

    @property
    def category(self) -> str:
        return self.candidate.category

    @property
    def failing(self) -> str:
        return "parent" if self.direction == "improved" else "candidate"

    @property
    def ladder(self) -> RootCause:
        """The failing side's root cause."""
        return self.parent_cause if self.direction == "improved" else self.candidate_cause


def discordances(record: CandidateRecord, parent: Side, candidate: Side) -> list[Discordance]:
    """The record's regressed, then improved questions, each with both sides' traces."""
    objective = objective_of(record)
    return [Discordance(q, direction, parent.traces[q], candidate.traces[q],
                        side_cause(parent.traces[q], objective), side_cause(candidate.traces[q], objective))
            for direction in ("regressed", "improved") for q in getattr(record.paired, direction)]


def discordant_ids(record: CandidateRecord) -> dict[str, str]:
    """Each discordant question of the record with its direction."""
    if record.paired is None:
        raise UserError(f"{record.candidate_id}: was never fully compared ({record.decided_by} decided it), so it has "
                        "no discordant questions to review")
    return {**{q: "improved" for q in record.paired.improved}, **{q: "regressed" for q in record.paired.regressed}}


def journaled_labels(view: History, candidate_id: str) -> dict[str, Label]:
    """The labels last imported for each discordant question of ``candidate_id``."""
    out: dict[str, Label] = {}
    for entry in view.entries:
        if isinstance(entry.payload, LabelsImport) and entry.payload.candidate_id == candidate_id:
            out.update((label.question_id, label) for label in entry.payload.labels)
    return out


def prefilled(record: CandidateRecord, items: list[Discordance], imported: dict[str, Label]) -> list[Label]:
    """One label per discordance: as last imported when the ladder still says what it said then, else the
    ladder's root cause, unconfirmed."""
    out = []
    for d in items:
        label = imported.get(d.question_id)
        if label is None or label.ladder != d.ladder:
            label = Label(candidate_id=record.candidate_id, question_id=d.question_id, category=d.category,
                          direction=d.direction, failing=d.failing, ladder=d.ladder, label=d.ladder)
        out.append(label)
    return out


def checked_import(record: CandidateRecord, labels: list[Label], source: str) -> list[Label]:
    """The confirmed labels of a file read for ``record``; :class:`UserError` naming the file and the question
    for a label of another candidate, of a question that is not discordant, or with the wrong direction."""
    ids = discordant_ids(record)
    for label in labels:
        where = f"{source}: question {label.question_id}"
        if label.candidate_id != record.candidate_id:
            raise UserError(f"{where}: labels candidate {label.candidate_id}, not {record.candidate_id}")
        if label.question_id not in ids:
            raise UserError(f"{where}: is not a discordant question of {record.candidate_id}")
        if label.direction != ids[label.question_id] or label.failing != ("parent" if label.direction == "improved"
                                                                         else "candidate"):
            raise UserError(f"{where}: direction {label.direction} / failing {label.failing}; the record says "
                            f"{ids[label.question_id]}")
    return [label for label in labels if label.confirmed]


def journal_labels(stores: Path, candidate_id: str, labels: list[Label], source: str) -> dict:
    """Journal the confirmed ``labels`` of candidate ``candidate_id`` as one ``LABELS`` entry; returns it."""
    payload = LabelsImport(candidate_id=candidate_id, source=source, labels=labels)
    with StoreSet(stores) as store:
        return store.append_journal(LABELS_ENTRY, payload.model_dump(mode="json"))


# ---------------------------------------------------------------- agreement


@dataclass(frozen=True)
class Agreement:
    """Cohen's kappa of two reviewers' labels of the same questions, overall and per label (that label against
    every other; ``None`` where it is undefined: both reviewers used the label for every question or for none)."""

    n: int
    observed: float
    kappa: float | None
    per_label: dict[str, float | None]


def _kappa(a: list[str], b: list[str]) -> float | None:
    """Cohen's kappa, ``None`` when undefined (one label throughout: chance agreement is 1), said once by the caller
    rather than by the library's warnings."""
    from sklearn.metrics import cohen_kappa_score

    if len(set(a) | set(b)) < 2:
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        value = float(cohen_kappa_score(a, b))
    return None if math.isnan(value) else value


def agreement(a: list[Label], b: list[Label], names: tuple[str, str]) -> Agreement:
    """Agreement of label files ``a`` and ``b`` (their ``names`` for messages), paired by question;
    :class:`UserError` when they label different questions."""
    left = {(x.candidate_id, x.question_id): x.label for x in a}
    right = {(x.candidate_id, x.question_id): x.label for x in b}
    if left.keys() != right.keys():
        only = sorted(left.keys() - right.keys()) or sorted(right.keys() - left.keys())
        side = names[0] if left.keys() - right.keys() else names[1]
        raise UserError(f"the two label files label different questions: {len(only)} only in {side} (e.g. "
                        f"{only[0][1]} of {only[0][0]}); agreement pairs the same questions")
    keys = sorted(left)
    if not keys:
        raise UserError(f"{names[0]}: no label")
    x, y = [str(left[k]) for k in keys], [str(right[k]) for k in keys]
    used = [c for c in ROOT_CAUSES if c in x or c in y]
    return Agreement(len(keys), sum(i == j for i, j in zip(x, y)) / len(keys), _kappa(x, y),
                     {str(c): _kappa([i == c for i in x], [j == c for j in y]) for c in used})
