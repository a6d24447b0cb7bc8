"""The comparison dossier built from two evaluations of the same questions under the decision rules: what a round's
full comparison, a re-verification (``memevolve flags --verify``) and ``memevolve gate`` decide on."""
from __future__ import annotations

from typing import Mapping, Sequence

from evolve.benchmarks.probe_mix import locomo_category
from evolve.observe.diagnosis import dcr
from evolve.observe.harness import EvalRun
from evolve.observe.objective import Objective, failure_view, outcomes as objective_outcomes
from evolve.observe.trace import Trace
from evolve.verify.comparison import Comparison
from evolve.verify.confabulation import confabulation_brief
from evolve.verify.decision import AcceptanceRules
from evolve.verify.hypothesis import Prediction, check, predicted
from evolve.verify.outcomes import ContextCost
from evolve.verify.statistics import PairedReport, paired_comparison


def paired(base: Mapping[str, dict], cand: Mapping[str, dict], rules: AcceptanceRules, seed: int) -> PairedReport:
    """Candidate vs. parent outcome maps compared under the rules' alpha and bootstrap resamples."""
    return paired_comparison(base, cand, alpha=rules.alpha, n_resamples=rules.bootstrap_resamples, seed=seed)


def failure_set(base: Mapping[str, dict], cand: Mapping[str, dict]) -> set[str]:
    """F, the failure/discordance set DCR is computed over: the questions the candidate fails under the objective,
    and those on which parent and candidate disagree."""
    return {q for q, o in cand.items() if not o["correct"] or (q in base and base[q]["correct"] != o["correct"])}


def failure_causes(traces: Sequence[Trace], counted: Mapping[str, dict]) -> dict[str, tuple[str, str | None]]:
    """Each ``counted`` question's category (as the digest names its symptoms) and root cause (``None``: no
    failure), from traces whose root causes are the objective's."""
    return {t.question_id: (locomo_category(t.category), t.root_cause) for t in traces if t.question_id in counted}


def compare_traces(base: Sequence[Trace], cand: Sequence[Trace], rules: AcceptanceRules, *, objective: Objective,
                   seed: int, cost: ContextCost, prediction: Prediction | None = None,
                   diagnosed: bool = False) -> Comparison:
    """The dossier of the candidate's traces against the parent's on the same questions: the objective's paired
    report, DCR at the rules' tau over F (:func:`failure_set`, the candidate's traces), the context ``cost``, and as
    the rules and objective call for them the confabulation (accuracy objective), secondary-outcome and hypothesis
    (``prediction``: a failure category and its predicted direction) comparisons. The hypothesis reads the root
    causes of the objective's failure view (:func:`~evolve.observe.objective.failure_view`), or those the traces
    carry when ``diagnosed`` (traces read from trace-contract records, diagnosed under the objective)."""
    base_outcomes, cand_outcomes = objective_outcomes(base, objective), objective_outcomes(cand, objective)
    report = paired(base_outcomes, cand_outcomes, rules, seed)
    confab = (confabulation_brief(base, cand, alpha=rules.alpha, n_resamples=rules.bootstrap_resamples, seed=seed)
              if objective == "accuracy" else None)
    secondary = (paired(objective_outcomes(base, rules.secondary), objective_outcomes(cand, rules.secondary), rules,
                        seed).brief() if rules.secondary is not None else None)
    hypothesis = None
    if prediction is not None and rules.hypothesis_check != "off":
        views = (base, cand) if diagnosed else (failure_view(base, objective), failure_view(cand, objective))
        hypothesis = check(prediction, failure_causes(views[0], base_outcomes), failure_causes(views[1], cand_outcomes),
                           rules.alpha)
    return Comparison(report, dcr(cand, rules.dcr_tau, failure_set(base_outcomes, cand_outcomes)), cost, confab,
                      secondary, hypothesis)


def compare(base: EvalRun, run: EvalRun, rules: AcceptanceRules, *, objective: Objective, seed: int,
            symptom: str | None = None) -> Comparison:
    """:func:`compare_traces` of two evaluations on the same questions, the hypothesis being that a candidate aimed
    at ``symptom`` makes that failure category rarer."""
    return compare_traces(base.traces, run.traces, rules, objective=objective, seed=seed,
                          cost=ContextCost(base.summary.context_words["mean"], run.summary.context_words["mean"]),
                          prediction=predicted(symptom) if symptom is not None else None)


#: Improved and regressed questions a record shows, each side.
EXAMPLES_PER_SIDE = 25


def examples(paired: PairedReport, base: Sequence[Trace], cand: Sequence[Trace]) -> dict[str, list[dict]]:
    """The first improved and regressed questions of ``paired`` with both sides' answers and root causes, as a
    record shows them."""
    b, c = {t.question_id: t for t in base}, {t.question_id: t for t in cand}

    def row(qid: str) -> dict:
        return {"question_id": qid, "conversation_id": b[qid].conversation_id, "question": b[qid].question, "gold": b[qid].gold_answer,
                "category": b[qid].category, "baseline_answer": b[qid].answer, "candidate_answer": c[qid].answer,
                "baseline_root_cause": b[qid].root_cause, "candidate_root_cause": c[qid].root_cause}

    return {"improved": [row(q) for q in paired.improved[:EXAMPLES_PER_SIDE]],
            "regressed": [row(q) for q in paired.regressed[:EXAMPLES_PER_SIDE]]}
