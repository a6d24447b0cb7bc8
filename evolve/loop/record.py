"""The candidate record: everything the loop decided about one candidate, as stored in ``candidate_outcomes``.

:class:`CandidateRecord` is filled stage by stage by :mod:`evolve.loop.candidate` and serialised by
:meth:`CandidateRecord.to_dict`; review, report and serving read it back with :meth:`CandidateRecord.from_dict`.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from evolve.canonical import canonical_hash
from evolve.verify.decision import Decision, changes_strategy

#: Stage outcomes a record carries, in pipeline order (each ``None`` until the stage ran).
STAGES = ("gates", "critic", "evidence_screen", "probe", "paired")
#: Fields left out of the stored record while ``None``.
OPTIONAL = ("merged_from", "holdout", "llm", "staleness")


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
    gates: dict | None = None
    critic: dict | None = None
    #: LLM-free screen on the evidence outcome (only when answers cost model calls).
    evidence_screen: dict | None = None
    probe: dict | None = None
    paired: dict | None = None
    dcr: float | None = None
    #: Mean packed context words of parent and candidate, ``{"words_parent", "words_candidate"}`` (full runs).
    cost: dict | None = None
    summary: dict | None = None
    examples: dict | None = None
    decision: dict = field(default_factory=dict)
    decided_by: str = ""
    applied: bool = False
    #: For a merge of a round's accepted candidates: their ids (omitted from the stored record otherwise).
    merged_from: list[str] | None = None
    #: Candidate vs. parent on the held-out questions, for a candidate the dev data would accept (omitted otherwise).
    holdout: dict | None = None
    #: LLM usage of the candidate's evaluations (screen, probe, full), per role (omitted without LLM roles).
    llm: dict | None = None
    #: Staleness of parent and candidate, ``{"parent", "candidate"}`` (full runs of a benchmark marking outdated
    #: evidence; omitted otherwise).
    staleness: dict | None = None

    @property
    def key(self) -> str:
        """The record's unique key in its store."""
        return self.candidate_id

    @property
    def verdict(self) -> str:
        return self.decision.get("verdict", "")

    @property
    def reason(self) -> str:
        """The decision's reason, in words."""
        return self.decision.get("reason", "")

    @property
    def delta(self) -> float:
        """Paired accuracy delta of a fully evaluated candidate (0 otherwise)."""
        return (self.paired or {}).get("delta") or 0.0

    @property
    def step_outcome(self) -> str | None:
        """``"accepted"`` or ``"inert"`` (changed nothing at the probe) when the next move along this direction should
        be larger rather than refused as a repeat (:mod:`evolve.improve.evolver` doubles its step); else ``None``."""
        if changes_strategy(self.decision.get("verdict", "")):
            return "accepted"
        return "inert" if self.decision.get("rule") == "probe-inert" else None

    @property
    def screened(self) -> bool:
        """Whether the candidate reached the probe (it then used an evaluation slot)."""
        return self.probe is not None

    def close(self, decision: Decision, decided_by: str) -> None:
        self.decision, self.decided_by = decision.to_dict(), decided_by

    def report(self) -> dict[str, Any]:
        """What the decision contract decided on (:func:`evolve.verify.decision.decide` replays it)."""
        out = {"paired": self.paired, "dcr": self.dcr, "cost": self.cost}
        return {**out, "holdout": self.holdout} if self.holdout is not None else out

    def report_hash(self) -> str:
        """Hash of the evidence behind the decision, journaled with the verdict."""
        keys = ("paired", "dcr", "probe", "gates", "critic", "decision") + (("cost",) if self.cost else ()) + \
            (("evidence_screen",) if self.evidence_screen else ()) + (("holdout",) if self.holdout else ())
        return canonical_hash({k: getattr(self, k) for k in keys})

    def record_hash(self) -> str:
        """Hash of the record, journaled with the verdict so that an edit of the stored record is detected. Left out:
        what differs between otherwise identical runs (the evaluation's wall time, and the Optuna trial number,
        which a resumed run allocates anew)."""
        data = self.to_dict()
        if data["summary"]:
            data["summary"] = {k: v for k, v in data["summary"].items() if k != "wall_time_s"}
        if data["optuna"]:
            data["optuna"] = {k: v for k, v in data["optuna"].items() if k != "trial"}
        return canonical_hash(data)

    def to_dict(self) -> dict[str, Any]:
        out = {"key": self.key, **{f.name: getattr(self, f.name) for f in fields(self)}}
        for name in OPTIONAL:  # fields newer than most records: stored only when set, so old hashes still hold
            if out[name] is None:
                del out[name]
        return out

    @classmethod
    def from_dict(cls, data: dict) -> "CandidateRecord":
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})
