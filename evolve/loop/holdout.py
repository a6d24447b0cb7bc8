"""Held-out questions: the search, the probe and the decision never see them; a candidate the dev data would accept
must not regress on them (rule ``holdout`` of :func:`evolve.verify.decision.decide`)."""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import asdict

from evolve.observe.harness import EvalRun, Harness
from evolve.observe.objective import Objective
from evolve.strategy.artifact import strategy_hash
from evolve.verify.decision import AcceptanceRules
from evolve.verify.outcomes import HoldoutComparison
from evolve.verify.dossier import paired as compare_outcomes

#: Holdout evaluations kept per engine (the round's current strategy and the latest candidates).
KEEP = 4


class Holdout:
    """Evaluations of strategies on the held-out questions, and candidate-vs-parent comparisons there."""

    def __init__(self, harness: Harness, question_ids: list[str], objective: Objective, rules: AcceptanceRules, *,
                 seed: int):
        self.harness, self.question_ids, self.objective = harness, question_ids, objective
        self.rules, self.seed = rules, seed
        self._runs: OrderedDict[str, EvalRun] = OrderedDict()

    def run(self, strategy: dict) -> EvalRun:
        """``strategy`` on the held-out questions (the last few evaluations are kept)."""
        digest = strategy_hash(strategy)
        if digest not in self._runs:
            self._runs[digest] = self.harness.evaluate(strategy, self.question_ids, desc="holdout")
            while len(self._runs) > KEEP:
                self._runs.popitem(last=False)
        self._runs.move_to_end(digest)
        return self._runs[digest]

    def score(self, strategy: dict) -> float | None:
        return self.run(strategy).score(self.objective)

    def compare(self, parent: dict, candidate: dict) -> HoldoutComparison:
        """Candidate vs. parent on the held-out questions, paired by id: what the decision's holdout rule reads."""
        base, cand = self.run(parent), self.run(candidate)
        paired = compare_outcomes(base.outcomes(self.objective), cand.outcomes(self.objective), self.rules, self.seed)
        return HoldoutComparison(**asdict(paired.brief()), per_category=paired.per_category,
                                 score_parent=base.score(self.objective), score_candidate=cand.score(self.objective),
                                 improved=len(paired.improved), regressed=len(paired.regressed))
