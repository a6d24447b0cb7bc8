"""What the loop optimises: the binary per-question outcome every verify stage (probe, McNemar, bootstrap CI,
per-category non-regression, protected slices, best-ever, auto-restore) compares.

* ``accuracy`` — the judge says the answer is correct.
* ``evidence`` — every known gold evidence turn is carried by the packed context
  (:mod:`evolve.observe.evidence`); questions whose gold evidence is unknown are left out and counted apart
  (``Summary.n_scored - Summary.n_evidence_known``). It measures the ids this runtime cites plus a content check
  against each gold turn, so it rewards small units (an extracted fact always cites its turn and shares its words)
  and does not compare with other memory systems.
* ``answer`` — every content word of the gold answer is in the packed items deriving from the known gold turns
  (:mod:`evolve.observe.answer`): needs only packed text and source turn ids, so any system's context can be
  measured alike. Questions without known gold evidence or whose answer has no content word are left out and
  counted apart (``Summary.answer_left_out``). A failure's root cause is where the answer was lost
  (:data:`evolve.observe.ladder.ANSWER_LOSSES`).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Iterable, Literal

from evolve.observe.ladder import ANSWER_LOSSES, RUNGS, RootCause, Stage, all_reach, lost_at, reaches
from evolve.observe.trace import Summary, Trace

Objective = Literal["accuracy", "evidence", "answer"]
OBJECTIVES: tuple[str, ...] = ("accuracy", "evidence", "answer")
#: The summary field (also a key of a summary's dict form) holding each objective's score, and its name in words.
SCORE_FIELD = {"accuracy": "accuracy", "evidence": "all_evidence_packed", "answer": "answer_in_evidence"}
LABEL = {"accuracy": "accuracy", "evidence": "all evidence packed", "answer": "answer in evidence"}
#: What each objective needs of a benchmark question to count it (said when a benchmark has none).
NEEDS = {"accuracy": "a gold answer", "evidence": "gold evidence turn ids",
         "answer": "gold evidence turn ids and a gold answer with a content word"}


def success(trace: Trace, objective: Objective) -> bool | None:
    """The question's outcome under ``objective``; ``None`` when it does not count (unscored, evidence unknown, or
    left out by the answer check)."""
    if not trace.scored:
        return None
    if objective == "evidence":
        return trace.all_evidence_packed if trace.evidence_known else None
    if objective == "answer":
        return trace.answer_in_evidence
    return trace.correct


def outcomes(traces: Iterable[Trace], objective: Objective) -> dict[str, dict]:
    """``{question_id: {correct, category}}`` of the questions that count, for paired statistics."""
    out = {}
    for t in traces:
        ok = success(t, objective)
        if ok is not None:
            out[t.question_id] = {"correct": ok, "category": t.category}
    return out


def score(summary: Summary, objective: Objective) -> float | None:
    """The run's success rate under ``objective``."""
    return getattr(summary, SCORE_FIELD[objective])


def changed(before: Trace, after: Trace, objective: Objective) -> bool:
    """Whether a strategy change reached what ``objective`` judges: the answer, or the packed context."""
    if objective == "accuracy":
        return before.answer != after.answer
    if objective == "answer":  # the words count: a unit may keep its id and change its text
        return [(p["id"], p["text"]) for p in before.packed] != [(p["id"], p["text"]) for p in after.packed]
    return [p["id"] for p in before.packed] != [p["id"] for p in after.packed]


def evidence_root_cause(trace: Trace) -> RootCause | None:
    """Where the evidence objective lost a question on the evidence-loss ladder (``None``: all evidence packed)."""
    return None if trace.all_evidence_packed else lost_at(trace, all_reach)


def failure_view(traces: Iterable[Trace], objective: Objective) -> list[Trace]:
    """``traces`` as the objective judges them, for diagnosis: under ``evidence`` a question fails when some known
    gold turn is not carried by the packed context, its root cause is where that evidence was lost, and questions
    with unknown evidence are left unscored; under ``answer`` it fails when the packed evidence items do not carry
    the gold answer, its root cause is the rung :data:`~evolve.observe.ladder.ANSWER_LOSSES` gives where the
    answer was lost, and questions the answer check leaves out are unscored. Under ``accuracy`` the traces keep
    their judgment and root cause. Only the answer objective's view keeps ``answer_loss``, so the planner's
    answer-side qualifier never moves decisions under the others."""
    if objective == "accuracy":
        return [replace(t, answer_loss=None) for t in traces]
    if objective == "answer":
        return [replace(t, scored=False) if t.answer_in_evidence is None else
                replace(t, correct=t.answer_in_evidence,
                        root_cause=None if t.answer_in_evidence else ANSWER_LOSSES[t.answer_loss]) for t in traces]
    return [replace(t, correct=bool(t.all_evidence_packed), root_cause=evidence_root_cause(t), answer_loss=None)
            if t.evidence_known else replace(t, scored=False, answer_loss=None) for t in traces]


def located_cause(trace: Trace, objective: Objective) -> RootCause | None:
    """Where a trace read from a trace-contract record failed under ``objective``, from the stages it records (no
    store to re-read, as the loop's diagnosis does): ``None`` when it succeeds or does not count; ``unresolved``
    without known gold evidence, or when the first rung the gold might not reach is a stage the record lacks; else
    the first rung whose recorded output the gold evidence does not reach (some gold-derived item under accuracy and
    answer, every gold turn under evidence), ``generation_error`` when it reaches the packed context."""
    if success(trace, objective) in (None, True):
        return None
    if not trace.evidence_known or not trace.gold_evidence:
        return RootCause.UNRESOLVED
    reached = all_reach if objective == "evidence" else reaches
    for stage, cause in RUNGS.items():
        if stage is Stage.GENERATION:
            return cause
        if stage not in trace.stages:
            return RootCause.UNRESOLVED
        if not reached(trace, stage):
            return cause
    return RootCause.GENERATION_ERROR
