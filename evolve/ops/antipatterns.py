"""The anti-pattern catalog (D²ACCI's table of the kinds of change that hurt): the directions a stores directory's
candidates tried that never stayed applied and were rejected, or applied and reverted (a night whose confirmation
refused its final restored its start), at least once; a change only ever flagged (inconclusive, or a gain its
hypothesis did not predict) did not hurt and is left out. Grouped by change, each with the rules that stopped it, its
mean paired delta and example traces of questions it lost."""
from __future__ import annotations

from dataclasses import dataclass, field
from statistics import fmean

from evolve.ops.history import History
from evolve.state.content import resolved
from evolve.verify.decision import Verdict, changes_strategy

#: Example traces shown per anti-pattern.
EXAMPLES = 2


@dataclass
class AntiPattern:
    """One change that never stayed applied, rejected or reverted at least once."""

    change: str
    rejected: int = 0
    reverted: int = 0
    flagged: int = 0
    rules: dict[str, int] = field(default_factory=dict)
    symptoms: set[str] = field(default_factory=set)
    deltas: list[float] = field(default_factory=list)
    candidates: list[str] = field(default_factory=list)
    #: Questions a candidate of this change lost (or, without any, failed), with both sides' answers and root causes.
    examples: list[dict] = field(default_factory=list)

    @property
    def tried(self) -> int:
        return self.rejected + self.reverted + self.flagged

    @property
    def mean_delta(self) -> float | None:
        return fmean(self.deltas) if self.deltas else None


def reverted_rounds(view: History) -> set[int]:
    """The rounds of every night whose confirmation refused its final (their accepts were undone)."""
    out: set[int] = set()
    for _, night in view.nights:
        if night.restored is not None:
            out |= set(range(night.first_round, night.last_round + 1))
    return out


def catalog(view: History) -> list[AntiPattern]:
    """The changes that never stayed applied, with at least one evaluated candidate rejected or reverted, most often
    tried first (a change that stayed applied once is no anti-pattern; planner-stage refusals, never evaluated, are
    left out)."""
    found: dict[str, AntiPattern] = {}
    undone = reverted_rounds(view)
    kept = {r.direction.get("key") for r in view.records if changes_strategy(r.verdict) and r.round not in undone}
    for r in view.records:
        change = r.direction.get("key")
        if r.verdict is None or change in kept or r.probe is None and r.paired is None:
            continue
        entry = found.setdefault(change, AntiPattern(change))
        if changes_strategy(r.verdict):
            entry.reverted += 1
        elif r.verdict == Verdict.REJECT:
            entry.rejected += 1
        else:
            entry.flagged += 1
        entry.rules[r.decision.rule] = entry.rules.get(r.decision.rule, 0) + 1
        entry.symptoms.add(r.symptom)
        entry.candidates.append(r.candidate_id)
        if r.paired is not None:
            entry.deltas.append(r.delta)
        shown = (resolved(r.examples, view.content) or {}).get("regressed") or []
        entry.examples += [{**row, "candidate_id": r.candidate_id} for row in shown][:EXAMPLES - len(entry.examples)]
    return sorted((a for a in found.values() if a.rejected or a.reverted),
                  key=lambda a: (-a.tried, -a.rejected - a.reverted, a.change))
