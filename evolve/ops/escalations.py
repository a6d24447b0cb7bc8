"""Escalations: classes of candidates (``path::direction``) the loop could not pursue without a schema or framework
change, from ``escalations.json`` and the journal's ``ESCALATE`` entries.

A class is *blocked* in a round when the planner or the schema / range gates stopped its candidate, or when its
path sits at the schema bound it wants to pass; at the run config's ``escalation_threshold`` blocked rounds it is
*escalated* (journaled once). An escalated class is *resolved* once a later candidate along it was accepted, or
*answered* by a ``memevolve gate`` run that names it (``--answers KEY``; recorded in the gate store ``gate/`` under
these stores) with a verdict that changes the strategy.
"""
from __future__ import annotations

from dataclasses import dataclass

from evolve.loop.commit import BLOCKED_BY
from evolve.state.record import CandidateRecord
from evolve.ops.history import History
from evolve.state.entries import JournalEntry
from evolve.ops.formatting import text_table
from evolve.files import StoreError
from evolve.verify.decision import changes_strategy


@dataclass(frozen=True)
class Escalation:
    """One blocked class of candidates: the rounds it was blocked in, its candidates and its journal entry."""

    key: str
    rounds: tuple[int, ...]
    entry: JournalEntry | None  # the ESCALATE journal entry (None: blocked, not escalated)
    blocked: tuple[CandidateRecord, ...]
    resolved_by: str | None
    #: Gate runs that name this class (``memevolve gate --answers``), in commit order.
    answers: tuple[CandidateRecord, ...] = ()

    @property
    def status(self) -> str:
        if self.entry is None:
            return f"blocked in {len(self.rounds)} round(s), not escalated"
        if self.resolved_by:
            return f"resolved by {self.resolved_by}"
        if self.answers:
            last = self.answers[-1]
            done = "answered" if changes_strategy(last.verdict) else "answer refused"
            return f"{done} by gate {last.candidate_id} ({last.verdict})"
        return f"escalated (entry {self.entry.index}), open"

    @property
    def round(self) -> int | None:
        """The round it was escalated in (``None`` when it was not)."""
        return self.entry.round if self.entry else None

    @property
    def reason(self) -> str:
        if self.blocked:
            last = self.blocked[-1]
            return f"{last.decided_by}: {last.reason}"
        return "at its schema bound: only a schema change can move it further"


def escalations(view: History) -> list[Escalation]:
    """Every blocked class, escalated ones first (in escalation order), then the others by key."""
    doc = view.read_doc("escalations", None) or {"blocked": {}, "escalated": []}
    classes, escalated = (doc.get("blocked", {}), doc.get("escalated", [])) if isinstance(doc, dict) else (None, None)
    if not (isinstance(classes, dict) and all(isinstance(v, dict) for v in classes.values())
            and isinstance(escalated, list)):
        raise StoreError(view.layout.store("escalations"), "not an escalations document: expected a JSON object with "
                                                           "'blocked' (an object of objects) and 'escalated' (a list)")
    entries = {e.payload.key: e for e in view.entries if e.type == "ESCALATE"}
    gate = History(view.layout.gate).records if view.layout.gate.is_dir() else []
    out = []
    for key, seen in classes.items():
        entry = entries.get(key)
        blocked = tuple(r for r in view.records if r.direction.get("key") == key and r.decided_by in BLOCKED_BY)
        since = entry.round if entry else None
        resolved = next((r.candidate_id for r in view.records if r.direction.get("key") == key and since is not None
                         and r.round > since and changes_strategy(r.verdict)), None)
        answers = tuple(r for r in gate if r.symptom == key)
        out.append(Escalation(key, tuple(seen.get("rounds", [])), entry, blocked, resolved, answers))
    return sorted(out, key=lambda e: (e.entry is None, escalated.index(e.key) if e.key in escalated else 0, e.key))


def escalations_table(items: list[Escalation]) -> str:
    rows = [{"direction": e.key, "escalated in": str(e.round) if e.round is not None else "-",
             "blocked in rounds": ",".join(map(str, e.rounds)) or "-",
             "candidates": ",".join(r.candidate_id for r in e.blocked) or "-", "status": e.status}
            for e in items]
    return text_table(rows)
