"""Layer-A diagnosis: where on the evidence-loss ladder (:mod:`evolve.observe.ladder`) each failure happened, and
DCR@tau."""
from __future__ import annotations

from collections import Counter, defaultdict
from typing import Iterable

from evolve.observe.answer import carried
from evolve.observe.ladder import ANSWER_LOSS, RootCause, Stage, lost_at, reaches
from evolve.observe.trace import Trace


def root_cause(trace: Trace) -> RootCause | None:
    """The first rung of the ladder at which gold evidence was lost, or None for a correct answer."""
    if trace.correct:
        return None
    if not trace.evidence_known or not trace.gold_evidence:
        return RootCause.UNRESOLVED
    return lost_at(trace, reaches)


def answer_loss(answer: str, stored: list[str], retrieved: list[str], anywhere: bool | None) -> str:
    """Where a gold answer that the packed evidence items do not carry was lost. ``stored`` and ``retrieved`` are the
    dated texts of the stored and of the retrieved items deriving from the gold turns (with the turns they derive
    from, which ``assembly.unit: turn`` packs in their place); ``anywhere`` whether the
    whole packed context carries the answer.

    When the context carries it through other items the answer was packed, not from evidence
    (``packed_not_from_evidence``); otherwise it is lost at the first stage whose gold-derived items, taken
    together, do not carry it: ``never_stored``, ``not_retrieved``, else ``cut_in_assembly`` (filtered, dropped by
    the budget, or compressed away when packed)."""
    if anywhere:
        return ANSWER_LOSS[Stage.GENERATION]
    for stage, texts in ((Stage.INGESTION, stored), (Stage.RETRIEVAL, retrieved)):
        if not carried(answer, texts):
            return ANSWER_LOSS[stage]
    return ANSWER_LOSS[Stage.ASSEMBLY]


def recorded_stages(trace: Trace) -> list[Stage]:
    """Stages whose decisions the trace records well enough to act on."""
    recorded = {Stage.INGESTION: trace.evidence_known, Stage.RETRIEVAL: bool(trace.intent), Stage.FILTERING: True,
                Stage.ASSEMBLY: bool(trace.token_budget), Stage.GENERATION: bool(trace.judge)}
    return [stage for stage in Stage if recorded[stage]]


def diagnose(trace: Trace) -> Trace:
    """Fill ``root_cause`` and ``stages`` of a trace in place; return it."""
    trace.root_cause = root_cause(trace)
    trace.stages = recorded_stages(trace)
    return trace


def dcr(traces: Iterable[Trace], tau: int = 3) -> float:
    """Diagnostic coverage rate: share of scored failures whose trace has at least ``tau`` actionable stages."""
    failures = [t for t in traces if t.failed]
    if not failures:
        return 1.0
    covered = sum(1 for t in failures if t.root_cause != RootCause.UNRESOLVED and len(t.stages) >= tau)
    return covered / len(failures)


def root_cause_counts(traces: Iterable[Trace]) -> tuple[dict[str, int], dict[str, dict[str, int]]]:
    """Counts of root causes over scored failures, overall and per category."""
    overall: Counter = Counter()
    by_category: dict[str, Counter] = defaultdict(Counter)
    for t in traces:
        if t.scored and t.root_cause:
            overall[t.root_cause] += 1
            by_category[t.category][t.root_cause] += 1
    return dict(overall), {c: dict(v) for c, v in sorted(by_category.items())}
