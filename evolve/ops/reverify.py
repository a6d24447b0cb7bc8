"""Re-verification of a FEATURE_FLAG candidate under current conditions.

The flagged change is applied to the stores' *current* strategy, both are evaluated on the run config's benchmark
(the harness the stores were built on; another is refused) and compared paired by question id, exactly as a
round's full comparison is, and the decision contract says what it would decide now. The result is journaled as a
``REVERIFY`` entry and never applied: only a run changes the current strategy.
"""
from __future__ import annotations

from dataclasses import dataclass

from evolve.errors import EvolveError
from evolve.loop.config import RunConfig
from evolve.loop.holdout import Holdout
from evolve.state.record import CandidateRecord
from evolve.loop.setup import RunSetup
from evolve.ops.flags import REVERIFY, flagged_record
from evolve.ops.history import History
from evolve.files import StoreError
from evolve.state.stores import StoreSet
from evolve.strategy.artifact import StrategyError, derive, policy_hash, strategy_hash, validate_strategy
from evolve.verify.comparison import Comparison
from evolve.verify.decision import Decision, decide
from evolve.verify.dossier import compare


class NothingToVerify(EvolveError):
    """The current strategy already holds the flagged change."""


@dataclass(frozen=True)
class Reverification:
    """A flagged change against the current strategy: what was compared, the figures, what would be decided."""

    record: CandidateRecord
    current_hash: str
    candidate_hash: str
    harness: dict
    comparison: Comparison
    decision: Decision

    def payload(self) -> dict:
        """The ``REVERIFY`` journal entry's payload."""
        c = self.comparison
        optional = {name: getattr(c, name).to_dict() for name in ("secondary", "hypothesis")
                    if getattr(c, name) is not None}
        return {"candidate_id": self.record.candidate_id, "flagged_round": self.record.round,
                "flagged_decision": self.record.decision.to_dict() if self.record.decision else {},
                "changes": self.record.changes, "current_strategy": self.current_hash,
                "candidate_strategy": self.candidate_hash, "harness": self.harness, "paired": c.paired.to_dict(),
                "dcr": c.dcr, "cost": c.cost.to_dict(), "holdout": c.holdout.to_dict() if c.holdout else None,
                "confabulation": c.confabulation.to_dict() if c.confabulation else None, **optional,
                "would_decide": self.decision.to_dict(), "applied": False}


def applied_to(record: CandidateRecord, current: dict) -> dict:
    """The flagged change applied to ``current``, checked against the schema and invariants."""
    candidate = derive(current, record.changes)
    try:
        return validate_strategy(candidate, f"{record.candidate_id} applied to {strategy_hash(current)[:12]}")
    except StrategyError as exc:
        raise StrategyError(exc.source, exc.path, f"the flagged change does not fit the current strategy: {exc.rule}",
                            exc.line, exc.value) from None


def reverify(config: RunConfig, candidate_id: str) -> tuple[Reverification, dict]:
    """Evaluate flagged ``candidate_id`` applied to the current strategy of ``config.stores`` against that strategy,
    under the stores' run lock, and journal the result; the reverification and its journal entry."""
    setup = RunSetup.for_run(config)  # validates the config before the stores are touched
    record = flagged_record(History(config.stores), candidate_id)
    with StoreSet(config.stores) as store_set:
        view = History(config.stores)
        current_hash = view.state.get("current_strategy")
        if not current_hash:
            raise StoreError(view.layout.state, "no current strategy recorded (no round committed yet)")
        current = view.get_strategy(current_hash)
        candidate = applied_to(record, current)
        if policy_hash(candidate) == policy_hash(current):
            raise NothingToVerify(f"{candidate_id}: the current strategy {current_hash[:12]} already holds its change; "
                                  "nothing to re-verify")
        result = _evaluate(setup, record, current, candidate)
        return result, store_set.append_journal(REVERIFY, result.payload())


def _evaluate(setup: RunSetup, record: CandidateRecord, current: dict, candidate: dict) -> Reverification:
    config, rules = setup.config, setup.config.acceptance
    harness, holdout_harness, _, harness_id = setup.harness(progress=False)
    try:
        base = harness.evaluate(current, setup.question_ids, desc="current")
        run = harness.evaluate(candidate, setup.question_ids, desc=f"{record.candidate_id} re-verify")
        comparison = compare(base, run, rules, objective=config.objective, seed=config.seed, symptom=record.symptom)
        decision = decide(comparison, rules, config.cost)
        if decision.changes_strategy and holdout_harness is not None:  # as a round checks an accept
            comparison.holdout = Holdout(holdout_harness, setup.holdout_ids, config.objective, rules,
                                         seed=config.seed).compare(current, candidate)
            decision = decide(comparison, rules, config.cost)
    finally:
        harness.close()
        if holdout_harness is not None and holdout_harness is not harness:
            holdout_harness.close()
    return Reverification(record, strategy_hash(current), strategy_hash(candidate), harness_id, comparison, decision)

