"""Candidate records as stored in ``candidate_outcomes.jsonl``, and the hashes the journal keeps of them.

A stored record is ``{"key": <candidate id>, <each field of CandidateRecord in order>}``, each stage outcome as its
typed object's dict and the decision as ``{}`` before it is decided; the fields in :data:`OPTIONAL` are left out
while ``None``, as records written before they existed lack them (their hashes still hold).
"""
from __future__ import annotations

from dataclasses import fields
from typing import Any, Callable, Mapping

from evolve.canonical import canonical_hash
from evolve.state.record import STAGES, CandidateRecord
from evolve.files import StoreError
from evolve.verify.critic import CriticReview
from evolve.verify.decision import Decision
from evolve.verify.gates import GateResult, GateTrail
from evolve.verify.hypothesis import HypothesisCheck
from evolve.verify.multiplicity import Adjustment
from evolve.verify.outcomes import ContextCost, HoldoutComparison, ProbeOutcome
from evolve.verify.statistics import PairedBrief, PairedReport

#: Fields left out of the stored record while ``None``.
OPTIONAL = ("merged_from", "holdout", "confabulation", "multiple_testing", "llm", "staleness", "secondary",
            "secondary_testing", "hypothesis")


def _gates(data: Mapping[str, Any]) -> GateTrail:
    return GateTrail([GateResult(r["name"], r["passed"], r["reason"]) for r in data["results"]])


#: How each typed field is read back from its stored dict.
_READERS: dict[str, Callable[[Mapping[str, Any]], Any]] = {
    "gates": _gates,
    "critic": lambda data: CriticReview(data["label"], list(data["reasons"])),
    "evidence_screen": PairedBrief.from_dict,
    "probe": lambda data: ProbeOutcome(**data),
    "paired": PairedReport.from_dict,
    "cost": lambda data: ContextCost(data["words_parent"], data["words_candidate"]),
    "decision": lambda data: Decision.from_dict(data) if data else None,
    "holdout": HoldoutComparison.from_dict,
    "confabulation": PairedBrief.from_dict,
    "multiple_testing": Adjustment.from_dict,
    "secondary": PairedBrief.from_dict,
    "secondary_testing": Adjustment.from_dict,
    "hypothesis": HypothesisCheck.from_dict,
}


def _stored(name: str, value: Any) -> Any:
    if name == "decision":
        return value.to_dict() if value is not None else {}
    return value.to_dict() if name in _READERS and value is not None else value


def dump_record(record: CandidateRecord) -> dict[str, Any]:
    """The record as stored."""
    out: dict[str, Any] = {"key": record.key}
    for f in fields(CandidateRecord):
        value = getattr(record, f.name)
        if value is not None or f.name not in OPTIONAL:
            out[f.name] = _stored(f.name, value)
    return out


def load_record(data: Mapping[str, Any]) -> CandidateRecord:
    """A stored record read back (keys other than the record's fields are ignored); raises :class:`StoreError`
    naming the record when a stage outcome is malformed."""
    names = {f.name for f in fields(CandidateRecord)}
    values = {k: v for k, v in data.items() if k in names}
    try:
        for name, read in _READERS.items():
            if values.get(name) is not None:
                values[name] = read(values[name])
        return CandidateRecord(**values)
    except (KeyError, TypeError, ValueError) as exc:
        raise StoreError("candidate_outcomes", f"record {data.get('candidate_id')!r} is malformed: {exc!r}") from exc


def stage_outcomes(record: CandidateRecord) -> dict[str, dict]:
    """The stored outcome of each stage the candidate went through, in pipeline order."""
    return {stage: _stored(stage, getattr(record, stage)) for stage in STAGES if getattr(record, stage) is not None}


#: Optional record fields the decision contract reads when present.
_DECIDING = ("confabulation", "multiple_testing", "holdout", "secondary", "secondary_testing", "hypothesis")


def decision_report(record: CandidateRecord) -> dict[str, Any]:
    """The record's comparison as a stored report (:func:`evolve.verify.decision.decide` replays it), or the fields it
    has when it was never fully compared."""
    comparison = record.comparison
    if comparison is not None:
        return comparison.to_report()
    return {name: _stored(name, getattr(record, name)) for name in ("paired", "dcr", "cost")}


def report_hash(record: CandidateRecord) -> str:
    """Hash of the evidence behind the decision, journaled with the verdict."""
    keys = ("paired", "dcr", "probe", "gates", "critic", "decision") + (("cost",) if record.cost else ()) + \
        (("evidence_screen",) if record.evidence_screen else ()) + \
        tuple(name for name in _DECIDING if getattr(record, name) is not None)
    return canonical_hash({k: _stored(k, getattr(record, k)) for k in keys})


def record_hash(record: CandidateRecord) -> str:
    """Hash of the record, journaled with the verdict so that an edit of the stored record is detected. Left out:
    what differs between otherwise identical runs (the evaluation's wall time, and the Optuna trial number,
    which a resumed run allocates anew)."""
    data = dump_record(record)
    if data["summary"]:
        data["summary"] = {k: v for k, v in data["summary"].items() if k != "wall_time_s"}
    if data["optuna"]:
        data["optuna"] = {k: v for k, v in data["optuna"].items() if k != "trial"}
    return canonical_hash(data)
