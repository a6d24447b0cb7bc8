"""How a decided round becomes a :class:`~evolve.state.stores.RoundBundle`: candidate records and stage audits,
the diagnosis log, question histories, scoreboard, learned state, escalations and the journal entries; and the
check that a run's harness is the one its stores were committed on."""
from __future__ import annotations

from dataclasses import dataclass, field

from evolve.improve.digest import Digest
from evolve.improve.hypotheses import HypothesisTree
from evolve.improve.planner import Direction
from evolve.improve.reviewed import Reviewed
from evolve.loop.candidate import CandidateResult
from evolve.loop.monitor import SliceCheck
from evolve.observe.harness import EvalRun
from evolve.state.checkpoint import CheckpointRecord
from evolve.state.content import by_reference
from evolve.files import StoreError, read_json
from evolve.state.layout import StoreLayout
from evolve.state.records import dump_record, record_hash, report_hash, stage_outcomes
from evolve.state.stores import RoundBundle, StoreSet
from evolve.strategy.artifact import strategy_hash
from evolve.strategy.moves import Move
from evolve.strategy.schema import evolvable_dimensions
from evolve.strategy.paths import value_at
from evolve.verify.decision import Stage, journal_type

#: Decided-by stages that mean the move needs a framework/schema change, not another value.
BLOCKED_BY = (Stage.PLANNER, Stage.gate("schema"), Stage.gate("ranges"))


@dataclass
class RoundOutcome:
    """A decided round: from ``current`` (evaluated as ``run``) to ``new`` (``new_run``)."""

    round: int
    current: dict
    run: EvalRun
    new: dict
    new_run: EvalRun
    digest: Digest
    directions: list[Direction]
    planner_notes: list[str]
    results: list[CandidateResult]
    winner: CandidateResult | None
    restored: CheckpointRecord | None
    holdout_score: float | None = None  # the new current strategy on the held-out questions
    holdout_best_score: float | None = None  # the best-ever strategy there
    monitor: tuple[SliceCheck, ...] = ()  # the round's checks of slices accepted with monitoring
    #: The reviewers' labels the round's digest took (its symptom counts that came from reviewers).
    reviewed: Reviewed = field(default_factory=Reviewed)


def fill_bundle(bundle: RoundBundle, o: RoundOutcome, stores: StoreSet, *, baseline: dict, harness_id: dict,
                docs: dict, escalations: dict, restore_threshold: float) -> None:
    """Add the round's records, documents, journal entries and state to ``bundle`` (checkpoint already set)."""
    n, cur_hash, new_hash = o.round, strategy_hash(o.current), strategy_hash(o.new)
    bundle.strategies = [o.current, o.new] + [r.strategy for r in o.results if r.proposal is not None]
    for r in o.results:  # the words to the side store (before the WAL): records and journal hold references
        r.record.examples = by_reference(r.record.examples, stores.content)
    bundle.records["candidate_outcomes"] = [dump_record(r.record) for r in o.results]
    bundle.records["stage_audits"] = [
        {"key": f"{r.record.candidate_id}:{stage}", "candidate_id": r.record.candidate_id, "round": n,
         "stage": stage, "outcome": outcome}
        for r in o.results for stage, outcome in stage_outcomes(r.record).items()]
    bundle.records["diagnosis_log"] = [{
        "key": f"r{n:03d}", "round": n, "strategy_hash": cur_hash, "summary": o.run.summary.brief(),
        "digest": o.digest.to_dict(), "directions": [d.to_dict() for d in o.directions],
        "planner_notes": o.planner_notes, "reviewed": o.reviewed.model_dump()}]
    histories = stores.read_doc("question_histories", {})
    for t in o.new_run.traces:
        histories.setdefault(t.question_id, []).append(
            {"round": n, "strategy_hash": new_hash, "correct": t.correct, "root_cause": t.root_cause})
    objective = harness_id.get("objective", "accuracy")
    score = o.new_run.score(objective)
    scoreboard = stores.read_doc("scoreboard", {"rounds": []})
    best_score = max([bundle.checkpoint["score"]] if bundle.checkpoint else
                     [s.get("best_score", s.get("best_accuracy")) for s in scoreboard["rounds"]][-1:] or [score])
    accepted = o.winner.record.candidate_id if o.winner else None
    after = o.new_run.summary
    scoreboard["rounds"].append({
        "round": n, "strategy_hash": new_hash, "objective": objective, "score": score,
        "observed_score": o.run.score(objective), "best_score": best_score, "accuracy": after.accuracy,
        "observed_accuracy": o.run.summary.accuracy, "evidence_share": after.evidence_share,
        "all_evidence_packed": after.all_evidence_packed, "answer_in_evidence": after.answer_in_evidence,
        "answer_anywhere": after.answer_anywhere, "context_words": after.context_words["mean"],
        "holdout_score": o.holdout_score, "holdout_best_score": o.holdout_best_score,
        "root_causes": o.run.summary.root_causes, "dcr": o.run.summary.dcr,
        "accepted": accepted, "restored": o.restored is not None,
        "decisions": {r.record.candidate_id: r.record.verdict for r in o.results}})
    bundle.docs = {**docs, "question_histories": histories, "scoreboard": scoreboard, "escalations": escalations}
    for r in o.results:
        rec = r.record
        bundle.journal.append(("CANDIDATE", {"candidate_id": rec.candidate_id, "strategy_hash": rec.strategy_hash,
                                             "parent_hash": cur_hash, "diff": rec.diff, "decided_by": rec.decided_by}))
        bundle.journal.append((journal_type(rec.verdict), {
            "candidate_id": rec.candidate_id, "strategy_hash": rec.strategy_hash, "decision": rec.decision.to_dict(),
            "applied": rec.applied, "report_hash": report_hash(rec), "record_hash": record_hash(rec),
            "restore_to": cur_hash}))
    if o.restored is not None:
        bundle.journal.append(("RESTORE", {"from": strategy_hash(o.winner.strategy if o.winner else o.current),
                                           "to": o.restored.strategy_hash, "best_score": o.restored.score,
                                           "score": score,
                                           "why": f"below best-ever by more than {restore_threshold:.3f}"}))
    for key in escalations.get("new", []):
        bundle.journal.append(("ESCALATE", {"key": key, **escalations["blocked"][key]}))
    bundle.journal += [("MONITOR", check.to_dict()) for check in o.monitor if check.regressed]
    bundle.journal.append(("ROUND", {"round": n, "from": cur_hash, "to": new_hash,
                                     "accuracy": after.accuracy, "score": score, "harness": harness_id,
                                     "accepted": accepted}))
    bundle.state = {"current_strategy": new_hash, "baseline_strategy": strategy_hash(baseline), "harness": harness_id}


