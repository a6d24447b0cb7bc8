"""One candidate through the Verify half: evolver values → gates → critic → (with LLM answers: an LLM-free evidence
screen) → probe screen → paired comparison → decision (→ with a holdout, a would-be accept checked on it). Each stage's outcome lands in the candidate's
:class:`~evolve.loop.record.CandidateRecord`; the first stage that decides closes it, so cheap screens spare the
expensive evaluation."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from evolve.improve.effects import DimensionEffects
from evolve.improve.evolver import Evolver, EvolverError, Proposal
from evolve.improve.hypotheses import HypothesisTree
from evolve.improve.planner import Direction
from evolve.loop.holdout import Holdout
from evolve.loop.record import CandidateRecord
from evolve.observe.harness import EvalRun, Harness
from evolve.observe.summarize import usage_totals
from evolve.observe.objective import Objective, changed as objective_changed, success
from evolve.observe.trace import Trace
from evolve.state.records import decision_report
from evolve.strategy.artifact import derive, policy_hash, strategy_hash
from evolve.strategy.diff import diff_strategies, effective_changes
from evolve.verify.confabulation import confabulation_brief
from evolve.verify.critic import Critic, CriticPacket
from evolve.verify.decision import (
    AcceptanceRules, CostLimits, Decision, Verdict, decide, evidence_screen, probe_screen,
)
from evolve.verify.gates import GateContext, change_keys, run_gates
from evolve.verify.outcomes import ContextCost, ProbeOutcome
from evolve.verify.statistics import PairedBrief, PairedReport, paired_comparison

#: Improved / regressed questions kept per candidate record for review.
EXAMPLES_PER_SIDE = 25


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
    evaluated: set[str]  # policy hashes already evaluated (novelty gate)
    recent: list[list[str]]  # change keys of recently screened candidates not invited to grow (critic duplicates)


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
            return CandidateResult(record, current, None).close(Decision(Verdict.REJECT, str(exc), "evolver"),
                                                                "planner")
        candidate = derive(current, proposal.changes)
        diff = diff_strategies(current, candidate)
        record.strategy_hash, record.policy_hash = strategy_hash(candidate), policy_hash(candidate)
        record.changes, record.change_keys = proposal.changes, change_keys(current, candidate)
        record.diff, record.diff_text = diff.to_dict(), diff.render()
        record.optuna = {"study": proposal.study, "trial": proposal.trial_number}
        result = CandidateResult(record, candidate, proposal)

        trail = run_gates(candidate, current, GateContext(screen.evaluated, self.effects.to_dict(),
                                                          direction.symptom_key, self.max_reverts))
        record.gates = trail
        if not trail.passed:
            return result.close(Decision(Verdict.REJECT, trail.results[-1].reason, f"gate:{trail.decided_by}"),
                                f"gate:{trail.decided_by}")

        review = self.critic.review(self._packet(record, current, candidate, screen))
        self.tree.record_critique(review.label == "actionable")
        record.critic = review
        if review.blocks:
            return result.close(Decision(Verdict.REJECT, "; ".join(review.reasons), "critic"), "critic")

        if self.harness.roles.answers_call_models():
            flagged = self._evidence_screen(record, candidate, screen.run)
            if flagged is not None:
                return result.close(flagged, "evidence-screen")

        screened = self._probe(record, candidate, screen.run)
        if screened is not None:
            return result.close(screened, "probe")

        run = self.harness.evaluate(candidate, self.question_ids, desc=f"{cid} full")
        _spent(record, run)
        paired = paired_comparison(screen.run.outcomes(self.objective), run.outcomes(self.objective),
                                   alpha=self.rules.alpha, n_resamples=self.rules.bootstrap_resamples, seed=self.seed)
        result.run = run
        record.paired, record.dcr, record.summary = paired, run.summary.dcr_at(self.rules.dcr_tau), run.summary.brief()
        record.cost = ContextCost(screen.run.summary.context_words["mean"], run.summary.context_words["mean"])
        if run.summary.staleness:
            record.staleness = {"parent": screen.run.summary.staleness, "candidate": run.summary.staleness}
        record.examples = _examples(record.paired, screen.run, run)
        if self.objective == "accuracy":
            record.confabulation = confabulation_brief(screen.run.traces, run.traces, alpha=self.rules.alpha,
                                                       n_resamples=self.rules.bootstrap_resamples, seed=self.seed)
        record.secondary = secondary_brief(screen.run, run, self.rules, self.seed)
        decision = decide(decision_report(record), self.rules, self.cost)
        if decision.changes_strategy and self.holdout is not None:  # only what would change the strategy is checked
            record.holdout = self.holdout.compare(current, candidate)
            decision = decide(decision_report(record), self.rules, self.cost)
        return result.close(decision, "decision")

    def _packet(self, record: CandidateRecord, current: dict, candidate: dict, screen: Screen) -> CriticPacket:
        root_cause, _, category = record.symptom.partition("/")
        examples = [{"question_id": t.question_id, "question": t.question, "gold": t.gold_answer, "answer": t.answer}
                    for t in screen.run.traces
                    if t.root_cause == root_cause and category in ("*", t.category)][:3]
        return CriticPacket(effective_changes(current, candidate), record.change_keys, root_cause, category,
                            {k: self.effects.reputation(k) for k in record.change_keys}, examples,
                            screen.recent[-10:])

    def _evidence_screen(self, record: CandidateRecord, candidate: dict, base: EvalRun) -> Decision | None:
        """Evaluate the candidate up to the packed context (no answerer or judge call) and reject it if it loses gold
        evidence significantly against its parent."""
        run = self.harness.evaluate(candidate, self.question_ids, desc=f"{record.candidate_id} evidence screen",
                                    answer=False)
        _spent(record, run)
        paired = paired_comparison(base.outcomes("evidence"), run.outcomes("evidence"), alpha=self.rules.alpha,
                                   n_resamples=self.rules.bootstrap_resamples, seed=self.seed)
        record.evidence_screen = paired.brief()
        return evidence_screen(paired, self.rules)

    def _probe(self, record: CandidateRecord, candidate: dict, base: EvalRun) -> Decision | None:
        """Evaluate the probe subset; a decision if the probe already decides (objective drop, or inert)."""
        probe_run = self.harness.evaluate(candidate, self.probe_ids, desc=f"{record.candidate_id} probe")
        _spent(record, probe_run)
        before = base.by_id()
        base_acc = self._rate(before[q] for q in self.probe_ids if q in before)
        cand_acc = self._rate(probe_run.traces)
        changed = sum(objective_changed(before[t.question_id], t, self.objective) for t in probe_run.traces)
        answers = self.objective == "accuracy"
        record.probe = ProbeOutcome(len(self.probe_ids), base_acc, cand_acc, cand_acc - base_acc,
                                    answers_changed=changed if answers else None,
                                    packed_contexts_changed=None if answers else changed)
        screened = probe_screen(base_acc, cand_acc, self.rules)
        if screened is None and changed == 0:
            # The change did not alter what the objective judges on any probe question: a full evaluation
            # would be spent on noise.
            what = "answer" if answers else "packed context"
            return Decision(Verdict.FEATURE_FLAG, f"inert: no probe {what} changed", "probe-inert")
        return screened

    def _rate(self, traces: Iterable[Trace]) -> float:
        """Success rate of ``traces`` under the objective (0.0 when none counts)."""
        counted = [ok for t in traces if (ok := success(t, self.objective)) is not None]
        return sum(counted) / len(counted) if counted else 0.0


def secondary_brief(base: EvalRun, run: EvalRun, rules: AcceptanceRules, seed: int) -> PairedBrief | None:
    """Candidate ``run`` vs. parent ``base`` on the rules' secondary outcome, paired by question (``None`` without a
    secondary rule): what rule 5's secondary (fallback) step of :func:`~evolve.verify.decision.decide` reads."""
    if rules.secondary is None:
        return None
    return paired_comparison(base.outcomes(rules.secondary), run.outcomes(rules.secondary), alpha=rules.alpha,
                             n_resamples=rules.bootstrap_resamples, seed=seed).brief()


def _spent(record: CandidateRecord, run: EvalRun) -> None:
    """Add an evaluation's LLM usage to the candidate's (per role; nothing without LLM roles)."""
    record.llm = usage_totals([record.llm or {}, run.summary.llm]) or None


def _examples(paired: PairedReport, base: EvalRun, cand: EvalRun) -> dict:
    b, c = base.by_id(), cand.by_id()

    def row(qid: str) -> dict:
        return {"question_id": qid, "question": b[qid].question, "gold": b[qid].gold_answer,
                "category": b[qid].category, "baseline_answer": b[qid].answer, "candidate_answer": c[qid].answer,
                "baseline_root_cause": b[qid].root_cause, "candidate_root_cause": c[qid].root_cause}

    return {"improved": [row(q) for q in paired.improved[:EXAMPLES_PER_SIDE]],
            "regressed": [row(q) for q in paired.regressed[:EXAMPLES_PER_SIDE]]}
