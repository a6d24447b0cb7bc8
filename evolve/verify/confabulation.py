"""The confabulation guard's outcome: per answered question, whether the answer is confabulated (a confident wrong
answer rather than a correct one or an abstention), and the safe rate (correct + abstain) of a run's answers.

A candidate that trades abstentions for confident wrong answers can gain accuracy; rule ``confabulation`` of
:func:`evolve.verify.decision.decide` rejects one whose confabulation rate rises significantly, compared paired by
question with the same McNemar and bootstrap machinery as the objective. Only the accuracy objective judges answers,
so only there is the guard computed; under ``evidence`` and ``answer`` the record has no ``confabulation`` field and
the rule does not apply (summaries still report the safe rate when answers were made).
"""
from __future__ import annotations

from typing import Iterable, Mapping

from evolve.observe.trace import Trace
from evolve.verify.statistics import PairedBrief, paired_comparison


def confabulations(traces: Iterable[Trace]) -> dict[str, dict]:
    """``{question_id: {correct: is confabulated, category}}`` of the scored, answered questions (for
    :func:`evolve.verify.statistics.paired_comparison`, whose "correct" here means "confabulated")."""
    return {t.question_id: {"correct": t.answer_kind == "confabulated", "category": t.category}
            for t in traces if t.scored and t.answer_kind is not None}


def safe_rate(answers: Mapping[str, int] | None) -> float | None:
    """Share of answers that are correct or abstain, from a summary's ``answers`` counts (``None`` without any)."""
    total = sum((answers or {}).values())
    return ((answers.get("correct", 0) + answers.get("abstain", 0)) / total) if total else None


def confabulation_brief(base: Iterable[Trace], cand: Iterable[Trace], *, alpha: float, n_resamples: int,
                        seed: int) -> PairedBrief | None:
    """Candidate vs. parent on confabulated answers, paired by question (``None`` when no question was answered by
    both): what rule ``confabulation`` reads."""
    paired = paired_comparison(confabulations(base), confabulations(cand), alpha=alpha, n_resamples=n_resamples,
                                seed=seed)
    return paired.brief() if paired.n else None
