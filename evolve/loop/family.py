"""A round's multiple-testing family: the gain tests' p of every candidate that reached the probe, adjusted together
(Holm, Bonferroni or Benjamini-Hochberg, ``acceptance.multiple_testing``), and under a secondary rule the secondary
outcome's p likewise, stored in each fully compared record and decided again from the record alone.

The family counts the candidates the probe screen or the critic (which sees the probe) stopped, with the probe's
exact McNemar p, as well as the fully compared ones: the probe is a look at the same kind of data that selects what
is tested in full, so leaving out what it stopped on its outcome would understate the number of tests. A candidate
the probe found inert (no probe answer or context changed) is not a test: it could not have been accepted whatever
its outcome, so it takes no part; nor do records written before the probe kept its p.

Candidates are decided one by one as the round goes (merges and cost relief build on those verdicts); once the
round's candidates are all verified, the adjustment can only raise a p, so it can only turn an accept into
FEATURE_FLAG (``inconclusive``), never the reverse. A family of one keeps its raw p.
"""
from __future__ import annotations

from typing import Iterable

from evolve.loop.candidate import CandidateResult
from evolve.verify.decision import AcceptanceRules, CostLimits, Rule, Stage, decide
from evolve.verify.multiplicity import Adjustment, adjust


def decide_family(results: Iterable[CandidateResult], rules: AcceptanceRules,
                  cost: CostLimits | None = None) -> list[CandidateResult]:
    """Adjust the round's family (fully compared and probe-stopped candidates) and decide the fully compared ones again;
    returns those whose verdict changed."""
    results = list(results)
    compared = [r for r in results if r.record.paired is not None and r.record.decided_by == Stage.DECISION]
    raw = {r.record.candidate_id: r.record.paired.mcnemar_p for r in compared}
    raw.update({r.record.candidate_id: r.record.probe.mcnemar_p for r in results if _probe_stopped(r)})
    if rules.multiple_testing == "none" or not compared or len(raw) < 2:
        return []
    family = list(raw)
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
        decision = decide(r.record.comparison, rules, cost)
        if decision.verdict != r.record.decision.verdict:
            changed.append(r)
        r.record.decision = decision
    return changed


def _probe_stopped(result: CandidateResult) -> bool:
    """Whether the candidate was stopped on its probe outcome: by the probe screen or the critic, not as inert."""
    record = result.record
    return (record.decided_by in (Stage.PROBE, Stage.CRITIC) and record.probe is not None
            and record.probe.mcnemar_p is not None and record.decision.rule != Rule.PROBE_INERT)
