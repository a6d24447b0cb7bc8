"""One candidate through the Verify half: evolver values → gates → (with LLM answers: an LLM-free evidence screen) →
probe screen → critic (seeing the probe's deltas and examples) → paired comparison and hypothesis check → decision
(→ with a holdout, a would-be accept checked on it). Each stage's outcome lands in the candidate's
:class:`~evolve.state.record.CandidateRecord`; the first stage that decides closes it, so cheap screens spare the
expensive evaluation."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from evolve.improve.effects import DimensionEffects
from evolve.improve.evolver import Evolver, EvolverError, Proposal
from evolve.improve.hypotheses import HypothesisTree
from evolve.improve.planner import Direction
from evolve.loop.holdout import Holdout
from evolve.state.record import CandidateRecord
from evolve.observe.harness import EvalRun, Harness
from evolve.observe.summarize import usage_totals
from evolve.observe.objective import Objective, changed as objective_changed, success
from evolve.observe.trace import Trace
from evolve.strategy.artifact import derive, policy_hash, strategy_hash
from evolve.strategy.diff import diff_strategies, effective_changes
from evolve.verify.critic import Critic, CriticPacket
from evolve.verify.decision import (
    AcceptanceRules, CostLimits, Decision, Rule, Stage, Verdict, decide, evidence_screen, probe_screen,
)
from evolve.verify.dossier import compare, examples, paired as compare_outcomes
from evolve.verify.gates import GateContext, change_keys, run_gates
from evolve.verify.outcomes import ProbeOutcome
from evolve.verify.statistics import mcnemar_exact

#: Examples the critic sees: of the targeted symptom, and improved / regressed on the probe.
CRITIC_EXAMPLES = 3


@dataclass
class CandidateResult:
    """A verified candidate: its record, strategy, the evolver's proposal and, if fully evaluated, its run."""

    record: CandidateRecord
    strategy: dict
    proposal: Proposal | None
    run: EvalRun | None = None

    @property
    def decision(self) -> Decision | None:
        return self.record.decision

    @property
    def accepted(self) -> bool:
        return bool(self.decision and self.decision.changes_strategy)

    def close(self, decision: Decision, decided_by: str) -> "CandidateResult":
        self.record.close(decision, decided_by)
        return self


@dataclass
class Screen:
    """What the candidate is screened against: the round's current strategy and its evaluation."""

    current: dict
    run: EvalRun
    seen: dict[str, str]  # policies met before, by hash, and how (novelty gate)
    recent: list[list[str]]  # change keys of recently screened candidates not invited to grow (critic duplicates)


def policies_met(history: list[CandidateRecord]) -> dict[str, str]:
    """How each policy of ``history`` was met (:attr:`CandidateRecord.met`): its first evaluation, else its first
    refusal."""
    seen = {r.policy_hash: r.met for r in reversed(history) if not r.screened}
    return seen | {r.policy_hash: r.met for r in reversed(history) if r.screened}


