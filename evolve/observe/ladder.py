"""The evidence-loss ladder: the pipeline stages gold evidence must pass, and the root cause of losing it at each.

Every layer names stages and root causes with :class:`Stage` and :class:`RootCause` (both ``str``-valued, so traces
and records serialise them as their plain values). A failure's root cause is the rung of the first stage whose
output the gold evidence does not reach (:func:`lost_at`), under one of two predicates:

* :func:`reaches` — *some* item deriving from a gold turn (:func:`derives_from`, by source id) reaches the stage;
  the judge's verdict is the generation rung. The accuracy objective diagnoses with it.
* :func:`all_reach` — *every* known gold turn reaches the stage, content-checked at the packed context
  (:mod:`evolve.observe.evidence`); what the answerer sees is all the evidence objective judges.

They differ: a packed item may cite a gold turn without carrying its words (a session summary), which
:func:`reaches` counts and :func:`all_reach` does not. Content-checking the accuracy ladder would move the root
causes of recorded traces, and so the symptoms the planner acts on; it keeps the source-id predicate.
"""
from __future__ import annotations

from enum import StrEnum
from typing import Callable, Collection, Mapping, Protocol, Sequence


class Trace(Protocol):
    """What the ladder reads of a question's trace (:class:`evolve.observe.trace.Trace` has it)."""

    gold_evidence: Sequence[str]
    stored_ids: Sequence[str]
    retrieved: Sequence[Mapping]
    filtered: Sequence[Mapping]
    packed: Sequence[Mapping]
    correct: bool | None
    all_evidence_packed: bool | None


class Stage(StrEnum):
    """Pipeline stages, upstream first (the member order is the pipeline order)."""

    INGESTION = "ingestion"
    RETRIEVAL = "retrieval"
    FILTERING = "filtering"
    ASSEMBLY = "assembly"
    GENERATION = "generation"


#: What a trace records after the pipeline: the judgment (a stage of the decision-completeness rate, not a rung).
RESULTS = "results"


class RootCause(StrEnum):
    """Where gold evidence was lost, upstream first, then ``unresolved`` (gold evidence unknown)."""

    INGESTION_GAP = "ingestion_gap"
    RETRIEVAL_GAP = "retrieval_gap"
    KF_FILTERED = "kf_filtered"
    GENERATION_ERROR = "generation_error"
    UNRESOLVED = "unresolved"


#: Every root cause, in ladder order.
ROOT_CAUSES: tuple[RootCause, ...] = tuple(RootCause)
#: The rungs, upstream first: the stage whose output the gold must reach, and the root cause of losing it there.
#: Filtering has no rung of its own: what the filter hid or the budget dropped is lost at the packed context.
RUNGS: dict[Stage, RootCause] = {
    Stage.INGESTION: RootCause.INGESTION_GAP,
    Stage.RETRIEVAL: RootCause.RETRIEVAL_GAP,
    Stage.ASSEMBLY: RootCause.KF_FILTERED,
    Stage.GENERATION: RootCause.GENERATION_ERROR,
}
#: Where the answer objective loses a question (:attr:`Trace.answer_loss`), by the stage whose gold-derived texts
#: no longer carry the answer (generation: the context carries it, not through items from the gold turns).
ANSWER_LOSS: dict[Stage, str] = {
    Stage.INGESTION: "never_stored",
    Stage.RETRIEVAL: "not_retrieved",
    Stage.ASSEMBLY: "cut_in_assembly",
    Stage.GENERATION: "packed_not_from_evidence",
}
#: The answer loss of a question whose every gold turn a packed item cites, and whose gold turns carry the answer,
#: yet the packed items citing them do not: the unit packed (a fact, a fragment or a rewritten turn) lost an answer
#: word. Judged by the words that reach the context, not by the cited ids alone; an assembly loss.
WORDS_CUT = "words_cut"
#: Each answer loss with the rung the planner's bundle table aims at for it.
ANSWER_LOSSES: dict[str, RootCause] = {**{loss: RUNGS[stage] for stage, loss in ANSWER_LOSS.items()},
                                       WORDS_CUT: RootCause.KF_FILTERED}
