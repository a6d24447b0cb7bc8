"""Regressions of slices accepted with monitoring, from the journal's ``MONITOR`` entries (journaled by
:mod:`evolve.loop.monitor`): which accept, which slice, where it was checked and how far it fell."""
from __future__ import annotations

from evolve.ops.history import History
from evolve.ops.formatting import text_table
from evolve.state.entries import JournalEntry, MonitorPayload


def monitor_regressions(view: History, candidate_id: str | None = None) -> list[JournalEntry]:
    """The ``MONITOR`` entries, in journal order (only those of ``candidate_id`` when given)."""
    return [e for e in view.entries if isinstance(e.payload, MonitorPayload)
            and candidate_id in (None, e.payload.candidate_id)]


def regression_text(entry: JournalEntry) -> str:
    """One regression in words."""
    p = entry.payload
    return (f"{p.candidate_id} {p.category}: {p.where} in round {p.round}, {p.accepted_score:.3f} "
            f"when accepted -> {p.score:.3f} (more than epsilon {p.epsilon:.3f} below; entry {entry.index})")


def monitors_table(entries: list[JournalEntry]) -> str:
    rows = [{"accepted": e.payload.candidate_id, "slice": e.payload.category, "checked on": e.payload.where,
             "round": str(e.payload.round), "when accepted": f"{e.payload.accepted_score:.3f}",
             "now": f"{e.payload.score:.3f}", "entry": str(e.index)} for e in entries]
    return text_table(rows)
