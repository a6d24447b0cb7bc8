"""The records an evaluation produces: one :class:`Trace` per question and one :class:`Summary` per run.

Each is built in one place (the harness) and serialised by one method (``to_dict``); ``traces.jsonl`` and
``summary.json`` hold exactly those dicts, and :meth:`Trace.from_dict` reads a record back.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, Mapping

from evolve.errors import EvolveError
from evolve.observe.ladder import RESULTS, Stage

#: The k of evidence recall@k reported for every trace and summary.
RECALL_KS = (1, 5, 10)
#: The stages a trace can record (the ladder's, then :data:`~evolve.observe.ladder.RESULTS`), upstream first, each
#: with the fields that record it: every group must be present, any field of a group will do (filtering is recorded
#: by what it hid or what the budget dropped).
STAGE_FIELDS: dict[str, tuple[tuple[str, ...], ...]] = {
    Stage.INGESTION: (("stored_ids",),), Stage.RETRIEVAL: (("retrieved",),),
    Stage.FILTERING: (("filtered", "dropped"),), Stage.ASSEMBLY: (("packed",),),
    Stage.GENERATION: (("answer",), ("answer_support",)), RESULTS: (("correct",),)}
#: The tau of DCR@tau (share of the failures' traces recording at least tau valid stages) reported for every summary.
DCR_TAUS = (1, 3, 5, 6)


def recorded_stages(record: Mapping[str, Any]) -> list[str]:
    """The stages whose fields a serialised trace holds (present and not null), upstream first."""
    def holds(name: str) -> bool:
        return record.get(name) is not None

    return [stage for stage, groups in STAGE_FIELDS.items() if all(any(map(holds, g)) for g in groups)]


#: A trace written before verdicts has ``answer_kind`` (correct, abstain, or "confabulated" for any wrong answer):
#: read as the verdict it implies, with the confabulation flag unknown (``None``).
LEGACY_KINDS = {"correct": "correct", "abstain": "abstain", "confabulated": "wrong", None: None}


class TraceError(EvolveError, ValueError):
    """A trace record lacks a field or holds a value of the wrong type."""


def _empty_recall() -> dict[str, float]:
    return {str(k): 0.0 for k in RECALL_KS}


@dataclass
class Trace:
    """What happened to one question, stage by stage: gold evidence, what ingestion stored from it, what retrieval
    returned (ranks, per-channel scores), what filtering and the budget removed, what was packed, the answer, the
    judgment and the root cause of a failure. Retrieved / filtered / packed / dropped items stay plain JSON
    objects (the runtime's ``RuntimeResult.to_trace`` shapes them)."""

    #: Unique question id (LoCoMo ``{sample_id}/q{index}``).
    question_id: str
    #: The question's category (multi_hop, temporal, ...; a lifecycle attack vector on ``lifecycle:``).
    category: str
    #: The conversation the question is asked about.
    conversation_id: str = ""
    #: The question text.
    question: str = ""
    #: The benchmark's answer.
    gold_answer: str = ""
    #: Ids of the gold evidence turns (``D1:3``, ``S2:0``).
    gold_evidence: list[str] = field(default_factory=list)
    #: Whether the benchmark names gold evidence for the question.
    evidence_known: bool = False
    #: The gold evidence ids that name a turn of the conversation (the others cannot be checked).
    known_evidence: list[str] = field(default_factory=list)
    #: Ids of the stored memories derived from the gold turns (what ingestion kept of them).
    stored_ids: list[str] = field(default_factory=list)
    #: The question intent the runtime detected (selects per-intent retrieval settings).
    intent: str | None = None
    #: Sub-queries the expander derived from the question.
    subqueries: list[str] = field(default_factory=list)
    #: Retrieved items in rank order, with per-channel scores and lifecycle metadata (``fact``).
    retrieved: list[dict] = field(default_factory=list)
    #: Retrieved items the lifecycle masks hid, with the reason.
    filtered: list[dict] = field(default_factory=list)
    #: Items packed into the context, with their text, sources and token counts.
    packed: list[dict] = field(default_factory=list)
    #: Items the token budget dropped.
    dropped: list[dict] = field(default_factory=list)
    #: Tokens of the packed context.
    context_tokens: int = 0
    #: The strategy's token budget for the context.
    token_budget: int = 0
    #: The answerer's answer.
    answer: str = ""
    #: Ids of the packed items the answer was taken from.
    answer_support: list[str] = field(default_factory=list)
    #: The judge's verdict and its details (votes for an LLM judge).
    judge: dict | None = None
    #: Whether the judge counts the answer correct.
    correct: bool = False
    #: An abstention question (:attr:`evolve.benchmarks.types.Question.abstention`): declining was correct.
    abstention: bool = False
    #: Token F1 of the answer against the gold answer.
    f1: float = 0.0
    #: The answer's verdict, one of :data:`~evolve.runtime.roles.ANSWER_VERDICTS` (``None``: not answered).
    verdict: str | None = None
    #: Share of the answer's asserted content words the packed context holds (:func:`evolve.observe.judge.support`;
    #: ``None``: not answered, or no asserted word), and whether the answer is flagged as confabulated
    #: (:func:`evolve.observe.judge.confabulated`; ``None``: not answered, or a trace written before the check).
    support: float | None = None
    confabulated: bool | None = None
    #: Whether the question counts towards the scores (adversarial questions and role failures do not).
    scored: bool = True
    #: Evidence recall@k (k = 1, 5, 10) of the retrieved items, keys ``"1"``, ``"5"``, ``"10"``.
    evidence_recall: dict[str, float] = field(default_factory=_empty_recall)
    #: LongMemEval's retrieval measures over the turns and the sessions retrieval reached, in order:
    #: ``{"turn" | "session": {"recall_any@k" | "recall_all@k": 0.0 or 1.0}}`` (``None`` without known gold
    #: evidence, and for abstention questions, whose evidence does not answer them).
    retrieval_recall: dict[str, dict[str, float]] | None = None
    #: Known gold turns the packed context carries (:mod:`evolve.observe.evidence`), their share of the known
    #: gold turns, and whether all of them are packed (``None`` when the gold evidence is unknown).
    packed_evidence: list[str] = field(default_factory=list)
    #: See ``packed_evidence``.
    evidence_share: float | None = None
    #: See ``packed_evidence``.
    all_evidence_packed: bool | None = None
    #: Whether every content word of the gold answer is in the packed items deriving from the known gold turns, and
    #: anywhere in the packed context (:mod:`evolve.observe.answer`); ``None`` when the question is left out (no
    #: known gold turn, or no content word in the answer).
    answer_in_evidence: bool | None = None
    #: See ``answer_in_evidence``.
    answer_anywhere: bool | None = None
    #: Where the answer was lost when it is not in evidence (:data:`evolve.observe.ladder.ANSWER_LOSSES`).
    answer_loss: str | None = None
    #: Turns stating what is no longer true (:attr:`Question.outdated`); whether one is among the sources of the top
    #: 5 / 10 retrieved items; and those the packed context carries (content-checked). ``None`` without any.
    gold_outdated: list[str] = field(default_factory=list)
    #: See ``gold_outdated``: ``{"5": bool, "10": bool}``.
    stale_retrieved: dict[str, bool] | None = None
    #: See ``gold_outdated``.
    stale_packed: list[str] | None = None
    #: Ids of the images the known gold turns share (:class:`~evolve.benchmarks.observations.ImageObservation`), and of
    #: those the packed context carries (an item citing the turn that shared it), in packing order: an image is lost
    #: when it is gold and not packed.
    gold_images: list[str] = field(default_factory=list)
    #: See ``gold_images``.
    packed_images: list[str] = field(default_factory=list)
    #: The rule that routed the question to the image knowledge base (``counting``, ``enumeration``, ``naming``;
    #: ``None``: normal retrieval alone, :data:`evolve.runtime.ikb_query.IKB_LAYER` items absent).
    route: str | None = None
    #: Where a gold image was lost to the image route when the question failed (judged wrong, or the answer not in
    #: evidence): ``image_not_in_ikb``, ``name_not_recovered``, ``route_missed``
    #: (:data:`evolve.observe.ladder.IMAGE_LOSSES`); ``None``: no gold image, or none lost.
    image_loss: str | None = None
    #: Where a chain of two or more gold device events came apart when the question failed and the context lacks
    #: one of them: ``event_unfused`` (no pack holds two of them), ``edge_not_followed`` (one does)
    #: (:data:`evolve.observe.ladder.EVENT_LOSSES`); ``None``: fewer than two gold events, or none lost.
    event_loss: str | None = None
    #: Retrieval time of this question's query in milliseconds.
    retrieval_ms: float = 0.0
    #: LLM calls made for this question, per role: requests, tokens, cache hits/misses, latency (empty: no LLM).
    llm: dict[str, dict[str, int]] = field(default_factory=dict)
    #: Where a failure happened on the evidence-loss ladder (``ingestion_gap``, ``retrieval_gap``, ``kf_filtered``, ``generation_error``, ``unresolved``); ``None`` when correct.
    root_cause: str | None = None
    #: The stages the trace records (:data:`STAGE_FIELDS`): those the harness ran (all six for an answered question,
    #: the four up to assembly without an answer); one read by :meth:`from_dict`, those whose fields the record holds;
    #: none for a trace built in code without saying which.
    stages: list[str] = field(default_factory=list)
    #: The stages DCR counts, for a trace read from a trace-contract record
    #: (:func:`evolve.observe.contract.dcr_stages`, worked out before its item lists are dropped); ``None``: worked
    #: out from the trace's own fields. Not serialised.
    dcr_stages: list[str] | None = None
    #: ``{"stage", "type", "message"}`` when a role failed on this question (it is then never scored).
    error: dict | None = None

    @property
    def failed(self) -> bool:
        """Scored and judged wrong."""
        return self.scored and not self.correct

    def to_dict(self) -> dict[str, Any]:
        out = {"question_id": self.question_id, "conversation_id": self.conversation_id}
        out.update((f.name, getattr(self, f.name)) for f in fields(self))
        if out["error"] is None:
            del out["error"]
        del out["dcr_stages"]
        return out

    def deterministic_dict(self) -> dict[str, Any]:
        """:meth:`to_dict` without the measured times (retrieval and LLM latency): what equal inputs reproduce."""
        out = self.to_dict()
        del out["retrieval_ms"]
        out["llm"] = {role: {c: n for c, n in counts.items() if c != "latency_ms"} for role, counts in self.llm.items()}
        return out

    @classmethod
    def from_dict(cls, record: Any, where: str = "trace record") -> "Trace":
        """Read a serialised trace; :class:`TraceError` names the record and the field. Its ``stages`` are those
        whose fields the record holds (a ``stages`` value in the record is derived data and not trusted)."""
        if not isinstance(record, dict):
            raise TraceError(f"{where}: expected an object, got {type(record).__name__}")
        names = {f.name for f in fields(cls)}
        if "answer_kind" in record:  # written before verdicts
            kind = record["answer_kind"]
            if kind not in LEGACY_KINDS:
                raise TraceError(f"{where}: field 'answer_kind' is {kind!r}; expected one of "
                                 f"{sorted(k for k in LEGACY_KINDS if k)} or null")
            record = {k: v for k, v in record.items() if k != "answer_kind"}
            record.setdefault("verdict", LEGACY_KINDS[kind])
        unknown = sorted(set(record) - names)
        if unknown:
            raise TraceError(f"{where}: unknown field {unknown[0]!r}")
        missing = [n for n in ("question_id", "category", "correct") if n not in record]
        if missing:
            raise TraceError(f"{where}: missing field {missing[0]!r}")
        return cls(**{**record, "stages": recorded_stages(record)})


@dataclass(frozen=True)
class Summary:
    """Accuracy, F1 and evidence recall overall and per category, root causes and DCR@tau of one evaluation."""

    #: SHA-256 of the evaluated strategy's canonical JSON.
    strategy_hash: str
    #: The same without lineage fields (``version``, ``parent``, ``name``).
    policy_hash: str
    #: The benchmark spec evaluated (``synthetic:0:12``, ``locomo:PATH``, ...).
    benchmark: str
    #: Content hash of the benchmark's questions and conversations.
    benchmark_hash: str
    #: The judge's name (``token-f1@0.5`` for the token-F1 judge at threshold 0.5).
    judge: str
    #: Questions evaluated.
    n_questions: int
    #: Questions scored (adversarial questions and role failures left out).
    n_scored: int
    #: Share of scored questions judged correct (``None`` when none is scored).
    accuracy: float | None
    #: Mean token F1 over scored questions.
    f1: float | None
    #: Accuracy per category.
    accuracy_by_category: dict[str, float]
    #: Mean token F1 per category.
    f1_by_category: dict[str, float]
    #: Scored questions per category.
    n_by_category: dict[str, int]
    #: Mean evidence recall@k over questions with known evidence, keys ``"1"``, ``"5"``, ``"10"``.
    evidence_recall: dict[str, float | None]
    #: The same per category.
    evidence_recall_by_category: dict[str, dict[str, float | None]]
    #: Failures per root cause.
    root_causes: dict[str, int]
    #: Failures per category and root cause.
    root_causes_by_category: dict[str, dict[str, int]]
    #: Scored questions with known gold evidence (the evidence objective's population).
    n_evidence_known: int
    #: Mean share of the known gold turns the packed context carries.
    evidence_share: float | None
    #: Share of questions whose packed context carries every known gold turn (the evidence objective).
    all_evidence_packed: float | None
    #: The same per category.
    all_evidence_packed_by_category: dict[str, float]
    #: Scored questions the answer check counts, the scored questions it leaves out by reason
    #: (``{"no_evidence", "no_content_word"}``), and its two rates overall and per category.
    n_answer_known: int
    #: See ``n_answer_known``.
    answer_left_out: dict[str, int]
    #: Share of counted questions whose gold answer's content words are all in the packed items from gold turns (the answer objective).
    answer_in_evidence: float | None
    #: The same per category.
    answer_in_evidence_by_category: dict[str, float]
    #: Share of counted questions whose gold answer's content words are all anywhere in the packed context.
    answer_anywhere: float | None
    #: The same per category.
    answer_anywhere_by_category: dict[str, float]
    #: Packed context words per scored question, ``{"mean", "p95"}``.
    context_words: dict[str, float]
    #: Over scored questions with outdated evidence: ``{"n", "retrieved@5", "retrieved@10", "packed"}``, the share whose
    #: top 5 / top 10 retrieved items or packed context carry an outdated turn (empty when no question has one).
    staleness: dict[str, float | int]
    #: Scored answers by verdict: ``{"correct", "partial", "wrong", "abstain"}`` counts (empty when nothing was
    #: answered). Summaries written before verdicts hold ``{"correct", "abstain", "confabulated"}``.
    answers: dict[str, int]
    #: Retrieval time per query in milliseconds, ``{"p50", "p95"}``.
    retrieval_ms: dict[str, float]
    #: DCR@tau for each tau of :data:`DCR_TAUS` (keys ``"1"``, ``"3"``, ...) over the scored failures
    #: (:func:`evolve.observe.diagnosis.dcr`; 1 when nothing failed).
    dcr: dict[str, float]
    #: Adversarial questions: ``{"n", "scored", "evidence_recall@10"}``.
    adversarial: dict
    #: Questions a failing role left unscored (``on_role_error: mark``).
    role_failures: int
    #: LLM usage of the evaluation (its questions and the ingestion it needed), per role (empty when no role calls a
    #: model server).
    llm: dict[str, dict[str, int]]
    #: Ingestion cache hits and misses of the evaluation.
    ingestion_cache: dict[str, int]
    #: Wall time of the evaluation in seconds.
    wall_time_s: float
    #: Over scored abstention questions (the answer is not in the conversation): ``{"n", "correct", "accuracy"}``,
    #: an abstaining answer counting as correct (empty when there are none).
    abstention: dict[str, float | int] = field(default_factory=dict)
    #: Means of :attr:`Trace.retrieval_recall` over the scored questions that have one, with their count ``n``:
    #: ``{"n", "turn": {"recall_any@k", "recall_all@k"}, "session": {...}}`` (empty when none has one).
    retrieval_recall: dict = field(default_factory=dict)
    #: Scored answers flagged as confabulated (:attr:`Trace.confabulated`) and their share of two populations:
    #: ``{"flagged", "answers", "non_abstentions", "over_answers", "over_non_abstentions"}`` (a rate is ``None``
    #: when its population is empty; the whole is empty when nothing was answered).
    confabulation: dict = field(default_factory=dict)

    #: Fields kept in candidate and diagnosis records (the full summary goes to MLflow and ``summary.json``).
    BRIEF: ClassVar[tuple[str, ...]] = ("accuracy", "f1", "accuracy_by_category", "evidence_recall", "root_causes",
                                        "dcr", "n_scored", "judge", "strategy_hash", "n_evidence_known",
                                        "evidence_share", "all_evidence_packed", "all_evidence_packed_by_category",
                                        "n_answer_known", "answer_left_out", "answer_in_evidence",
                                        "answer_in_evidence_by_category", "answer_anywhere", "context_words",
                                        "staleness", "answers", "confabulation", "llm", "wall_time_s")

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def dcr_at(self, tau: int) -> float:
        """DCR@``tau`` (one of :data:`DCR_TAUS`)."""
        return self.dcr[str(tau)]

    def brief(self) -> dict[str, Any]:
        full = self.to_dict()
        return {k: full[k] for k in self.BRIEF}

    def metrics(self) -> dict[str, float]:
        """Flat numeric metrics for tracking."""
        out = {"accuracy": self.accuracy, "f1": self.f1, "evidence_share": self.evidence_share,
               "all_evidence_packed": self.all_evidence_packed, "answer_in_evidence": self.answer_in_evidence,
               "answer_anywhere": self.answer_anywhere, "context_words_mean": self.context_words["mean"],
               "context_words_p95": self.context_words["p95"], "retrieval_ms_p50": self.retrieval_ms["p50"],
               "retrieval_ms_p95": self.retrieval_ms["p95"]}
        out.update({f"llm.{role}.{c}": n for role, counts in self.llm.items() for c, n in counts.items()})
        out.update({f"dcr_at_{tau}": v for tau, v in self.dcr.items()})
        out.update({f"accuracy.{c}": v for c, v in self.accuracy_by_category.items()})
        out.update({f"recall_at_{k}": v for k, v in self.evidence_recall.items() if v is not None})
        out.update({f"root_cause.{c}": v for c, v in self.root_causes.items()})
        out.update({f"staleness.{k.replace('@', '_at_')}": v for k, v in self.staleness.items() if k != "n"})
        out.update({f"{level}_{k.replace('@', '_at_')}": v for level in ("turn", "session")
                    for k, v in self.retrieval_recall.get(level, {}).items()})
        if self.abstention:
            out["abstention_accuracy"] = self.abstention["accuracy"]
        out.update({f"confabulation.{k}": v for k, v in self.confabulation.items()
                    if k.startswith("over_") and v is not None})
        return out
