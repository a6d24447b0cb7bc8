"""Aggregation: one evaluation's traces into its :class:`~evolve.observe.trace.Summary`."""
from __future__ import annotations

from collections import Counter, defaultdict
from statistics import mean
from typing import Iterable

import numpy as np

from evolve.observe.answer import content_words
from evolve.observe.diagnosis import dcr_by_tau, root_cause_counts
from evolve.observe.trace import RECALL_KS, Summary, Trace
from evolve.runtime.roles import ANSWER_VERDICTS
from evolve.strategy.artifact import policy_hash, strategy_hash


def summarize(strategy: dict, benchmark: str, benchmark_hash: str, judge: str, traces: list[Trace], wall: float,
              hits: int, misses: int, llm: dict[str, dict[str, int]]) -> Summary:
    """The summary of ``strategy``'s traces on the benchmark (name and content hash) under ``judge``: ``wall`` seconds,
    ingestion cache ``hits`` and ``misses``, ``llm`` usage per role."""
    scored = [t for t in traces if t.scored]
    known = [t for t in scored if t.evidence_known]
    by_cat: dict[str, list[Trace]] = defaultdict(list)
    for t in scored:
        by_cat[t.category].append(t)
    causes, causes_by_cat = root_cause_counts(traces)
    adversarial = [t for t in traces if t.category == "adversarial"]

    counted = [t for t in known if t.answer_in_evidence is not None]

    def rate(ts: list[Trace], name: str) -> float | None:
        """Mean of the answer check ``name`` over the questions of ``ts`` it counts (``None``: none)."""
        values = [getattr(t, name) for t in ts if t.answer_in_evidence is not None]
        return round(mean(values), 4) if values else None

    def recall(ts: list[Trace], k: int) -> float | None:
        ts = [t for t in ts if t.evidence_known]
        return round(mean(t.evidence_recall[str(k)] for t in ts), 4) if ts else None

    return Summary(
        strategy_hash=strategy_hash(strategy), policy_hash=policy_hash(strategy),
        benchmark=benchmark, benchmark_hash=benchmark_hash, judge=judge,
        n_questions=len(traces), n_scored=len(scored),
        accuracy=round(mean(t.correct for t in scored), 4) if scored else None,
        f1=round(mean(t.f1 for t in scored), 4) if scored else None,
        accuracy_by_category={c: round(mean(t.correct for t in ts), 4) for c, ts in sorted(by_cat.items())},
        f1_by_category={c: round(mean(t.f1 for t in ts), 4) for c, ts in sorted(by_cat.items())},
        n_by_category={c: len(ts) for c, ts in sorted(by_cat.items())},
        evidence_recall={str(k): recall(known, k) for k in RECALL_KS},
        evidence_recall_by_category={c: {str(k): recall(ts, k) for k in RECALL_KS}
                                     for c, ts in sorted(by_cat.items())},
        root_causes=causes, root_causes_by_category=causes_by_cat,
        n_evidence_known=len(known),
        evidence_share=round(mean(t.evidence_share for t in known), 4) if known else None,
        all_evidence_packed=round(mean(t.all_evidence_packed for t in known), 4) if known else None,
        all_evidence_packed_by_category={c: round(mean(t.all_evidence_packed for t in ts if t.evidence_known), 4)
                                         for c, ts in sorted(by_cat.items()) if any(t.evidence_known for t in ts)},
        n_answer_known=len(counted),
        answer_left_out={"no_evidence": len(scored) - len(known),
                         "no_content_word": sum(1 for t in known if not content_words(t.gold_answer))},
        answer_in_evidence=rate(counted, "answer_in_evidence"),
        answer_in_evidence_by_category={c: r for c, ts in sorted(by_cat.items())
                                        if (r := rate(ts, "answer_in_evidence")) is not None},
        answer_anywhere=rate(counted, "answer_anywhere"),
        answer_anywhere_by_category={c: r for c, ts in sorted(by_cat.items())
                                     if (r := rate(ts, "answer_anywhere")) is not None},
        context_words=context_words(scored),
        staleness=_staleness([t for t in scored if t.gold_outdated]),
        answers=_answers([t for t in scored if t.verdict]),
        retrieval_ms=_spread([t.retrieval_ms for t in scored], "p50", "p95"),
        dcr=dcr_by_tau(traces),
        adversarial={"n": len(adversarial), "scored": bool(adversarial and adversarial[0].scored),
                     "evidence_recall@10": recall(adversarial, 10)},
        role_failures=sum(1 for t in traces if t.error is not None),
        llm=llm,
        ingestion_cache={"hits": hits, "misses": misses},
        wall_time_s=round(wall, 3),
        abstention=_abstention([t for t in scored if t.abstention]),
        retrieval_recall=_retrieval_recall([t for t in scored if t.retrieval_recall]),
        confabulation=_confabulation([t for t in scored if t.verdict]),
    )