#: Where an image the gold turns share was lost to the image route (:attr:`Trace.image_loss`), each with the rung
#: whose dimensions first meet it: the IKB's answer to a routed question left the image out (it was filed under
#: another category: ingestion), the IKB recovered no name for it when a name was asked (ingestion), or the question
#: was not routed although the IKB, every rule on, answers it with the image (retrieval). A loss first met upstream
#: may surface at any rung below it, where it qualifies the failure too (:data:`evolve.improve.digest.QUALIFIERS`).
IMAGE_NOT_IN_IKB = "image_not_in_ikb"
NAME_NOT_RECOVERED = "name_not_recovered"
ROUTE_MISSED = "route_missed"
IMAGE_LOSSES: dict[str, RootCause] = {IMAGE_NOT_IN_IKB: RootCause.INGESTION_GAP,
                                      NAME_NOT_RECOVERED: RootCause.INGESTION_GAP,
                                      ROUTE_MISSED: RootCause.RETRIEVAL_GAP}
#: Where a chain of device events the question needs came apart (:attr:`Trace.event_loss`), each with the rung whose
#: dimensions first meet it: no pack holds two of the gold events (fusion off, or it judged them apart: ingestion),
#: or a pack holds them together and the context still lacks one (the edge was not followed: retrieval).
EVENT_UNFUSED = "event_unfused"
EDGE_NOT_FOLLOWED = "edge_not_followed"
EVENT_LOSSES: dict[str, RootCause] = {EVENT_UNFUSED: RootCause.INGESTION_GAP,
                                      EDGE_NOT_FOLLOWED: RootCause.RETRIEVAL_GAP}


def losses_at(cause: RootCause) -> tuple[str, ...]:
    """The image and event losses that may qualify a failure at ``cause``: those first met at it or at a rung
    upstream."""
    stages = list(RUNGS)
    at = stage_of(cause)
    if at is None:
        return ()
    return tuple(loss for loss, rung in {**IMAGE_LOSSES, **EVENT_LOSSES}.items()
                 if stages.index(stage_of(rung)) <= stages.index(at))


def through(stage: Stage) -> tuple[Stage, ...]:
    """``stage`` and every stage upstream of it, in pipeline order."""
    stages = tuple(Stage)
    return stages[: stages.index(stage) + 1]


def stage_of(cause: str | None) -> Stage | None:
    """The stage whose rung ``cause`` names (``None`` for ``unresolved``, no cause or an unknown one)."""
    return next((stage for stage, rung in RUNGS.items() if rung == cause), None)


def derives_from(item: Mapping, turns: Collection[str]) -> bool:
    """Whether a trace item (retrieved, filtered, packed) cites one of ``turns`` among its source ids."""
    return not set(turns).isdisjoint(item.get("source_ids") or ())


def reaches(trace: Trace, stage: Stage) -> bool:
    """Whether some item deriving from the question's gold turns reaches the output of ``stage``: stored, retrieved,
    retrieved and not hidden by the filter, packed; at generation, the answer is judged correct."""
    gold = trace.gold_evidence
    if stage is Stage.INGESTION:
        return bool(trace.stored_ids)
    if stage is Stage.RETRIEVAL:
        return any(derives_from(hit, gold) for hit in trace.retrieved)
    if stage is Stage.FILTERING:
        hidden = {f["id"] for f in trace.filtered}
        return any(derives_from(hit, gold) for hit in trace.retrieved if hit["id"] not in hidden)
    if stage is Stage.ASSEMBLY:
        return any(derives_from(item, gold) for item in trace.packed)
    return trace.correct


def all_reach(trace: Trace, stage: Stage) -> bool:
    """Whether every gold turn reaches the output of ``stage``: ingestion stored an item from the known gold turns
    (the trace does not say which), every gold turn is a source of a retrieved item (of one the filter did not
    hide), every known gold turn is carried by the packed context (content-checked, :attr:`Trace.packed_evidence`);
    the answerer sees no more than the packed context, so generation is reached as assembly is."""
    gold = set(trace.gold_evidence)
    if stage is Stage.INGESTION:
        return bool(trace.stored_ids)
    if stage is Stage.RETRIEVAL:
        return gold <= {s for hit in trace.retrieved for s in hit.get("source_ids", ())}
    if stage is Stage.FILTERING:
        hidden = {f["id"] for f in trace.filtered}
        return gold <= {s for hit in trace.retrieved if hit["id"] not in hidden for s in hit.get("source_ids", ())}
    return bool(trace.all_evidence_packed)


def lost_at(trace: Trace, reached: Callable[[Trace, Stage], bool]) -> RootCause | None:
    """The root cause of the first rung whose stage ``reached`` says the gold evidence does not reach (``None``:
    it reaches every one)."""
    return next((cause for stage, cause in RUNGS.items() if not reached(trace, stage)), None)