#: Harness identity fields that must match the stores' for their rounds to be comparable.
HARNESS_KEYS = ("benchmark_hash", "judge", "n_questions", "schema_hash", "objective", "holdout", "confirmation")
#: Values of harness fields recorded before they existed.
_HARNESS_DEFAULTS = {"objective": "accuracy", "holdout": None, "confirmation": None}


def check_harness(layout: StoreLayout, harness_id: dict) -> None:
    """Refuse (:class:`StoreError`, before anything is written) stores built on another benchmark, judge, question
    set or schema: their rounds, scores and best-ever checkpoint are not comparable with this run's."""
    recorded = (read_json(layout.state, {}) or {}).get("harness") if layout.state.is_file() else None
    if not recorded:
        return
    recorded = {**_HARNESS_DEFAULTS, **recorded}
    differs = [k for k in HARNESS_KEYS if recorded.get(k) != harness_id.get(k)]
    if differs:
        shown = "; ".join(f"{k}: stores {recorded.get(k)!r} ({recorded.get('benchmark')}), run config "
                          f"{harness_id.get(k)!r} ({harness_id.get('benchmark')})" for k in differs)
        raise StoreError(layout.state, f"these stores were built on a different harness ({shown}); use a new "
                                       "stores directory (--stores) for this benchmark")


def escalations(doc: dict, n: int, current: dict, results: list[CandidateResult], tree: HypothesisTree,
                threshold: int) -> dict:
    """Count candidate classes blocked for needing a framework/schema change; escalate at ``threshold``."""
    doc = {**doc, "new": []}
    blocked_keys = [r.record.direction["key"] for r in results if r.record.decided_by in BLOCKED_BY]
    blocked_keys += [key for key in tree.exhausted() if at_schema_bound(current, key)]
    for key in dict.fromkeys(blocked_keys):
        entry = doc["blocked"].setdefault(key, {"count": 0, "rounds": []})
        if n not in entry["rounds"]:
            entry["count"] += 1
            entry["rounds"].append(n)
        if entry["count"] >= threshold and key not in doc["escalated"]:
            doc["escalated"].append(key)
            doc["new"].append(key)
    return doc


def at_schema_bound(strategy: dict, key: str) -> bool:
    """Whether the single step ``key`` (stored text) wants to go past its schema range: only a schema change helps."""
    move = Move.parse(key)
    dim = evolvable_dimensions().get(move.first.path)
    return not move.coupled and dim is not None and move.first.at_bound(dim, value_at(strategy, dim.path))


def round_summary(o: RoundOutcome, wall: float) -> dict:
    """The round's one-screen summary (printed, tracked, returned by :meth:`Engine.round`)."""
    return {"round": o.round, "from": strategy_hash(o.current)[:12], "to": strategy_hash(o.new)[:12],
            "accuracy_before": o.run.summary.accuracy, "accuracy_after": o.new_run.summary.accuracy,
            "evidence_packed_before": o.run.summary.all_evidence_packed,
            "evidence_packed_after": o.new_run.summary.all_evidence_packed,
            "answer_in_evidence_before": o.run.summary.answer_in_evidence,
            "answer_in_evidence_after": o.new_run.summary.answer_in_evidence,
            "context_words_after": o.new_run.summary.context_words["mean"], "holdout_score_after": o.holdout_score,
            "accepted": o.winner.record.candidate_id if o.winner else None, "restored": o.restored is not None,
            "candidates": [{"id": r.record.candidate_id, "change": r.record.direction["key"],
                            "decided_by": r.record.decided_by, "verdict": r.record.verdict,
                            "delta": r.record.paired.delta if r.record.paired else None} for r in o.results],
            "monitor_regressions": [c.to_dict() for c in o.monitor if c.regressed],
            "wall_time_s": round(wall, 2)}