def context_words(scored: list[Trace]) -> dict[str, float]:
    """Packed context words per question of ``scored``, ``{"mean", "p95"}``, rounded as summaries report them."""
    return _spread([t.context_tokens for t in scored], "mean", "p95")


def _spread(values: list[float], *stats: str) -> dict[str, float]:
    """``stats`` ("mean", "p50", "p95") of ``values`` (0.0 for none), rounded for summaries."""
    values = values or [0.0]
    return {name: round(float(np.mean(values) if name == "mean" else np.percentile(values, int(name[1:]))), 3)
            for name in stats}


def _staleness(traces: list[Trace]) -> dict[str, float | int]:
    """Share of ``traces`` (questions with outdated evidence) whose top 5 / 10 retrieved items that passed the
    filter, or whose packed context, carry an outdated turn."""
    if not traces:
        return {}
    return {"n": len(traces),
            **{f"retrieved@{k}": round(mean(t.stale_retrieved[str(k)] for t in traces), 4) for k in (5, 10)},
            "packed": round(mean(bool(t.stale_packed) for t in traces), 4)}


def _answers(answered: list[Trace]) -> dict[str, int]:
    """Answered traces by verdict, every verdict present (empty when nothing was answered)."""
    counts = Counter(t.verdict for t in answered)
    return {v: counts[v] for v in ANSWER_VERDICTS} if answered else {}


def _confabulation(answered: list[Trace]) -> dict:
    """Flagged answers over all answers and over the answers that do not abstain (see :attr:`Summary.confabulation`)."""
    if not answered:
        return {}
    flagged = sum(bool(t.confabulated) for t in answered)
    asserting = sum(t.verdict != "abstain" for t in answered)
    return {"flagged": flagged, "answers": len(answered), "non_abstentions": asserting,
            "over_answers": round(flagged / len(answered), 4),
            "over_non_abstentions": round(flagged / asserting, 4) if asserting else None}


def _abstention(traces: list[Trace]) -> dict[str, float | int]:
    if not traces:
        return {}
    correct = sum(t.correct for t in traces)
    return {"n": len(traces), "correct": correct, "accuracy": round(correct / len(traces), 4)}


def _retrieval_recall(traces: list[Trace]) -> dict:
    """Means of the traces' turn- and session-level recall_any / recall_all at every k."""
    if not traces:
        return {}
    first = traces[0].retrieval_recall or {}
    return {"n": len(traces), **{level: {name: round(mean(t.retrieval_recall[level][name] for t in traces), 4)
                                         for name in names} for level, names in first.items()}}


def usage_totals(usages: Iterable[dict[str, dict[str, int]]]) -> dict[str, dict[str, int]]:
    """Per-role sums of LLM usage records (empty when no role calls a model server)."""
    totals: dict[str, Counter] = defaultdict(Counter)
    for usage in usages:
        for role, counts in usage.items():
            totals[role].update(counts)
    return {role: dict(counts) for role, counts in sorted(totals.items())}
