"""The comparison dossier built from two evaluations of the same questions under the decision rules: what a round's
full comparison and a re-verification (``memevolve flags --verify``) decide on."""
from __future__ import annotations

from typing import Mapping

from evolve.observe.harness import EvalRun
from evolve.observe.objective import Objective
from evolve.verify.comparison import Comparison
from evolve.verify.confabulation import confabulation_brief
from evolve.verify.decision import AcceptanceRules
from evolve.verify.hypothesis import check, predicted
from evolve.verify.outcomes import ContextCost
from evolve.verify.statistics import PairedReport, paired_comparison


def paired(base: Mapping[str, dict], cand: Mapping[str, dict], rules: AcceptanceRules, seed: int) -> PairedReport:
    """Candidate vs. parent outcome maps compared under the rules' alpha and bootstrap resamples."""
    return paired_comparison(base, cand, alpha=rules.alpha, n_resamples=rules.bootstrap_resamples, seed=seed)


def compare(base: EvalRun, run: EvalRun, rules: AcceptanceRules, *, objective: Objective, seed: int,
            symptom: str | None = None) -> Comparison:
    """The dossier of candidate ``run`` against parent ``base`` on the same questions: the objective's paired report,
    DCR at the rules' tau, context cost, and as the rules and objective call for them the confabulation (accuracy
    objective), secondary-outcome and hypothesis (a candidate aimed at ``symptom``) comparisons."""
    report = paired(base.outcomes(objective), run.outcomes(objective), rules, seed)
    confab = (confabulation_brief(base.traces, run.traces, alpha=rules.alpha, n_resamples=rules.bootstrap_resamples,
                                  seed=seed) if objective == "accuracy" else None)
    secondary = (paired(base.outcomes(rules.secondary), run.outcomes(rules.secondary), rules, seed).brief()
                 if rules.secondary is not None else None)
    hypothesis = (check(predicted(symptom), report.per_category)
                  if symptom is not None and rules.hypothesis_check != "off" else None)
    return Comparison(report, run.summary.dcr_at(rules.dcr_tau),
                      ContextCost(base.summary.context_words["mean"], run.summary.context_words["mean"]),
                      confab, secondary, hypothesis)
