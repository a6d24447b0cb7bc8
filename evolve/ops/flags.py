"""The FEATURE_FLAG registry: candidates the decision contract neither accepted nor rejected, why, whether the
current strategy has moved past them since, and the re-verifications journaled for them (``REVERIFY`` entries).

A flag's status compares the current strategy with the flagged change at the paths it changed:

* ``in current``: the current strategy already holds the flagged values (a later change made the same move);
* ``superseded``: the current strategy holds other values there than the flag's parent did (an accepted change
  since moved one of those paths; ``by`` names it when the current lineage records it);
* ``open``: the paths still hold the parent's values, so the change can be tried again as it was (``moved_on``
  says whether other paths of the current strategy changed since, i.e. whether the old verdict is stale).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from evolve.state.entries import JournalEntry
from evolve.state.record import CandidateRecord
from evolve.ops.history import History
from evolve.ops.formatting import change_summary, fmt_ci, fmt_num, text_table
from evolve.files import StoreError
from evolve.strategy.paths import get_path
from evolve.verify.statistics import PairedReport
from evolve.verify.decision import Verdict

#: Journal entry type of a re-verification.
REVERIFY = "REVERIFY"
_MISSING = object()


@dataclass(frozen=True)
class Flag:
    """One FEATURE_FLAG candidate against the current strategy of its stores."""

    record: CandidateRecord
    status: str
    moved_on: bool
    by: tuple[str, ...]
    reverified: tuple[JournalEntry, ...]

    def describe_status(self) -> str:
        if self.status == "superseded":
            return "superseded" + (f" by {', '.join(self.by)}" if self.by else " (current values differ)")
        if self.status == "open" and self.moved_on:
            return "open (strategy moved on)"
        return self.status


def _value(strategy: dict, path: str) -> Any:
    try:
        return get_path(strategy, path)
    except KeyError:
        return _MISSING


def flagged_record(view: History, candidate_id: str) -> CandidateRecord:
    """The record of FEATURE_FLAG candidate ``candidate_id``; :class:`StoreError` naming the store otherwise."""
    where = view.layout.store("candidate_outcomes")
    record = view.record(candidate_id)
    if record is None:
        raise StoreError(where, f"no candidate {candidate_id!r} (memevolve flags lists the flagged ones)")
    if record.verdict != Verdict.FEATURE_FLAG:
        raise StoreError(where, f"{candidate_id} was not FEATURE_FLAG but {record.verdict or 'undecided'} "
                                f"({record.reason}); only flagged candidates can be listed or re-verified")
    if not record.changes:
        raise StoreError(where, f"{candidate_id} records no change to re-apply")
    return record


def reverifications(view: History, candidate_id: str) -> tuple[JournalEntry, ...]:
    """The ``REVERIFY`` journal entries of ``candidate_id``, oldest first."""
    return tuple(e for e in view.entries if e.type == REVERIFY and e.payload.candidate_id == candidate_id)


def flag_of(view: History, record: CandidateRecord, current: dict) -> Flag:
    """``record`` (a FEATURE_FLAG) against the ``current`` strategy of ``view``."""
    parent = view.get_strategy(record.parent_hash)
    paths = list(record.changes)
    now = {p: _value(current, p) for p in paths}
    if all(now[p] == v for p, v in record.changes.items()):
        status = "in current"
    elif all(now[p] == _value(parent, p) for p in paths):
        status = "open"
    else:
        status = "superseded"
    lineage = view.lineage(view.state["current_strategy"])
    by = tuple(r.candidate_id for r in lineage if r.round >= record.round and set(r.changes) & set(paths))
    moved_on = view.state["current_strategy"] != record.parent_hash
    return Flag(record, status, moved_on, by if status != "open" else (), reverifications(view, record.candidate_id))


def flag_registry(view: History, round: int | None = None) -> list[Flag]:
    """Every FEATURE_FLAG candidate (of one round with ``round``), in commit order."""
    flagged = [r for r in view.records if r.verdict == Verdict.FEATURE_FLAG and (round is None or r.round == round)]
    if not flagged:
        return []
    if "current_strategy" not in view.state:  # a gate store (memevolve gate): no strategy the flag could join
        return [Flag(r, "gate run", False, (), ()) for r in flagged]
    current = view.get_strategy(view.state["current_strategy"])
    return [flag_of(view, r, current) for r in flagged]


def figures(record: CandidateRecord) -> str:
    """The figures the flag was decided on: the paired comparison, else the probe."""
    p, probe = record.paired, record.probe
    if p:
        return (f"Δ {p.delta:+.4f} p={fmt_num(p.mcnemar_p, '.3g')} CI {fmt_ci(p)} "
                f"(+{len(p.improved)}/-{len(p.regressed)} of {p.n})")
    if probe:
        return f"probe Δ {probe.delta:+.3f} on {probe.n}"
    return "-"


def reverified_text(entry: JournalEntry) -> str:
    """One re-verification in words: entry, the strategy it was compared with, the paired figures and verdict."""
    p, q = entry.payload, entry.payload.paired
    return (f"entry {entry.index} ({entry.ts[:19]}) vs current {p.current_strategy[:12]}: "
            f"{q['acc_baseline']:.3f} -> {q['acc_candidate']:.3f} Δ {q['delta']:+.4f} p={q['mcnemar_p']:.3g} "
            f"CI {fmt_ci(PairedReport.from_dict(q))}; would be {p.would_decide['verdict']} "
            f"({p.would_decide['rule']}); not applied")


def flags_table(flags: list[Flag]) -> str:
    """The registry as a text table."""
    rows = [{"id": f.record.candidate_id, "round": str(f.record.round), "change": change_summary(f.record, 48),
             "rule": f.record.decision.rule if f.record.decision else "-", "figures": figures(f.record),
             "strategy": f.record.strategy_hash[:12], "status": f.describe_status(),
             "re-verified": (f"{len(f.reverified)}× (last Δ {f.reverified[-1].payload.paired['delta']:+.4f})"
                             if f.reverified else "-")} for f in flags]
    return text_table(rows)
