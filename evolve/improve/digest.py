"""Digester: turn per-question trace records into ranked symptoms the planner can act on.

A *symptom* is one ``root_cause/category`` cell of the failure table (``Symptom.key``), with
its severity (count and shares) and the evidence behind it. Aggregate symptoms (category
``*``) summarise one root cause over all categories. Each symptom carries *qualifiers*:
the share of its failures that show a sub-pattern the bundle table can target
(``kf_filtered[budget]``, ``generation_error[near_miss]``, ...; see :data:`QUALIFIERS`).
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from statistics import fmean
from typing import Any, Iterable

from evolve.benchmarks.probe_mix import locomo_category
from evolve.errors import EvolveError
from evolve.observe.ladder import ROOT_CAUSES, WORDS_CUT, RootCause, derives_from, losses_at
from evolve.observe.trace import Trace, TraceError
from evolve.strategy.policy import FACT_CATEGORIES

#: Sub-patterns per root cause, each the share of that symptom's failures showing it:
#: kf_filtered[<reason>] — a gold-derived item was filtered or dropped for <reason>;
#: retrieval_gap[no_subqueries] — the question was searched without any sub-query;
#: generation_error[near_miss] — answer partly overlaps gold (token F1 >= NEAR_MISS_F1);
#: generation_error[wrong_support] — the answer did not cite any gold-derived packed item;
#: generation_error[stale] — the packed context carried a turn the answer made outdated (``Trace.stale_packed``);
#: generation_error[stale_<category>] — and a retrieved fact of that behavioural category carried it;
#: generation_error[not_from_evidence] — the answer's words reached the context, not through items from the gold
#: turns (``Trace.answer_loss``; only the answer objective's failure view keeps it);
#: ingestion_gap[answer_not_stored], retrieval_gap[answer_not_retrieved], kf_filtered[answer_cut] — the answer
#: objective lost the answer's words at that rung; kf_filtered[words_cut] — every gold turn was cited, but the packed
#: units lost an answer word their turns carry (:data:`ANSWER_QUALIFIERS`);
#: <rung>[image_not_in_ikb | name_not_recovered | route_missed] — a gold image was lost to the image route
#: (``Trace.image_loss``), at its rung or one below (:func:`evolve.observe.ladder.losses_at`);
#: <rung>[event_unfused | edge_not_followed] — a chain of gold device events came apart (``Trace.event_loss``), there
#: or upstream.
QUALIFIERS: dict[RootCause, tuple[str, ...]] = {
    RootCause.INGESTION_GAP: ("answer_not_stored",) + losses_at(RootCause.INGESTION_GAP),
    RootCause.KF_FILTERED: ("budget", "superseded", "slot_superseded", "retracted", "expired", "pruned", "conflict",
                    "answer_cut", "words_cut") + losses_at(RootCause.KF_FILTERED),
    RootCause.RETRIEVAL_GAP: ("no_subqueries", "answer_not_retrieved") + losses_at(RootCause.RETRIEVAL_GAP),
    RootCause.GENERATION_ERROR: ("near_miss", "wrong_support", "stale", "not_from_evidence")
                        + tuple(f"stale_{c}" for c in FACT_CATEGORIES) + losses_at(RootCause.GENERATION_ERROR),
}
NEAR_MISS_F1 = 0.3
WILDCARD = "*"


class DigestError(EvolveError, ValueError):
    """A trace record lacks a field the digest needs or has an impossible value."""


@dataclass(frozen=True)
class Symptom:
    """One failure cell. ``share_of_failures`` = count / scored failures; ``share_of_category`` =
    count / scored questions of the category (all scored questions for category ``*``)."""

    root_cause: str
    category: str
    count: int
    share_of_failures: float
    share_of_category: float
    evidence: dict = field(default_factory=dict)

    @property
    def key(self) -> str:
        return f"{self.root_cause}/{self.category}"

    @property
    def qualifiers(self) -> dict[str, float]:
        return dict(self.evidence.get("qualifiers", {}))

    def to_dict(self) -> dict:
        return {"key": self.key, "root_cause": self.root_cause, "category": self.category, "count": self.count,
                "share_of_failures": self.share_of_failures, "share_of_category": self.share_of_category,
                "evidence": self.evidence}


@dataclass(frozen=True)
class Digest:
    """Symptoms per ``root_cause/category`` and per root cause (``*``), most severe first, plus run-wide signals."""

    n_questions: int
    n_failures: int
    symptoms: tuple[Symptom, ...]
    aggregates: tuple[Symptom, ...]
    signals: dict

    @property
    def accuracy(self) -> float:
        return 1.0 - self.n_failures / self.n_questions if self.n_questions else 0.0

    def ranked(self) -> list[Symptom]:
        """Aggregate and per-category symptoms together, most severe first (aggregates before equal cells)."""
        return sorted(self.aggregates + self.symptoms,
                      key=lambda s: (-s.count, s.category != WILDCARD, -s.share_of_category, s.key))

    def symptom(self, key: str) -> Symptom:
        for s in self.aggregates + self.symptoms:
            if s.key == key:
                return s
        raise KeyError(key)

    def to_dict(self) -> dict:
        return {"n_questions": self.n_questions, "n_failures": self.n_failures, "accuracy": self.accuracy,
                "signals": self.signals, "symptoms": [s.to_dict() for s in self.symptoms],
                "aggregates": [s.to_dict() for s in self.aggregates]}


# ---------------------------------------------------------------- per-record facts


def _where(record: dict | Trace, index: int) -> str:
    qid = record.question_id if isinstance(record, Trace) else record.get("question_id", "?")
    return f"trace record {index} (question_id {qid!r})"


def _checked(record: Any, index: int) -> Trace:
    """A :class:`Trace` (records read from ``traces.jsonl`` are parsed) whose failure has a known root cause."""
    if not isinstance(record, Trace):
        try:
            record = Trace.from_dict(record, _where(record, index) if isinstance(record, dict) else f"trace record {index}")
        except TraceError as exc:
            raise DigestError(str(exc)) from None
    if record.failed:
        if record.root_cause is None:
            raise DigestError(f"{_where(record, index)}: root_cause: a wrong answer needs a root cause")
        if record.root_cause not in ROOT_CAUSES:
            raise DigestError(f"{_where(record, index)}: root_cause: unknown value {record.root_cause!r}")
    return record


def _gold_ids(record: Trace) -> set[str]:
    """Ids of retrieved items that derive from a gold turn."""
    return {hit["id"] for hit in record.retrieved if derives_from(hit, record.gold_evidence)}


def _gold_rank(record: Trace) -> int | None:
    """Best (lowest) retrieval rank of a gold-derived item, if any was retrieved."""
    ranks = [hit["rank"] for hit in record.retrieved if derives_from(hit, record.gold_evidence)]
    return min(ranks) if ranks else None


def _loss_reasons(record: Trace) -> set[str]:
    """Why gold-derived retrieved items did not reach the context (filter and drop reasons)."""
    ids = _gold_ids(record)
    return {item["reason"] for item in record.filtered + record.dropped if item.get("id") in ids and item.get("reason")}


def _fill(record: Trace) -> float | None:
    return record.context_tokens / record.token_budget if record.token_budget else None


#: Answer-objective losses (``Trace.answer_loss``) that qualify their rung: the answer's words, not a cited turn,
#: were lost there, so moves that carry the dialogue itself lead.
ANSWER_QUALIFIERS = {"never_stored": "answer_not_stored", "not_retrieved": "answer_not_retrieved",
                     "cut_in_assembly": "answer_cut", WORDS_CUT: "words_cut"}


def _qualifier_hits(record: Trace) -> set[str]:
    cause = record.root_cause
    losses = {record.image_loss, record.event_loss} & set(QUALIFIERS.get(cause, ()))
    return _rung_hits(record) | losses


def _rung_hits(record: Trace) -> set[str]:
    cause = record.root_cause
    answer = {ANSWER_QUALIFIERS[record.answer_loss]} if record.answer_loss in ANSWER_QUALIFIERS else set()
    if cause == RootCause.INGESTION_GAP:
        return answer
    if cause == RootCause.KF_FILTERED:
        return (_loss_reasons(record) & set(QUALIFIERS[cause])) | answer
    if cause == RootCause.RETRIEVAL_GAP:
        return (set() if record.subqueries else {"no_subqueries"}) | answer
    if cause == RootCause.GENERATION_ERROR:
        hits = set()
        if record.f1 >= NEAR_MISS_F1:
            hits.add("near_miss")
        gold_packed = {p["id"] for p in record.packed if derives_from(p, record.gold_evidence)}
        if not gold_packed & set(record.answer_support):
            hits.add("wrong_support")
        if record.answer_loss == "packed_not_from_evidence":
            hits.add("not_from_evidence")
        if record.stale_packed:
            hits.add("stale")
            hits |= {f"stale_{hit['fact']['category']}" for hit in record.retrieved
                     if "fact" in hit and derives_from(hit, record.stale_packed)}
        return hits
    return set()


def _mean(values: Iterable[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return round(fmean(kept), 6) if kept else None


# ---------------------------------------------------------------- symptoms


def _evidence(failures: list[Trace]) -> dict:
    n = len(failures)
    hits = Counter(q for r in failures for q in _qualifier_hits(r))
    reasons = Counter(reason for r in failures for reason in _loss_reasons(r))
    ranks = [_gold_rank(r) for r in failures]
    retrieved_n = [len(r.retrieved) for r in failures]
    low = [rank > n_ret / 2 for rank, n_ret in zip(ranks, retrieved_n) if rank is not None]
    evidence: dict[str, Any] = {
        "question_ids": sorted(r.question_id for r in failures)[:20],
        "qualifiers": {q: round(hits[q] / n, 6) for q in QUALIFIERS.get(failures[0].root_cause, ())},
        "categories": dict(Counter(r.category for r in failures).most_common()),
        "intents": dict(Counter(r.intent or "unknown" for r in failures).most_common()),
        "gold_rank_mean": _mean(ranks),
        "gold_rank_low_share": round(sum(low) / len(low), 6) if low else None,
        "context_fill_mean": _mean(_fill(r) for r in failures),
        "f1_mean": _mean(r.f1 for r in failures),
    }
    if reasons:
        evidence["loss_reasons"] = dict(reasons.most_common())
    return evidence


def _symptom(cause: str, category: str, failures: list[Trace], n_failures: int, n_in_category: int) -> Symptom:
    count = len(failures)
    evidence = _evidence(failures)
    if category == WILDCARD:
        top, top_n = next(iter(evidence["categories"].items()))
        evidence["concentration"] = {"category": top, "share": round(top_n / count, 6)}
    return Symptom(cause, category, count, round(count / n_failures, 6),
                   round(count / n_in_category, 6) if n_in_category else 0.0, evidence)


def _signals(scored: list[Trace], failures: list[Trace]) -> dict:
    n = len(scored)
    budget_drops = sum(1 for r in scored if any(d.get("reason") == "budget" for d in r.dropped))
    recall = {k: _mean(r.evidence_recall.get(k) for r in scored) for k in ("1", "5", "10")}
    return {
        "root_causes": dict(Counter(r.root_cause for r in failures).most_common()),
        "gold_rank_mean": _mean(_gold_rank(r) for r in failures),
        "budget_drop_share": round(budget_drops / n, 6) if n else 0.0,
        "context_tokens_mean": _mean(r.context_tokens for r in scored),
        "token_budget_mean": _mean(r.token_budget for r in scored),
        "context_fill_mean": _mean(_fill(r) for r in scored),
        "evidence_recall_mean": recall,
    }


def digest(traces: Iterable[Trace | dict]) -> Digest:
    """Symptoms of the scored failures in ``traces`` (unscored, e.g. adversarial, questions are ignored).
    Records read from ``traces.jsonl`` (dicts) are accepted and checked."""
    records = [_checked(record, index) for index, record in enumerate(traces)]
    scored = [r for r in records if r.scored]
    failures = [r for r in scored if not r.correct]
    per_category = Counter(locomo_category(r.category) for r in scored)  # a probe's symptoms are its category's
    cells: dict[tuple[str, str], list[Trace]] = {}
    by_cause: dict[str, list[Trace]] = {}
    for r in failures:
        cells.setdefault((r.root_cause, locomo_category(r.category)), []).append(r)
        by_cause.setdefault(r.root_cause, []).append(r)
    symptoms = [_symptom(c, cat, rs, len(failures), per_category[cat]) for (c, cat), rs in cells.items()]
    aggregates = [_symptom(c, WILDCARD, rs, len(failures), len(scored)) for c, rs in by_cause.items()]

    def order(s: Symptom) -> tuple:
        return -s.count, -s.share_of_category, s.key

    return Digest(len(scored), len(failures), tuple(sorted(symptoms, key=order)),
                  tuple(sorted(aggregates, key=order)), _signals(scored, failures))
