"""The confabulation guard's outcome: per answered question, whether the answer is flagged as confabulated (a wrong
or partial answer whose asserted content the packed context does not hold, :func:`evolve.observe.judge.confabulated`)
and the safe rate (correct + abstain) of a run's answers.

A candidate that makes its answerer invent more can gain accuracy; rule ``confabulation`` of
:func:`evolve.verify.decision.decide` rejects one whose confabulation rate rises significantly, compared paired by
question with the same McNemar and bootstrap machinery as the objective. A wrong answer taken from the context (a
wrong pick) and a polite decline are not confabulations, so the guard no longer repeats accuracy. Only the accuracy
objective judges answers, so only there is the guard computed; under ``evidence`` and ``answer`` the record has no
``confabulation`` field and the rule does not apply (summaries still report the safe rate when answers were made).
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping

from evolve.observe.trace import Trace
from evolve.verify.statistics import PairedBrief, paired_comparison


def confabulations(traces: Iterable[Trace]) -> dict[str, dict]:
    """``{question_id: {correct: is flagged, category}}`` of the scored, answered questions whose flag is known (for
    :func:`evolve.verify.statistics.paired_comparison`, whose "correct" here means "confabulated")."""
    return {t.question_id: {"correct": t.confabulated, "category": t.category}
            for t in traces if t.scored and t.verdict is not None and t.confabulated is not None}


def safe_rate(answers: Mapping[str, int] | None) -> float | None:
    """Share of answers that are correct or abstain, from a summary's ``answers`` counts (``None`` without any)."""
    total = sum((answers or {}).values())
    return ((answers.get("correct", 0) + answers.get("abstain", 0)) / total) if total else None


def flagged(summary: Mapping[str, Any] | None) -> int | None:
    """Confabulated answers of a summary (or its brief): the flag count, or for a summary written before the flag,
    its ``answers["confabulated"]`` (then every wrong non-abstaining answer); ``None`` when nothing was answered."""
    summary = summary or {}
    if summary.get("confabulation"):
        return summary["confabulation"]["flagged"]
    answers = summary.get("answers") or {}
    return answers.get("confabulated", 0) if answers else None


def confabulation_brief(base: Iterable[Trace], cand: Iterable[Trace], *, alpha: float, n_resamples: int,
                        seed: int) -> PairedBrief | None:
    """Candidate vs. parent on flagged answers, paired by question (``None`` when no question was answered by
    both): what rule ``confabulation`` reads."""
    paired = paired_comparison(confabulations(base), confabulations(cand), alpha=alpha, n_resamples=n_resamples,
                                seed=seed)
    return paired.brief() if paired.n else None
