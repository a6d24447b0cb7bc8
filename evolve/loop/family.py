"""A round's family of fully compared candidates: their gain tests' p adjusted together (Holm or Bonferroni,
``acceptance.multiple_testing``), and under a secondary rule the secondary outcome's p likewise, stored in each
record and decided again from the record alone.

Candidates are decided one by one as the round goes (merges and cost relief build on those verdicts); once the
round's candidates are all verified, the adjustment can only raise a p, so it can only turn an accept into
FEATURE_FLAG (``inconclusive``), never the reverse. A round with one fully compared candidate keeps its raw p.
"""
from __future__ import annotations

from typing import Iterable

from evolve.loop.candidate import CandidateResult
from evolve.state.records import decision_report
from evolve.verify.decision import AcceptanceRules, CostLimits, decide
from evolve.verify.multiplicity import Adjustment, adjust


def decide_family(results: Iterable[CandidateResult], rules: AcceptanceRules,
                  cost: CostLimits | None = None) -> list[CandidateResult]:
    """Adjust the round's fully compared candidates over their family and decide them again; returns those whose
    verdict changed."""
    compared = [r for r in results if r.record.paired is not None and r.record.decided_by == "decision"]
    if rules.multiple_testing == "none" or len(compared) < 2:
        return []
    family = [r.record.candidate_id for r in compared]
    raw = {r.record.candidate_id: r.record.paired.mcnemar_p for r in compared}
    adjusted = adjust(raw, rules.multiple_testing)
    secondary = {r.record.candidate_id: r.record.secondary.mcnemar_p for r in compared if r.record.secondary}
    secondary_adjusted = adjust(secondary, rules.multiple_testing)
    changed = []
    for r in compared:
        cid = r.record.candidate_id
        r.record.multiple_testing = Adjustment(rules.multiple_testing, family, raw[cid], adjusted[cid])
        if cid in secondary:
            r.record.secondary_testing = Adjustment(rules.multiple_testing, list(secondary), secondary[cid],
                                                    secondary_adjusted[cid])
        decision = decide(decision_report(r.record), rules, cost)
        if decision.verdict != r.record.decision.verdict:
            changed.append(r)
        r.record.decision = decision
    return changed
