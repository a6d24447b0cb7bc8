"""Monitoring after ACCEPT_WITH_MONITOR: a protected slice that regressed when its candidate was accepted is checked
again, in every later round on the current strategy's observed run and, with a holdout, on the held-out questions
(also when it is accepted). A check is a regression when the slice's score there is more than its epsilon below the
score it had when accepted (on the holdout at acceptance: when the held-out slice itself dropped more than epsilon).
Regressions are journaled as ``MONITOR`` entries with the round's commit (:mod:`evolve.ops.monitors` shows them).
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass
from typing import Iterable, Mapping

from evolve.state.record import CandidateRecord
from evolve.verify.decision import TOLERANCE, AcceptanceRules, Verdict


@dataclass(frozen=True)
class SliceCheck:
    """One monitored slice checked once: where, its score when accepted and now, and the tolerated drop."""

    candidate_id: str
    category: str
    where: str  # "dev" (a later round's current strategy), "holdout" (later round) or "holdout at acceptance"
    round: int
    accepted_score: float
    score: float
    epsilon: float

    @property
    def regressed(self) -> bool:
        return self.score < self.accepted_score - self.epsilon - TOLERANCE

    def to_dict(self) -> dict:
        return asdict(self)


def monitored_slices(record: CandidateRecord, rules: AcceptanceRules) -> list[str]:
    """The protected slices an applied ACCEPT_WITH_MONITOR candidate regressed on (none for any other record)."""
    if not (record.applied and record.verdict == Verdict.ACCEPT_WITH_MONITOR and record.paired):
        return []
    return [c for c, row in sorted(record.paired.per_category.items())
            if c in rules.protected_slices and row["delta"] < -rules.epsilon(c) - TOLERANCE]


def slice_scores(outcomes: Mapping[str, dict]) -> dict[str, float]:
    """Per-category success rate of ``{question_id: {correct, category}}`` outcomes."""
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for o in outcomes.values():
        counts[o["category"]][0] += o["correct"]
        counts[o["category"]][1] += 1
    return {c: ok / n for c, (ok, n) in counts.items()}


def check_later(history: Iterable[CandidateRecord], n: int, rules: AcceptanceRules, dev: Mapping[str, dict],
                holdout: Mapping[str, dict] | None = None) -> list[SliceCheck]:
    """Round ``n``'s checks of every slice monitored by an earlier round's accept, on the current strategy's dev
    ``outcomes`` and (with a holdout) its held-out ones."""
    scores = {"dev": slice_scores(dev), "holdout": slice_scores(holdout) if holdout is not None else {}}
    out = []
    for record in history:
        if record.round >= n:
            continue
        for c in monitored_slices(record, rules):
            then = {"dev": record.paired.per_category[c]["acc_candidate"],
                    "holdout": (record.holdout.per_category.get(c) or {}).get("acc_candidate")
                    if record.holdout else None}
            out += [SliceCheck(record.candidate_id, c, where, n, then[where], scores[where][c], rules.epsilon(c))
                    for where in ("dev", "holdout") if then[where] is not None and c in scores[where]]
    return out


def check_at_acceptance(record: CandidateRecord, rules: AcceptanceRules) -> list[SliceCheck]:
    """The held-out checks of an ACCEPT_WITH_MONITOR candidate's monitored slices when it is accepted."""
    rows = record.holdout.per_category if record.holdout else {}
    return [SliceCheck(record.candidate_id, c, "holdout at acceptance", record.round, rows[c]["acc_baseline"],
                       rows[c]["acc_candidate"], rules.epsilon(c))
            for c in monitored_slices(record, rules) if c in rows]
