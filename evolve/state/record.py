"""The candidate record: everything the loop decided about one candidate, as stored in ``candidate_outcomes``.

:class:`CandidateRecord` is filled stage by stage by :mod:`evolve.loop.candidate`, each stage's outcome a typed
object; :mod:`evolve.state.records` stores it and reads it back for review, report and serving.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from evolve.verify.comparison import Comparison
from evolve.verify.critic import CriticReview
from evolve.verify.decision import Decision, Rule, Verdict, changes_strategy
from evolve.verify.gates import GateTrail
from evolve.verify.hypothesis import HypothesisCheck
from evolve.verify.multiplicity import Adjustment
from evolve.verify.outcomes import ContextCost, HoldoutComparison, ProbeOutcome
from evolve.verify.statistics import PairedBrief, PairedReport

#: Stage outcomes a record carries, in pipeline order (each ``None`` until the stage ran).
STAGES = ("gates", "evidence_screen", "probe", "critic", "paired")


@dataclass
class CandidateRecord:
    """One candidate: its change, each screening stage's outcome, the decision and whether it was applied."""

    candidate_id: str
    round: int
    direction: dict
    symptom: str
    parent_hash: str
    harness: dict
    strategy_hash: str = ""
    policy_hash: str = ""
    change_keys: list[str] = field(default_factory=list)
    changes: dict[str, Any] = field(default_factory=dict)
    diff: dict = field(default_factory=dict)
    diff_text: str = ""
    optuna: dict | None = None
    gates: GateTrail | None = None
    critic: CriticReview | None = None
    #: LLM-free screen on the evidence outcome (only when answers cost model calls).
    evidence_screen: PairedBrief | None = None
    probe: ProbeOutcome | None = None
    paired: PairedReport | None = None
    dcr: float | None = None
    #: Mean packed context words of parent and candidate (full runs).
    cost: ContextCost | None = None
    summary: dict | None = None
    examples: dict | None = None
    #: ``None`` until the candidate is decided (:meth:`close`).
    decision: Decision | None = None
    decided_by: str = ""
    applied: bool = False
    #: For a merge of a round's accepted candidates: their ids.
    merged_from: list[str] | None = None
    #: Candidate vs. parent on the held-out questions, for a candidate the dev data would accept.
    holdout: HoldoutComparison | None = None
    #: Candidate vs. parent on "the answer is flagged as confabulated" (:mod:`evolve.verify.confabulation`), paired by
    #: question: what the ``confabulation`` rule reads (accuracy objective, full runs; ``None`` otherwise).
    confabulation: PairedBrief | None = None
    #: The gain test's p adjusted over the round's fully compared candidates (``None``: the raw p decides, as in
    #: records written before the adjustment existed).
    multiple_testing: Adjustment | None = None
    #: LLM usage of the candidate's evaluations (screen, probe, full), per role (without LLM roles: ``None``).
    llm: dict | None = None
    #: Staleness of parent and candidate, ``{"parent", "candidate"}`` (full runs of a benchmark marking outdated
    #: evidence; ``None`` otherwise).
    staleness: dict | None = None
    #: Candidate vs. parent on the acceptance rules' ``secondary`` outcome, paired by question (full runs under such
    #: a rule; ``None`` otherwise), and its p adjusted over the round's fully compared candidates.
    secondary: PairedBrief | None = None
    secondary_testing: Adjustment | None = None
    #: The target category's predicted movement against the observed one (full runs of a candidate aimed at one
    #: category; ``None`` otherwise): what rule ``hypothesis_mismatch`` reads.
    hypothesis: HypothesisCheck | None = None

    @property
    def comparison(self) -> Comparison | None:
        """What the decision contract reads about a fully compared candidate (``None`` before its full comparison)."""
        if self.paired is None or self.dcr is None:
            return None
        return Comparison(self.paired, self.dcr, self.cost, self.confabulation, self.secondary, self.hypothesis,
                          self.holdout, self.multiple_testing, self.secondary_testing)

    @property
    def key(self) -> str:
        """The record's unique key in its store."""
        return self.candidate_id

    @property
    def rules(self) -> dict | None:
        """The decision rules the candidate was decided under (recorded with its harness; ``None`` before that)."""
        return (self.harness or {}).get("rules")

    @property
    def dcr_tau(self) -> int:
        """The tau of the record's DCR (3 before it was a rule)."""
        return ((self.rules or {}).get("acceptance") or {}).get("dcr_tau", 3)

    @property
    def verdict(self) -> Verdict | None:
        return self.decision.verdict if self.decision else None

    @property
    def reason(self) -> str:
        """The decision's reason, in words."""
        return self.decision.reason if self.decision else ""

    @property
    def delta(self) -> float:
        """Paired accuracy delta of a fully evaluated candidate (0 otherwise)."""
        return (self.paired.delta if self.paired else None) or 0.0

    @property
    def step_outcome(self) -> str | None:
        """``"accepted"`` or ``"inert"`` (changed nothing at the probe) when the next move along this direction should
        be larger rather than refused as a repeat (:mod:`evolve.improve.evolver` doubles its step); else ``None``."""
        if changes_strategy(self.verdict):
            return "accepted"
        return "inert" if self.decision and self.decision.rule == Rule.PROBE_INERT else None

    @property
    def screened(self) -> bool:
        """Whether the candidate reached the probe (it then used an evaluation slot)."""
        return self.probe is not None

    @property
    def met(self) -> str:
        """How the candidate's policy was met, as a later candidate of the same policy is told:
        ``evaluated in r007-c03`` (it reached the probe) or ``refused in r008-c03 by critic``."""
        return (f"evaluated in {self.candidate_id}" if self.screened
                else f"refused in {self.candidate_id} by {self.decided_by or 'a screen'}")

    def close(self, decision: Decision, decided_by: str) -> None:
        self.decision, self.decided_by = decision, decided_by
