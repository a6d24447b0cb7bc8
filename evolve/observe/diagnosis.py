"""Layer-A diagnosis: where on the evidence-loss ladder (:mod:`evolve.observe.ladder`) each failure happened, and
DCR@tau (how completely the traces of the failures record the stages)."""
from __future__ import annotations

from collections import Counter, defaultdict
from typing import Collection, Iterable

from evolve.observe.answer import carried
from evolve.observe.contract import dcr_stages, from_trace
from evolve.observe.ladder import (ANSWER_LOSS, EDGE_NOT_FOLLOWED, EVENT_UNFUSED, IMAGE_NOT_IN_IKB,
                                   NAME_NOT_RECOVERED, ROUTE_MISSED, WORDS_CUT, RootCause, Stage, lost_at, reaches)
from evolve.observe.trace import DCR_TAUS, Trace


def root_cause(trace: Trace) -> RootCause | None:
    """The first rung of the ladder at which gold evidence was lost, or None for a correct answer."""
    if trace.correct:
        return None
    if not trace.evidence_known or not trace.gold_evidence:
        return RootCause.UNRESOLVED
    return lost_at(trace, reaches)


def answer_loss(answer: str, stored: list[str], retrieved: list[str], anywhere: bool | None,
                cited_gold: list[str] = ()) -> str:
    """Where a gold answer that the packed evidence items do not carry was lost. ``stored`` and ``retrieved`` are the
    dated texts of the stored and of the retrieved items deriving from the gold turns (with the turns they derive
    from, which ``assembly.unit: turn`` packs in their place); ``anywhere`` whether the whole packed context carries
    the answer; ``cited_gold`` the texts of the gold turns when a packed item cites every one of them (else empty).

    When every gold turn is cited and those turns carry the answer, the packed units lost its words (``words_cut``:
    a fact or a fragment stood for its turn). Else, when the context carries it through other items the answer was
    packed, not from evidence (``packed_not_from_evidence``); otherwise it is lost at the first stage whose
    gold-derived items, taken together, do not carry it: ``never_stored``, ``not_retrieved``, else
    ``cut_in_assembly`` (filtered, dropped by the budget, or compressed away when packed)."""
    if cited_gold and carried(answer, cited_gold):
        return WORDS_CUT
    if anywhere:
        return ANSWER_LOSS[Stage.GENERATION]
    for stage, texts in ((Stage.INGESTION, stored), (Stage.RETRIEVAL, retrieved)):
        if not carried(answer, texts):
            return ANSWER_LOSS[stage]
    return ANSWER_LOSS[Stage.ASSEMBLY]


def image_loss(route: str | None, gold_images: Collection[str], routed_images: Collection[str],
               unnamed: Collection[str], reachable: Collection[str]) -> str | None:
    """Where a gold image was lost to the image route (:data:`evolve.observe.ladder.IMAGE_LOSSES`), ``None`` when
    none was. ``route`` is the rule that routed the question (``None``: not routed), ``routed_images`` the images
    its IKB item carries, ``unnamed`` the gold images the IKB holds no name for within the strategy's reach, and
    ``reachable`` the images the IKB would answer the question with under every rule."""
    gold = set(gold_images)
    if not gold:
        return None
    if route is None:
        return ROUTE_MISSED if gold & set(reachable) else None
    if not gold <= set(routed_images):
        return IMAGE_NOT_IN_IKB
    return NAME_NOT_RECOVERED if route == "naming" and gold & set(unnamed) else None


def event_loss(gold_events: Collection[str], packed: Collection[str],
               packs: Iterable[Collection[str]]) -> str | None:
    """Where a chain of gold device events came apart (:data:`evolve.observe.ladder.EVENT_LOSSES`), ``None`` when
    fewer than two are gold or the context (``packed``: the gold turns it carries) holds them all. ``packs`` are the
    members of each fused pack of the store."""
    gold = set(gold_events)
    if len(gold) < 2 or gold <= set(packed):
        return None
    return EDGE_NOT_FOLLOWED if any(len(gold & set(members)) >= 2 for members in packs) else EVENT_UNFUSED


def diagnose(trace: Trace) -> Trace:
    """Fill ``root_cause`` of a trace in place; return it."""
    trace.root_cause = root_cause(trace)
    return trace


def recorded_stages(trace: Trace) -> list[str]:
    """The stages of the trace contract ``trace`` counts towards DCR (:func:`~evolve.observe.contract.dcr_stages`),
    upstream first: those read with it from a contract record, else those of its contract record."""
    return trace.dcr_stages if trace.dcr_stages is not None else dcr_stages(from_trace(trace))


def _stage_counts(traces: Iterable[Trace], failures: Collection[str] | None) -> list[int]:
    """Valid stages recorded by each trace of F (``failures``; by default the scored traces judged wrong)."""
    wanted = None if failures is None else set(failures)
    return [len(recorded_stages(t)) for t in traces if (t.failed if wanted is None else t.question_id in wanted)]


def dcr(traces: Iterable[Trace], tau: int = 3, failures: Collection[str] | None = None) -> float:
    """Diagnosis completeness rate (D²ACCI): over the failure/discordance set F, the share of traces that record at
    least ``tau`` of D²ACCI's six stages (:func:`recorded_stages`). F is ``failures`` (ids),
    by default the scored traces judged wrong; with F empty there is no failure to diagnose and DCR is 1. A log of
    results alone scores 0 at any ``tau`` above 1."""
    counts = _stage_counts(traces, failures)
    return sum(c >= tau for c in counts) / len(counts) if counts else 1.0


def dcr_by_tau(traces: Iterable[Trace], failures: Collection[str] | None = None) -> dict[str, float]:
    """DCR@tau for each tau of :data:`~evolve.observe.trace.DCR_TAUS` over F (see :func:`dcr`), keyed by
    ``str(tau)``, rounded as summaries report it."""
    counts = _stage_counts(traces, failures)
    return {str(tau): round(sum(c >= tau for c in counts) / len(counts), 4) if counts else 1.0 for tau in DCR_TAUS}


def root_cause_counts(traces: Iterable[Trace]) -> tuple[dict[str, int], dict[str, dict[str, int]]]:
    """Counts of root causes over scored failures, overall and per category."""
    overall: Counter = Counter()
    by_category: dict[str, Counter] = defaultdict(Counter)
    for t in traces:
        if t.scored and t.root_cause:
            overall[t.root_cause] += 1
            by_category[t.category][t.root_cause] += 1
    return dict(overall), {c: dict(v) for c, v in sorted(by_category.items())}
