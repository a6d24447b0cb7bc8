"""Layer-A diagnosis: where on the evidence-loss ladder each failure happened, and DCR@tau (how completely the
traces record the stages)."""
from __future__ import annotations

from collections import Counter, defaultdict
from typing import Iterable

from evolve.observe.answer import carried
from evolve.observe.trace import DCR_TAUS, Trace

#: The evidence-loss ladder, upstream first, then ``unresolved`` (gold evidence unknown).
ROOT_CAUSES = ("ingestion_gap", "retrieval_gap", "kf_filtered", "generation_error", "unresolved")
STAGES = ("ingestion", "retrieval", "filtering", "assembly", "generation")
#: Where the answer objective loses a question (:attr:`Trace.answer_loss`), upstream first, each with the rung of
#: the ladder above that the planner's bundle table aims at for it.
ANSWER_LOSSES = {"never_stored": "ingestion_gap", "not_retrieved": "retrieval_gap", "cut_in_assembly": "kf_filtered",
                 "packed_not_from_evidence": "generation_error"}


def _derives_from_gold(item: dict, gold: set[str]) -> bool:
    return bool(gold & set(item.get("source_ids", ())))


def root_cause(trace: Trace) -> str | None:
    """The first stage on the ladder at which gold evidence was lost, or None for a correct answer."""
    if trace.correct:
        return None
    gold = set(trace.gold_evidence)
    if not trace.evidence_known or not gold:
        return "unresolved"
    if not trace.stored_ids:
        return "ingestion_gap"
    if not any(_derives_from_gold(hit, gold) for hit in trace.retrieved):
        return "retrieval_gap"
    if not any(_derives_from_gold(item, gold) for item in trace.packed):
        return "kf_filtered"
    return "generation_error"


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
        return "packed_not_from_evidence"
    if not carried(answer, stored):
        return "never_stored"
    if not carried(answer, retrieved):
        return "not_retrieved"
    return "cut_in_assembly"


def diagnose(trace: Trace) -> Trace:
    """Fill ``root_cause`` of a trace in place; return it."""
    trace.root_cause = root_cause(trace)
    return trace


def dcr(traces: Iterable[Trace], tau: int = 3) -> float:
    """Diagnosis completeness rate: share of the scored traces that record at least ``tau`` of the six stages
    (:data:`~evolve.observe.trace.STAGE_FIELDS`); 0 when none is scored. A log of results alone scores 0 at any
    ``tau`` above 1."""
    scored = [t for t in traces if t.scored]
    return sum(len(t.stages) >= tau for t in scored) / len(scored) if scored else 0.0


def dcr_by_tau(traces: Iterable[Trace]) -> dict[str, float]:
    """DCR@tau for each tau of :data:`~evolve.observe.trace.DCR_TAUS`, keyed by ``str(tau)``, rounded as summaries
    report it."""
    traces = list(traces)
    return {str(tau): round(dcr(traces, tau), 4) for tau in DCR_TAUS}


def root_cause_counts(traces: Iterable[Trace]) -> tuple[dict[str, int], dict[str, dict[str, int]]]:
    """Counts of root causes over scored failures, overall and per category."""
    overall: Counter = Counter()
    by_category: dict[str, Counter] = defaultdict(Counter)
    for t in traces:
        if t.scored and t.root_cause:
            overall[t.root_cause] += 1
            by_category[t.category][t.root_cause] += 1
    return dict(overall), {c: dict(v) for c, v in sorted(by_category.items())}
