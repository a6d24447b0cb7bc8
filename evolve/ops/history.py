"""The optimizer's history as the engineer reads it: typed candidate records, round rows and evaluation summaries
of one stores directory, read-only (a :class:`~evolve.state.view.StoreView` with the loop's record types)."""
from __future__ import annotations

from functools import cached_property

from evolve.state.record import CandidateRecord
from evolve.state.checkpoint import Checkpoint
from evolve.state.entries import DecisionPayload, ErasePayload, JournalEntry, NightRecord
from evolve.state.records import load_record, record_hash, report_hash
from evolve.state.view import StoreView
from evolve.verify.decision import DECISION_ENTRY_TYPES, changes_strategy, journal_type


class History(StoreView):
    """Candidate records, diagnosis log and scoreboard of the stores under ``root``; never writes."""

    @cached_property
    def records(self) -> list[CandidateRecord]:
        """All candidate records, in commit order."""
        return [load_record(r) for r in self.read_jsonl("candidate_outcomes")]

    @cached_property
    def diagnosis(self) -> list[dict]:
        """One entry per round: the observed strategy's summary, digest and planned directions."""
        return self.read_jsonl("diagnosis_log")

    @cached_property
    def rounds(self) -> list[dict]:
        """Scoreboard rows, one per committed round."""
        return self.read_doc("scoreboard", {"rounds": []})["rounds"]

    @cached_property
    def best(self) -> dict | None:
        """Manifest of the current best-ever checkpoint (``strategy_hash``, ``score``, ``round``, ...)."""
        return Checkpoint(self.layout.checkpoint).current_manifest()

    @cached_property
    def nights(self) -> list[tuple[int, NightRecord]]:
        """Every ended night (its ``NIGHT`` journal entry), with the entry's index."""
        return [(e.index, e.payload) for e in self.entries if isinstance(e.payload, NightRecord)]

    def record(self, candidate_id: str) -> CandidateRecord | None:
        return next((r for r in self.records if r.candidate_id == candidate_id), None)

    def summary_of(self, digest: str) -> dict | None:
        """The latest recorded evaluation summary of a strategy (round observation or candidate run)."""
        found = [d["summary"] for d in self.diagnosis if d.get("strategy_hash") == digest]
        found += [r.summary for r in self.records if r.strategy_hash == digest and r.summary]
        return found[-1] if found else None

    def lineage(self, digest: str) -> list[CandidateRecord]:
        """The accepted candidates that evolved the baseline into strategy ``digest``, oldest first (empty for the
        baseline or a strategy these stores never accepted)."""
        kept = sorted((r for r in self.records if changes_strategy(r.verdict) and r.strategy_hash),
                      key=lambda r: r.applied)  # an applied record wins over an accepted one of the same strategy
        accepted = {r.strategy_hash: r for r in kept}
        chain: list[CandidateRecord] = []
        while digest in accepted and len(chain) < len(accepted):
            chain.append(accepted[digest])
            digest = accepted[digest].parent_hash
        return chain[::-1]

    # ------------------------------------------------------------ records against the journal

    @cached_property
    def decision_entries(self) -> dict[str, JournalEntry]:
        """The journaled decision (ACCEPT / FLAG / REJECT entry of a round commit) of each candidate id."""
        return {e.payload.candidate_id: e for e in self.entries
                if e.type in DECISION_ENTRY_TYPES and e.round is not None and isinstance(e.payload, DecisionPayload)}

    def record_problem(self, record: CandidateRecord) -> str | None:
        """Why ``record`` (from ``candidate_outcomes.jsonl``) disagrees with its journaled decision, or ``None``."""
        entry = self.decision_entries.get(record.candidate_id)
        if entry is None:
            return f"{record.candidate_id}: no decision entry in the journal"
        p, at = entry.payload, f"journal entry {entry.index}"
        decided = record.decision.to_dict() if record.decision else {}
        if entry.type != journal_type(record.verdict) or p.decision != decided:
            journaled = p.decision.get("verdict", entry.type)
            return f"{record.candidate_id}: the record says {record.verdict}, {at} says {journaled}"
        if p.strategy_hash != record.strategy_hash:
            return (f"{record.candidate_id}: the record's strategy {record.strategy_hash[:12]} is not the journaled "
                    f"{str(p.strategy_hash)[:12]} ({at})")
        if p.report_hash != report_hash(record):
            return f"{record.candidate_id}: the record's evidence does not hash to the report_hash of {at}"
        if p.record_hash is not None:
            held = record_hash(record)
            expected, rewritten = self._after_erasures(record.candidate_id, p.record_hash)
            if held != expected:
                if held in rewritten:
                    return (f"{record.candidate_id}: erasure entry {rewritten[held]} rewrites this record, but the "
                            "rewrite was not written (the erasure was cut short): run the same `memevolve erase` "
                            "again")
                return f"{record.candidate_id}: the record does not hash to the record_hash of {at}"
        return None

    @cached_property
    def _rewrites(self) -> dict[str, list[dict]]:
        """Per candidate id, the journaled rewrites of its record by erasures (their entry index and
        ``{"before", "after"}``), in order."""
        out: dict[str, list[tuple[int, dict]]] = {}
        for e in self.entries:
            if isinstance(e.payload, ErasePayload):
                for cid, change in e.payload.records.items():
                    out.setdefault(cid, []).append((e.index, change))
        return out

    def _after_erasures(self, candidate_id: str, journaled: str) -> tuple[str, dict[str, int]]:
        """The hash the record must have now: the journaled one, carried through each erasure that rewrote the
        record from a hash it has had (a record written before words were kept by reference; an erasure run again
        after one cut short rewrites from the hash the cut left); and each earlier hash with the entry that rewrites
        it."""
        current, rewritten = journaled, {}
        for index, change in self._rewrites.get(candidate_id, ()):
            if change.get("before") == current or change.get("before") in rewritten:
                rewritten[change.get("before")] = index
                current = change.get("after")
        return current, rewritten

    def record_problems(self) -> list[str]:
        """Every disagreement between the candidate records and the journal (edited or deleted records). Records
        and decisions of a round not yet committed (``state.json`` read first) are left out: a commit in progress
        writes the records before the journal entries, and a reader may see either without the other."""
        committed = int(self.state.get("last_committed_round", 0))
        records = [r for r in self.records if r.round <= committed]
        problems = [why for r in records if (why := self.record_problem(r))]
        recorded = {r.candidate_id for r in records}
        problems += [f"{cid}: journal entry {e.index} decided it, but candidate_outcomes.jsonl has no record"
                     for cid, e in self.decision_entries.items() if cid not in recorded and e.round <= committed]
        return problems