class CandidateVerifier:
    """Turns a planner direction into a decided candidate on one harness under fixed acceptance rules."""

    def __init__(self, harness: Harness, evolver: Evolver, critic: Critic, effects: DimensionEffects,
                 tree: HypothesisTree, rules: AcceptanceRules, *, question_ids: list[str], probe_ids: list[str],
                 harness_id: dict, max_reverts: int, seed: int, objective: Objective = "accuracy",
                 cost: CostLimits | None = None, holdout: Holdout | None = None):
        self.harness, self.evolver, self.critic, self.holdout = harness, evolver, critic, holdout
        self.effects, self.tree, self.rules = effects, tree, rules
        self.objective, self.cost = objective, cost
        self.question_ids, self.probe_ids, self.harness_id = question_ids, probe_ids, harness_id
        self.max_reverts, self.seed = max_reverts, seed

    def verify(self, cid: str, round_no: int, direction: Direction, screen: Screen) -> CandidateResult:
        current = screen.current
        record = CandidateRecord(cid, round_no, direction.to_dict(), direction.symptom_key, strategy_hash(current),
                                 self.harness_id, merged_from=list(direction.merged_from) or None)
        try:
            proposal = self.evolver.propose(current, direction)
        except EvolverError as exc:
            return CandidateResult(record, current, None).close(Decision(Verdict.REJECT, str(exc), Rule.EVOLVER),
                                                                Stage.PLANNER)
        candidate = derive(current, proposal.changes)
        diff = diff_strategies(current, candidate)
        record.strategy_hash, record.policy_hash = strategy_hash(candidate), policy_hash(candidate)
        record.changes, record.change_keys = proposal.changes, change_keys(current, candidate)
        record.diff, record.diff_text = diff.to_dict(), diff.render()
        record.optuna = {"study": proposal.study, "trial": proposal.trial_number}
        result = CandidateResult(record, candidate, proposal)

        trail = run_gates(candidate, current, GateContext(screen.seen, self.effects.to_dict(),
                                                          direction.symptom_key, self.max_reverts))
        record.gates = trail
        if not trail.passed:
            return result.close(Decision(Verdict.REJECT, trail.results[-1].reason, Stage.gate(trail.decided_by)),
                                Stage.gate(trail.decided_by))

        if self.harness.roles.answers_call_models():
            flagged = self._evidence_screen(record, candidate, screen.run)
            if flagged is not None:
                return result.close(flagged, Stage.EVIDENCE_SCREEN)

        screened, probe_run = self._probe(record, candidate, screen.run)
        if screened is not None:
            return result.close(screened, Stage.PROBE)

        review = self.critic.review(self._packet(record, current, candidate, screen, probe_run))
        self.tree.record_critique(review.label == "actionable")
        record.critic = review
        if review.blocks:
            return result.close(Decision(Verdict.REJECT, "; ".join(review.reasons), Rule.CRITIC), Stage.CRITIC)

        run = self.harness.evaluate(candidate, self.question_ids, desc=f"{cid} full")
        _spent(record, run)
        result.run = run
        c = compare(screen.run, run, self.rules, objective=self.objective, seed=self.seed, symptom=record.symptom)
        record.paired, record.dcr, record.cost = c.paired, c.dcr, c.cost
        record.confabulation, record.secondary, record.hypothesis = c.confabulation, c.secondary, c.hypothesis
        record.summary = run.summary.brief()
        if run.summary.staleness:
            record.staleness = {"parent": screen.run.summary.staleness, "candidate": run.summary.staleness}
        record.examples = examples(record.paired, screen.run.traces, run.traces)
        decision = decide(record.comparison, self.rules, self.cost)
        if decision.changes_strategy and self.holdout is not None:  # only what would change the strategy is checked
            record.holdout = self.holdout.compare(current, candidate)
            decision = decide(record.comparison, self.rules, self.cost)
        return result.close(decision, Stage.DECISION)

    def _packet(self, record: CandidateRecord, current: dict, candidate: dict, screen: Screen,
                probe_run: EvalRun) -> CriticPacket:
        root_cause, _, category = record.symptom.partition("/")
        examples = [{"question_id": t.question_id, "question": t.question, "gold": t.gold_answer, "answer": t.answer}
                    for t in screen.run.traces
                    if t.root_cause == root_cause and category in ("*", t.category)][:CRITIC_EXAMPLES]
        return CriticPacket(effective_changes(current, candidate), record.change_keys, root_cause, category,
                            {k: self.effects.reputation(k) for k in record.change_keys}, examples,
                            screen.recent[-10:], probe=record.probe.to_dict(),
                            probe_examples=self._probe_examples(screen.run, probe_run))

    def _probe_examples(self, base: EvalRun, probe_run: EvalRun) -> dict[str, list[dict]]:
        """Up to :data:`CRITIC_EXAMPLES` probe questions the candidate improved and regressed under the objective."""
        before = base.by_id()
        out: dict[str, list[dict]] = {"improved": [], "regressed": []}
        for t in probe_run.traces:
            b, c = success(before[t.question_id], self.objective), success(t, self.objective)
            side = "improved" if (c and b is False) else "regressed" if (b and c is False) else None
            if side and len(out[side]) < CRITIC_EXAMPLES:
                out[side].append({"question_id": t.question_id, "category": t.category, "question": t.question,
                                  "gold": t.gold_answer, "parent_answer": before[t.question_id].answer,
                                  "candidate_answer": t.answer})
        return out

    def _evidence_screen(self, record: CandidateRecord, candidate: dict, base: EvalRun) -> Decision | None:
        """Evaluate the candidate up to the packed context (no answerer or judge call) and reject it if it loses gold
        evidence significantly against its parent."""
        run = self.harness.evaluate(candidate, self.question_ids, desc=f"{record.candidate_id} evidence screen",
                                    answer=False)
        _spent(record, run)
        paired = compare_outcomes(base.outcomes("evidence"), run.outcomes("evidence"), self.rules, self.seed)
        record.evidence_screen = paired.brief()
        return evidence_screen(paired, self.rules)

    def _probe(self, record: CandidateRecord, candidate: dict, base: EvalRun) -> tuple[Decision | None, EvalRun]:
        """Evaluate the probe subset: a decision if the probe already decides (objective drop, or inert), and the
        probe's run."""
        probe_run = self.harness.evaluate(candidate, self.probe_ids, desc=f"{record.candidate_id} probe")
        _spent(record, probe_run)
        before = base.by_id()
        base_acc = self._rate(before[q] for q in self.probe_ids if q in before)
        cand_acc = self._rate(probe_run.traces)
        changed = sum(objective_changed(before[t.question_id], t, self.objective) for t in probe_run.traces)
        answers = self.objective == "accuracy"
        pairs = [(success(before[t.question_id], self.objective), success(t, self.objective))
                 for t in probe_run.traces if t.question_id in before]
        counted = [(b, c) for b, c in pairs if b is not None and c is not None]
        record.probe = ProbeOutcome(len(self.probe_ids), base_acc, cand_acc, cand_acc - base_acc,
                                    answers_changed=changed if answers else None,
                                    packed_contexts_changed=None if answers else changed,
                                    mcnemar_p=mcnemar_exact(sum(c and not b for b, c in counted),
                                                            sum(b and not c for b, c in counted)))
        screened = probe_screen(base_acc, cand_acc, self.rules)
        if screened is None and changed == 0:
            # The change did not alter what the objective judges on any probe question: a full evaluation
            # would be spent on noise.
            what = "answer" if answers else "packed context"
            return Decision(Verdict.FEATURE_FLAG, f"inert: no probe {what} changed", Rule.PROBE_INERT), probe_run
        return screened, probe_run

    def _rate(self, traces: Iterable[Trace]) -> float:
        """Success rate of ``traces`` under the objective (0.0 when none counts)."""
        counted = [ok for t in traces if (ok := success(t, self.objective)) is not None]
        return sum(counted) / len(counted) if counted else 0.0


def _spent(record: CandidateRecord, run: EvalRun) -> None:
    """Add an evaluation's LLM usage to the candidate's (per role; nothing without LLM roles)."""
    record.llm = usage_totals([record.llm or {}, run.summary.llm]) or None
